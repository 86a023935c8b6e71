import Kafka
import Logging

/// Purges a runner's input up to its commits (the rules are `PurgeSchedule`'s), on the runner's
/// own thread: the request goes out in the loop's turn right after a commit went through, and
/// its answer is picked up at the following turns without waiting. A DeleteRecords request
/// waits for every partition's leader and their followers; made and waited for inside a turn
/// it would hold the loop (its polls, which `max.poll.interval.ms` bounds, the liveness check,
/// the output) for as long as a slow broker takes, and inside a rebalance callback the whole
/// group would wait for it. A thread of its own would wait instead, but would need the commits
/// handed to it under a lock, and its answers handed back for the metrics and the log.
/// librdkafka's Admin API answers on a queue of its own, so asking costs the turn only the
/// queueing of the request, and no thread of trackpipe's waits at all.
/// A commit made inside a rebalance callback (the revoke's) is never followed by a purge here:
/// its partitions are being given away, and their new owner purges them after its own commits.
///
/// A cluster that refuses (no DeleteRecords, or no Delete grant) is said once per kind, with
/// what to do; the worker goes on, and asks again every interval (a grant, or an upgraded
/// cluster, takes effect without a restart). Every partition's answer is counted by outcome.
struct PurgeCoordinator: RunnerPart {
    /// What became of one partition's purge, as the metric labels it: `purged`, or the kind of
    /// refusal.
    static func outcome(_ outcome: Result<Int64, RecordDeletionError>) -> String {
        switch outcome {
        case .success: "purged"
        case .failure(let error): error.kind.rawValue
        }
    }

    /// How long a request may wait for its answer (ms): librdkafka answers with a timeout
    /// after this long at worst.
    static let requestTimeout: Int32 = 30_000

    let context: RunnerContext
    private var schedule: PurgeSchedule
    private let client: any RecordDeletionClient
    /// The refusals said so far (each once).
    private var told: Set<RecordDeletionError.Kind> = []
    /// A run of failures since the last purge, said at its start.
    private var failing: RecordDeletionError.Kind?
    private var purgedOnce = false

    /// `client`: the deleter, which the runner makes over its output's producer.
    init(_ context: RunnerContext, purge: PurgeSettings, client: any RecordDeletionClient) {
        self.context = context
        schedule = PurgeSchedule(interval: purge.interval)
        self.client = client
        metrics?.purgeOutcomesRegistered(["purged"] + RecordDeletionError.Kind.allCases.map(\.rawValue))
    }

    /// A commit went through, outside any rebalance callback: purges what the owned partitions
    /// have committed (`committed`), if a purge is due.
    mutating func afterCommit(_ committed: [TopicPartitionOffset], now: Int64) {
        guard let due = schedule.afterCommit(committed, now: now) else { return }
        request(due, timeoutMilliseconds: Self.requestTimeout)
    }

    /// Sends a purge the schedule made due; one that could not even be sent is taken as a
    /// failure of every partition, asked again later.
    private mutating func request(_ due: [TopicPartitionOffset], timeoutMilliseconds: Int32) {
        do {
            try client.requestDeletion(below: due, timeoutMilliseconds: timeoutMilliseconds)
        } catch {
            take(due.map { RecordDeletion(partition: $0.topicPartition, below: $0.offset, outcome: .failure(RecordDeletionError(.other, error as? KafkaError ?? KafkaError(.librdkafka(code: -1), "\(error)")))) })
        }
    }

    /// The end of a bounded run: the request in flight answered, then everything committed
    /// purged, each answer waited for up to `patience` ms. The run's records of the repartition
    /// topic are read by no one again; left to retention, a finished backfill's would stay for
    /// days (and a short run's loop may have made no commit to purge after).
    mutating func purgeAtEnd(_ committed: [TopicPartitionOffset], patience: Int32) {
        if schedule.inFlight != nil, let answer = client.answer(waitingMilliseconds: patience) { take(answer) }
        guard let due = schedule.atEnd(committed) else { return }
        request(due, timeoutMilliseconds: patience)
        if schedule.inFlight != nil, let answer = client.answer(waitingMilliseconds: patience) { take(answer) }
    }

    /// Picks up the answer to the request in flight, if it has come; never waits.
    mutating func collect() {
        guard schedule.inFlight != nil, let answer = client.answer(waitingMilliseconds: 0) else { return }
        take(answer)
    }

    /// Partitions given away: their new owner purges them.
    mutating func released(_ partitions: [TopicPartition]) { schedule.released(partitions) }

    private mutating func take(_ answer: [RecordDeletion]) {
        schedule.answered(answer)
        for deletion in answer { metrics?.purged(Self.outcome(deletion.outcome)) }
        let failures = answer.compactMap { deletion -> RecordDeletionError? in
            guard case .failure(let error) = deletion.outcome else { return nil }
            return error
        }
        if let error = failures.first {
            say(error)
        } else if !answer.isEmpty {
            let where_ = answer.map { "\($0.partition.partition) below \($0.below)" }.joined(separator: ", ")
            if let was = failing {
                logger.notice("\(stageName): purging \(topic) works again (after \(was.rawValue) failures): deleted partitions \(where_)")
            } else if !purgedOnce {
                logger.info(
                    "\(stageName): purged \(topic) up to the committed offsets (partitions \(where_)); it is purged again after commits, at most every \(Self.text(schedule.interval))")
            }
            failing = nil
            purgedOnce = true
        }
    }

    /// Says a failure: a refusal once per kind for the run, a run of other failures at its start.
    private mutating func say(_ error: RecordDeletionError) {
        let again = "trackpipe asks again every \(Self.text(schedule.interval)) (--purge-interval 0 turns purging off)"
        switch error.kind {
        case .unsupported:
            guard told.insert(error.kind).inserted else { return }
            logger.warning(
                "\(stageName): the cluster does not delete records (\(error)): \(topic) cannot be purged after commits, and keeps what the aggregate group has committed until its retention.ms deletes it (trackpipe creates the topic with 7 days; size it for that, see docs/deploy.md). Nothing is lost and counting goes on; \(again). Said once")
        case .notAuthorized:
            guard told.insert(error.kind).inserted else { return }
            logger.warning(
                "\(stageName): this client may not delete records of \(topic) (\(error)): grant its principal Delete on the topic (kafka-acls.sh --add --allow-principal <principal> --operation Delete --topic \(topic)), or leave it to the topic's retention.ms (trackpipe creates it with 7 days; docs/deploy.md). Nothing is lost and counting goes on; \(again). Said once")
        case .transient, .other:
            guard failing == nil else { return }
            logger.warning("\(stageName): purging \(topic) failed (\(error)); nothing is lost, \(again)")
        }
        failing = error.kind
    }

    static func text(_ millis: Int64) -> String { millis % 1_000 == 0 ? "\(millis / 1_000) s" : "\(millis) ms" }
}
