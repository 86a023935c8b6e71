import Kafka

/// When a runner deletes the records of its input, and how far: the purge of the repartition
/// topic, as Kafka Streams purges its repartition topics after each commit (KAFKA-6150). A
/// value without a clock or a client, so that every rule is tested with plain values:
///
/// - a purge follows a commit that went through, at most once every `interval`, and one
///   request at a time (the next waits for the answer to the last);
/// - each partition goes up to the offset the group committed for it, never further: below the
///   aggregate group's commit no owner reads again (a new owner starts at the commit, and the
///   windows counted below it are in the state topic);
/// - only the partitions the runner owns when it asks are purged (a partition given away is its
///   new owner's to purge), and one already purged up to its commit is not asked again;
/// - a purge that failed is asked again after the interval, with what is committed then.
struct PurgeSchedule {
    /// The least time between two requests (ms).
    let interval: Int64
    /// Per partition, a log start the cluster confirmed: every record below it is gone.
    private(set) var purged: [TopicPartition: Int64] = [:]
    /// The request waiting for its answer.
    private(set) var inFlight: [TopicPartitionOffset]?
    private var lastRequest: Int64?

    init(interval: Int64) {
        precondition(interval > 0, "a purge interval of 0 means no purge: no schedule")
        self.interval = interval
    }

    /// A commit went through: the purge to request now, if one is due, each of the owned
    /// partitions' `committed` offsets above what is known purged (metadata dropped); nil
    /// while a request waits for its answer, within `interval` of the last request, or when
    /// nothing would move.
    mutating func afterCommit(_ committed: [TopicPartitionOffset], now: Int64) -> [TopicPartitionOffset]? {
        guard inFlight == nil else { return nil }
        if let lastRequest, now - lastRequest < interval { return nil }
        let due = committed.filter { $0.offset > max(0, purged[$0.topicPartition] ?? 0) }.map {
            TopicPartitionOffset($0.topicPartition, offset: $0.offset)
        }
        guard !due.isEmpty else { return nil }
        inFlight = due
        lastRequest = now
        return due
    }

    /// The last purge of a bounded run, after its last commit: due whatever the interval (nil
    /// while a request waits for its answer, or when nothing would move).
    mutating func atEnd(_ committed: [TopicPartitionOffset]) -> [TopicPartitionOffset]? {
        lastRequest = nil
        return afterCommit(committed, now: 0)
    }

    /// The answer to the request in flight came: what was deleted is known purged (a log start
    /// above the one asked for is another owner's purge, or retention), and the next may go.
    mutating func answered(_ deletions: [RecordDeletion]) {
        let asked = Set((inFlight ?? []).map(\.topicPartition))
        inFlight = nil
        for deletion in deletions where asked.contains(deletion.partition) {
            guard case .success(let start) = deletion.outcome else { continue }
            purged[deletion.partition] = max(purged[deletion.partition] ?? 0, start)
        }
    }

    /// Partitions given away: their purges are their new owner's; what is known of them is
    /// forgotten, so that taking one back purges it afresh.
    mutating func released(_ partitions: [TopicPartition]) {
        let gone = Set(partitions)
        for partition in gone { purged[partition] = nil }
        // The request may still be carried out; its answer no longer says anything of them.
        inFlight = inFlight.map { $0.filter { !gone.contains($0.topicPartition) } }
    }
}
