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

/// A consumed record as a stage runner reads it: its position, views of its bytes (valid only
/// inside the `pollBatch` body) and what the runner judges it by.
public struct PolledRecord: @unchecked Sendable {
    // @unchecked: read-only views of bytes nobody changes until the `pollBatch` body returns.
    public var partition: Int32
    public var offset: Int64
    public var key: UnsafeRawBufferPointer?
    /// nil for a tombstone; an empty buffer for an empty value.
    public var value: UnsafeRawBufferPointer?
    /// Epoch ms (create or log-append time); nil when the record has none.
    public var timestamp: Int64?
    /// How many Kafka headers the record carries (the headers themselves are not read).
    public var headerCount: Int

    public init(
        partition: Int32, offset: Int64, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?, headerCount: Int
    ) {
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headerCount = headerCount
    }
}
