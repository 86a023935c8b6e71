import Kafka
import Logging
import Synchronization

/// Reads messages back from the input topic by their position (`OriginalLookup`), for the
/// `too_late` dead letters of hits that crossed the shuffle without their original bytes.
///
/// Its consumer belongs to no group (it is assigned what it needs and commits nothing): each
/// lookup asks where each partition's log starts and ends (positions outside it are gone), is
/// assigned every partition from the lowest position asked, and reads until it has passed the
/// highest. Late hits are rare, so it is created on first use and kept for the next. Its clients
/// and clock are given (librdkafka and the wall clock in production), so that the simulator runs
/// this code against its cluster, slow brokers included.
public final class InputTopicLookup: OriginalLookup {
    private let config: KafkaConfig
    private let logger: Logger
    private let clients: any KafkaClientFactory
    private let clock: @Sendable () -> Int64
    /// How long a lookup may take, all its requests together, before it fails: it runs inside
    /// a commit, and a commit may run inside a revoke, for which the whole group waits.
    private let timeoutMilliseconds: Int64

    /// The default bound: a lookup of a few positions takes milliseconds; this much means the
    /// input's leaders do not answer, and is well below the group's rebalance timeout
    /// (max.poll.interval.ms, 300 s by default).
    public static let defaultTimeoutMilliseconds: Int64 = 10_000
    private let reader = Mutex<Reader?>(nil)

    /// The lookup's consumer. The mutex holds it; it is used only under the mutex, so on one
    /// thread at a time.
    private struct Reader: @unchecked Sendable {
        let consumer: any ConsumerClient
    }

    /// - Parameter config: the connection and security settings of a consumer of the input
    ///   topic (a `group.id` is required by the client but never joined).
    public init(
        config: KafkaConfig, logger: Logger, timeoutMilliseconds: Int64 = InputTopicLookup.defaultTimeoutMilliseconds,
        clients: any KafkaClientFactory = LibrdkafkaClients(), clock: @escaping @Sendable () -> Int64 = wallClockMillis
    ) {
        var config = config
        config["enable.partition.eof"] = "true"
        // Never a member: a static id belongs to the stage's own consumer.
        config["group.instance.id"] = nil
        self.config = config
        self.logger = logger
        self.timeoutMilliseconds = timeoutMilliseconds
        self.clients = clients
        self.clock = clock
    }

    public func messages(at positions: Set<InputPosition>) throws -> [InputPosition: InputMessage] {
        guard !positions.isEmpty else { return [:] }
        return try reader.withLock { reader in
            if reader == nil {
                reader = Reader(
                    consumer: try clients.consumer(
                        config: config, logger: logger, rebalance: nil, maxBatch: 1_024, wakesFetcher: true, onError: nil))
            }
            let consumer = reader!.consumer
            defer { try? consumer.assign([]) }
            do {
                // A topic at a time: the records a poll hands out name their partition only.
                let deadline = clock() + timeoutMilliseconds
                var found: [InputPosition: InputMessage] = [:]
                for (topic, ofTopic) in Dictionary(grouping: positions, by: \.topic).sorted(by: { $0.key < $1.key }) {
                    found.merge(try read(Set(ofTopic), of: topic, with: consumer, deadline: deadline)) { $1 }
                }
                return found
            } catch let error as PipelineError {
                throw error
            } catch {
                let partitions = Set(positions.map { TopicPartition(topic: $0.topic, partition: $0.partition) })
                throw PipelineError.kafka(
                    "cannot read \(positions.count) messages back from \(partitions.map(\.description).sorted().joined(separator: ", ")): \(error); check that the input topic's leaders answer")
            }
        }
    }

    private func read(
        _ positions: Set<InputPosition>, of topic: String, with consumer: any ConsumerClient, deadline: Int64
    ) throws -> [InputPosition: InputMessage] {
        var wanted: [TopicPartition: Set<Int64>] = [:]
        for position in positions {
            wanted[TopicPartition(topic: topic, partition: position.partition), default: []].insert(position.offset)
        }
        let partitions = Array(wanted.keys)
        func remaining() throws -> Int32 {
            let left = deadline - clock()
            guard left > 0 else { throw timedOut(positions.count, Array(wanted.keys)) }
            return Int32(clamping: left)
        }
        let starts = Dictionary(
            try consumer.beginningOffsets(partitions, timeoutMilliseconds: try remaining()).map { ($0.topicPartition, $0.offset) },
            uniquingKeysWith: max)
        let ends = Dictionary(
            try consumer.endOffsets(partitions, timeoutMilliseconds: try remaining()).map { ($0.topicPartition, $0.offset) },
            uniquingKeysWith: min)
        // What each partition still holds of what was asked, and the last offset to read to.
        var remaining: [TopicPartition: Int64] = [:]
        var assignment: [TopicPartitionOffset] = []
        for (tp, offsets) in wanted {
            let start = max(0, starts[tp] ?? 0), end = ends[tp] ?? 0
            let held = offsets.filter { $0 >= start && $0 < end }
            guard let first = held.min(), let last = held.max() else { continue }
            wanted[tp] = held
            remaining[tp] = last
            assignment.append(TopicPartitionOffset(tp, offset: first))
        }
        guard !assignment.isEmpty else { return [:] }
        try consumer.assign(assignment)
        var found: [InputPosition: InputMessage] = [:]
        while !remaining.isEmpty {
            guard clock() < deadline else { throw timedOut(positions.count, Array(remaining.keys)) }
            var failure: KafkaError?
            _ = consumer.pollBatch(timeoutMilliseconds: 100) { batch in
                for index in 0..<batch.count {
                    switch batch.event(at: index) {
                    case .record(let record):
                        let tp = TopicPartition(topic: topic, partition: record.partition)
                        guard let last = remaining[tp] else { continue }
                        if wanted[tp]?.contains(record.offset) == true {
                            found[InputPosition(topic: tp.topic, partition: tp.partition, offset: record.offset)] = InputMessage(
                                key: record.key.map { Array($0) }, value: record.value.map { Array($0) }, timestamp: record.timestamp)
                        }
                        if record.offset >= last { remaining[tp] = nil }
                    case .partitionEOF(let tp, let offset):
                        if let last = remaining[tp], offset > last { remaining[tp] = nil }
                    case .error(let error):
                        if error.severity == .fatal { failure = error } else { logger.warning("reading the input back: \(error)") }
                    }
                }
            }
            if let failure { throw failure }
        }
        return found
    }

    private func timedOut(_ count: Int, _ partitions: [TopicPartition]) -> PipelineError {
        .kafka(
            "cannot read \(count) messages back from \(partitions.map(\.description).sorted().joined(separator: ", ")) within \(timeoutMilliseconds / 1000) s, to dead-letter too_late hits as they arrived; check that the input topic's leaders answer")
    }
}
