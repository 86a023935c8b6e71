/// One poll's events as a stage runner reads them, whichever `ConsumerClient` gathered them:
/// librdkafka's `ConsumerBatch`, read in place, or the simulator's, held in memory. Valid only
/// inside the `pollBatch` body.
///
/// Each event comes out as a plain value (`PolledRecord`), so the runner's loop costs one call
/// per event through this protocol, the same for every client, with nothing to specialize.
public protocol PolledBatch {
    /// How many events the poll gathered.
    var count: Int { get }
    /// Partitions revoked while the batch was gathered, in order: the records gathered before
    /// belong to an assignment that no longer holds.
    var revocations: [ConsumerBatch.Revocation] { get }
    /// Event `index`, a record's fields read out.
    func event(at index: Int) -> ConsumerEvent<PolledRecord>
}

/// One consumed message as the runner and the stages read it: partition, offset and views of
/// its bytes, whichever client polled it.
///
/// The views point into the consumer's buffer and are valid only inside the `pollBatch` body
/// (for a stage, during the `Stage.process` call that received them): nothing is copied on
/// the hot path. A stage that keeps anything (an id, a dead letter's bytes) copies it or sends
/// it on before returning.
public struct PolledRecord: @unchecked Sendable {
    // @unchecked: read-only views of bytes that nobody mutates until the `pollBatch` body
    // returns, so they may be read from several threads at once (parallel normalization,
    // window tasks).
    public var partition: Int32
    public var offset: Int64
    public var key: UnsafeRawBufferPointer?
    /// nil for a tombstone; an empty buffer for an empty value.
    public var value: UnsafeRawBufferPointer?
    /// Epoch ms (create or log-append time); nil when the record has none.
    public var timestamp: Int64?
    /// How many Kafka headers the record carries (checked against the normalizer's limit; the
    /// headers themselves are not read). Worked out when asked, on the thread that judges the
    /// record (`HeaderCount`).
    public var headerCount: Int { counted.value }
    private var counted: HeaderCount

    package init(
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
}

/// How many headers a polled record carries, worked out when asked: on the thread that judges
/// the record, which reads the value next to the count anyway (`ConsumerRecord.headerCount`),
/// not on the polling thread, which reads no value. A plain function and the record it reads,
/// so that it costs no allocation and reads the same for every client.
package struct HeaderCount: @unchecked Sendable {
    // @unchecked: `record` is read-only until the `pollBatch` body returns, from any thread.
    private let record: UnsafeRawPointer?
    private let count: @convention(c) (UnsafeRawPointer?) -> Int

    /// `count(record)` when asked; `record` must stay valid as long as the poll's views do.
    package init(of record: UnsafeRawPointer?, _ count: @convention(c) (UnsafeRawPointer?) -> Int) {
        self.record = record
        self.count = count
    }

    package var value: Int { count(record) }
}
