import Kafka

/// One consumed message as a stage sees it: partition, offset and views of its bytes.
///
/// The views point into the consumer's buffer and are valid only during the `Stage.process`
/// call that received them; nothing is copied on the hot path. A stage that keeps anything
/// (an id, a dead letter's bytes) copies it or sends it on before returning.
public struct InputRecord: @unchecked Sendable {
    // @unchecked: read-only views of bytes that nobody mutates while `process` runs, so they
    // may be read from several threads at once (parallel normalization, window tasks).
    public var partition: Int32
    public var offset: Int64
    public var key: UnsafeRawBufferPointer?
    /// nil for a tombstone; an empty buffer for an empty value.
    public var value: UnsafeRawBufferPointer?
    /// Epoch ms (create or log-append time); nil when the record has none.
    public var timestamp: Int64?
    /// How many Kafka headers the record carries (checked against `NormalizerLimits.maxHeaders`;
    /// the headers themselves are not read). Worked out when asked, on the thread that judges
    /// the record (`HeaderCount`).
    public var headerCount: Int { counted.value }
    private var counted: HeaderCount

    public init(
        partition: Int32, offset: Int64, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?,
        headerCount: HeaderCount
    ) {
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.counted = headerCount
    }

    init(_ record: PolledRecord) {
        self.init(
            partition: record.partition, offset: record.offset, key: record.key, value: record.value, timestamp: record.timestamp,
            headerCount: record.headerCount)
    }
}
