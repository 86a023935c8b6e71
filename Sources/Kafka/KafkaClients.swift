import Logging

/// What a stage runner asks of a consumer: the narrow surface between trackpipe's runner and
/// Kafka. `KafkaConsumer` (librdkafka) is the real one; the deterministic simulator has one
/// over an in-memory cluster, so that the real runner, with its real commit protocol, offset
/// guard and rebalance handling, runs under simulated faults (docs/simulation.md).
///
/// Rebalance callbacks (the `RebalanceHandler` given at creation) run inside `pollBatch`, on
/// the polling thread, as librdkafka runs them.
public protocol ConsumerClient: AnyObject {
    /// What a poll hands out: `ConsumerBatch` for librdkafka, read in place.
    associatedtype Batch: PolledBatch
    func subscribe(topics: [String]) throws
    func assign(_ offsets: [TopicPartitionOffset]) throws
    /// Gathers up to the batch size of events (waiting up to the timeout for the first) and
    /// hands them to `body`, valid only for its length; nil when nothing came.
    func pollBatch<R>(timeoutMilliseconds: Int32, _ body: (Batch) throws -> R) rethrows -> R?
    /// Commits exactly these offsets (the next offset to read), with their metadata.
    func commit(_ offsets: [TopicPartitionOffset]) throws
    func committed(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset]
    /// What another group has committed, without a client of its id (`KafkaConsumer.committed(by:)`).
    func committed(by group: String, _ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset]
    func beginningOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset]
    func endOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset]
    func pause(_ partitions: [TopicPartition]) throws
    func resume(_ partitions: [TopicPartition]) throws
    func seek(_ offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws
    /// The log bounds last seen in fetch responses, without a request (nil before the first).
    func cachedWatermarks(_ partition: TopicPartition) -> (low: Int64, high: Int64)?
    /// Leaves the group, revoking through the rebalance handler.
    func close()
    /// The `group.instance.id` the consumer joins with (static membership), nil for a dynamic member.
    var groupInstanceId: String? { get }
}

extension ConsumerClient {
    public func committed(_ partitions: [TopicPartition]) throws -> [TopicPartitionOffset] {
        try committed(partitions, timeoutMilliseconds: 10_000)
    }

    public func committed(by group: String, _ partitions: [TopicPartition]) throws -> [TopicPartitionOffset] {
        try committed(by: group, partitions, timeoutMilliseconds: 10_000)
    }

    public func beginningOffsets(_ partitions: [TopicPartition]) throws -> [TopicPartitionOffset] {
        try beginningOffsets(partitions, timeoutMilliseconds: 10_000)
    }

    public func endOffsets(_ partitions: [TopicPartition]) throws -> [TopicPartitionOffset] {
        try endOffsets(partitions, timeoutMilliseconds: 10_000)
    }

    public func seek(_ offsets: [TopicPartitionOffset]) throws { try seek(offsets, timeoutMilliseconds: 10_000) }
}

/// What a stage runner asks of a producer. Delivery reports (the `onDelivery` given at
/// creation) are served inside `poll`, `flush` and a `send` that waits for room.
public protocol ProducerClient: AnyObject, Sendable {
    /// A handle for sending to `name`, looked up once; throws where the client cannot make one.
    func topic(_ name: String) throws -> ProducerTopic
    /// Queues one record; throws only for what retrying cannot fix (record too large, unknown
    /// topic, a stop requested while the queue is full).
    func send(
        to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?, token: UInt64
    ) throws
    /// Queues one record whose headers lie encoded in `headerBlock` (see `KafkaHeaderBlock`).
    func send(
        to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headerBlock: KafkaHeaderBlock, timestamp: Int64?, token: UInt64
    ) throws
    /// Serves delivery reports; returns how many events were served.
    @discardableResult
    func poll(timeoutMilliseconds: Int32) -> Int
    /// Waits until every queued record has a delivery report, or throws (timed out) after the timeout.
    func flush(timeoutMilliseconds: Int32) throws
    /// Records queued or in flight, not yet reported.
    var outstanding: Int { get }
    /// A client that deletes records (DeleteRecords), for a runner that purges its input, asking
    /// over this producer's connections: a client of its own cost a connection to every broker
    /// (with its TLS or SASL handshake) and about 2 ms of CPU, for a request a commit interval.
    func recordDeleter() throws -> any RecordDeletionClient
}

/// A topic a producer sends to, by name, with the client's own handle for it (librdkafka's
/// topic object; nil for clients that need none).
public struct ProducerTopic: @unchecked Sendable {
    // @unchecked: the handle is an rd_kafka_topic_t, which librdkafka allows any thread to use;
    // its producer destroys it only in its deinit, after every send has returned.
    public let name: String
    let handle: OpaquePointer?

    /// `package`: a client of the package's own (the simulated cluster's) makes its topics too.
    package init(name: String, handle: OpaquePointer? = nil) {
        self.name = name
        self.handle = handle
    }
}

/// Makes the clients a stage runner uses. The runner asks for them when it starts, so a
/// simulated cluster can hand out clients that act on its own schedule.
public protocol KafkaClientFactory: Sendable {
    func consumer(
        config: KafkaConfig, logger: Logger, rebalance: RebalanceHandler?, maxBatch: Int, wakesFetcher: Bool,
        onError: (@Sendable (KafkaError) -> Void)?
    ) throws -> any ConsumerClient

    func producer(
        config: KafkaConfig, logger: Logger, onDelivery: (@Sendable (DeliveryReport) -> Void)?,
        onError: (@Sendable (KafkaError) -> Void)?, isStopping: @escaping @Sendable () -> Bool
    ) throws -> any ProducerClient
}

/// librdkafka's clients.
public struct LibrdkafkaClients: KafkaClientFactory {
    public init() {}

    public func consumer(
        config: KafkaConfig, logger: Logger, rebalance: RebalanceHandler?, maxBatch: Int, wakesFetcher: Bool,
        onError: (@Sendable (KafkaError) -> Void)?
    ) throws -> any ConsumerClient {
        try KafkaConsumer(config: config, logger: logger, rebalance: rebalance, maxBatch: maxBatch, wakesFetcher: wakesFetcher, onError: onError)
    }

    public func producer(
        config: KafkaConfig, logger: Logger, onDelivery: (@Sendable (DeliveryReport) -> Void)?,
        onError: (@Sendable (KafkaError) -> Void)?, isStopping: @escaping @Sendable () -> Bool
    ) throws -> any ProducerClient {
        try KafkaProducer(config: config, logger: logger, onDelivery: onDelivery, onError: onError, isStopping: isStopping)
    }
}

extension KafkaConsumer: ConsumerClient {}
extension KafkaProducer: ProducerClient {
    public func recordDeleter() throws -> any RecordDeletionClient { try RecordDeleter(sharing: self) }
}
