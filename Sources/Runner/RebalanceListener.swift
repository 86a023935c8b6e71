import Kafka
import Logging

/// What a runner does when the group moves partitions, apart from the stage's own part: which
/// partitions are this runner's, where each starts (the previous owner's commit and checkpoint,
/// read with retries, never guessed), and what the log says. The runner calls it from inside
/// `poll`, on its own thread, and hands the results to its tracker and its stage.
struct RebalanceListener: RunnerPart {
    let context: RunnerContext
    /// Whether the group ever gave this runner partitions: an unknown topic after that means the
    /// topic was deleted.
    private(set) var everAssigned = false

    init(_ context: RunnerContext) { self.context = context }

    var client: String { settings.consumer["client.id"] ?? "" }

    /// The partitions of this runner's topic among those assigned; nil if there are none.
    mutating func claim(_ partitions: [TopicPartition]) -> [TopicPartition]? {
        let mine = partitions.filter { $0.topic == topic }
        guard !mine.isEmpty else { return nil }
        everAssigned = true
        return mine
    }

    /// Where each partition starts: what its previous owner committed, and where the
    /// partition's log begins and ends now. Without the checkpoints, windows already final would
    /// be reread partially and dead letters sent again, so it never carries on without them:
    /// a cluster that does not answer is thrown at once (the runner holds the partitions back
    /// and asks again), any other failure is retried and then stops the runner.
    func starts(of partitions: [TopicPartition], readingFrom consumer: any ConsumerClient) throws -> [PartitionStart] {
        for attempt in 1...3 {
            do {
                let committed = try consumer.committed(partitions)
                // Where every partition begins now: a commit is judged against it, and a group
                // without one begins there (`InputLoss.start`). Where it ends matters only for a
                // commit (a rebalance callback that asks the cluster less ends sooner).
                let resumed = committed.filter { $0.offset >= 0 }.map(\.topicPartition)
                let beginnings = try consumer.beginningOffsets(partitions)
                let ends = resumed.isEmpty ? [] : try consumer.endOffsets(resumed)
                return Self.starts(of: partitions, committed: committed, beginnings: beginnings, ends: ends)
            } catch let error as KafkaError where error.severity == .transient {
                throw error
            } catch {
                guard attempt < 3 else {
                    throw PipelineError.kafka(
                        "\(stageName): cannot read the committed offsets of \(topic) after 3 attempts (\(error)); stopping rather than rereading without checkpoints. Check the broker and the group's ACLs, then restart.")
                }
                logger.warning("\(stageName): reading committed offsets failed (attempt \(attempt) of 3): \(error)")
            }
        }
        return []
    }

    /// Start points from explicit offsets (an assignment without a group, or what the group
    /// said), with the log's bounds where known.
    static func starts(
        of partitions: [TopicPartition], committed: [TopicPartitionOffset], beginnings: [TopicPartitionOffset] = [],
        ends: [TopicPartitionOffset] = []
    ) -> [PartitionStart] {
        partitions.map { tp in
            let position = committed.first { $0.topicPartition == tp }
            let offset = position.flatMap { $0.offset >= 0 ? $0.offset : nil }
            func bound(_ offsets: [TopicPartitionOffset]) -> Int64? {
                offsets.first { $0.topicPartition == tp }.flatMap { $0.offset >= 0 ? $0.offset : nil }
            }
            return PartitionStart(
                partition: tp.partition, committedOffset: offset, metadata: position?.metadata, logStart: bound(beginnings),
                logEnd: bound(ends))
        }
    }

    /// Says that a partition's commit lies beyond its log: the topic was deleted and created
    /// again (or truncated) since, and reading starts over from its beginning.
    func logCommitBeyondTheLog(_ start: PartitionStart) {
        logger.warning(
            "\(stageName): the group \(group) committed offset \(start.committedOffset ?? 0) of \(topic)[\(start.partition)], but the partition now ends at \(start.logEnd ?? 0): the topic was deleted and created again (or truncated) since. Reading it from its beginning as a new incarnation: its positions are never taken for the old ones. If the topic was not meant to be replaced, check which cluster --brokers points at.")
    }

    /// The partitions being revoked that this runner owns.
    func releasing(_ partitions: [TopicPartition], ownedBy tracker: PartitionTracker) -> [TopicPartition] {
        partitions.filter { $0.topic == topic && tracker[$0] != nil }
    }

    func logAssigned(_ partitions: [TopicPartition]) {
        logger.info(
            "\(stageName): assigned \(partitions.count) partitions of \(topic): \(partitions.map(\.partition).sorted()); reading on from their committed offsets (window state is read back from the state topic first)",
            metadata: ["client": "\(client)"])
    }

    func logRevoked(_ partitions: [TopicPartition]) {
        logger.info(
            "\(stageName): revoked \(partitions.count) partitions of \(topic): \(partitions.map(\.partition).sorted())",
            metadata: ["client": "\(client)"])
    }

    /// librdkafka refused the partitions the group decided.
    func refusal(_ error: KafkaError) -> PipelineError {
        .kafka(
            "\(stageName): librdkafka refused the partitions the group \(group) decided: \(error). This member and the group disagree on what it owns; stopping without committing further (a restart rejoins cleanly).")
    }
}
