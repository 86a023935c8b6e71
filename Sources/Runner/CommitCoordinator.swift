import RecordFormats
import Kafka
import Logging

/// Commits what a stage says is safe, and only once it is safe: every record sent so far, on
/// every destination, must be acknowledged first (a producer flush), so a commit never covers
/// input whose output could still be lost. Commits happen every `interval`, when a window
/// closes (rationed: a few at once, then one per `earlySpacing`), before partitions are given
/// away, and at the end of a run.
struct CommitCoordinator: RunnerPart {
    let context: RunnerContext
    /// Only a runner in a group commits: a fixed assignment has no group to commit to.
    var enabled: Bool { settings.joinsGroup }
    var interval: Int64 { settings.commitInterval }
    private var lastCommitAt: Int64 = 0
    /// Commits for closed windows are rationed like tokens in a bucket: `earlyBurst` at once,
    /// one more every `earlySpacing`. Windows are aligned to the epoch, so a live stream closes
    /// all of them within a second of each other, though not in one turn (each task's event
    /// time passes the boundary when its sources' marks arrive): the burst lets each of those
    /// moments commit at once, and the stream pays a few early commits per window length. A
    /// backlog closes windows batch after batch, and without the ration would be read at commit
    /// speed (each commit writes the state of every window changed since the last): it pays one
    /// early commit a second. The ration starts empty at every assignment.
    static let earlySpacing: Int64 = 1_000
    static let earlyBurst: Int64 = 4
    /// Early commits in hand, times `earlySpacing`, as of `earlyCountedAt`.
    private var earlyCredit: Int64 = 0
    private var earlyCountedAt: Int64 = 0
    /// A commit was refused because the group moved on to another generation. librdkafka
    /// answers such a refusal by giving up the whole assignment and joining again, which starts
    /// another rebalance for every member; a member that kept committing on its interval while
    /// the group settled restarted the rebalance each time, and on a loaded machine four members
    /// kept each other in a rebalance for minutes (no commit, so a state-keeping stage released
    /// no output). Interval commits wait for the group's next assignment instead.
    private(set) var awaitsNewGeneration = false
    /// Why the last commit did not commit every partition it had to (refused, or its records not
    /// acknowledged in time); nil when it did. The end of a run reads it.
    var lastFailure: String?

    init(_ context: RunnerContext) { self.context = context }

    mutating func begin(at now: Int64) {
        lastCommitAt = now
        earlyCountedAt = now
    }

    func isDue(now: Int64) -> Bool { enabled && !awaitsNewGeneration && now - lastCommitAt >= interval }

    /// Whether a commit for closed windows may be made now; if so, it takes one from the ration.
    mutating func takeEarlyCommit(now: Int64) -> Bool {
        guard enabled, !awaitsNewGeneration else { return false }
        let cap = Self.earlyBurst * Self.earlySpacing
        earlyCredit = min(cap, earlyCredit + max(0, min(now - earlyCountedAt, cap)))
        earlyCountedAt = now
        guard earlyCredit >= Self.earlySpacing else { return false }
        earlyCredit -= Self.earlySpacing
        return true
    }

    /// The group handed out its assignment (possibly an empty one): the member is in the current
    /// generation again. What it was given usually starts on a backlog (after a join, a
    /// rebalance or a restart): the ration of early commits starts empty.
    mutating func groupAssigned(at now: Int64) {
        awaitsNewGeneration = false
        earlyCredit = 0
        earlyCountedAt = now
    }

    /// Waits for every record sent so far to be acknowledged, then commits each owned partition's
    /// commit point (or only `partitions`'). A point that did not move is not committed again; a
    /// checkpoint too large for the broker is refused here with what to do, never half-written.
    /// A failed commit is retried at the next interval, or, if the group refused it for a stale
    /// generation, once the group has assigned its partitions: the previous one still holds; so
    /// is one whose records were not acknowledged within `patience`. Returns the partitions whose
    /// commit points are now committed.
    @discardableResult
    mutating func commit(
        _ points: [Int32: CommitPoint], only partitions: Set<Int32>? = nil, now: Int64, tracker: inout PartitionTracker,
        consumer: any ConsumerClient, output: inout OutputChannel, patience: OutputChannel.Patience, timeline: inout RunnerTimeline
    ) throws -> [Int32] {
        lastCommitAt = now
        lastFailure = nil
        guard enabled, !tracker.isEmpty else { return [] }
        guard try output.awaitAcknowledgements(timeline: &timeline, patience: patience) else {
            lastFailure = "\(output.producer.outstanding) records sent were not acknowledged in time"
            logger.warning(
                "\(stageName): \(output.producer.outstanding) records sent were not acknowledged in time (the brokers that lead the output topics do not answer): not committing; the previous commit holds, and the next interval tries again")
            return []
        }
        var offsets: [TopicPartitionOffset] = []
        var committing: [(TopicPartition, CommitPoint)] = []
        var done: [Int32] = []
        for tp in tracker.sortedPartitions where partitions?.contains(tp.partition) ?? true {
            guard let point = points[tp.partition], let state = tracker[tp] else { continue }
            guard point.offset != state.offsets.committed || point.metadata != state.offsets.metadata else {
                done.append(tp.partition)
                continue
            }
            if let metadata = point.metadata, metadata.utf8.count > Checkpoint.maxEncodedBytes {
                lastFailure = "the checkpoint of \(tp) is too large for the broker"
                logger.error(
                    "\(stageName): the checkpoint of \(tp) needs \(metadata.utf8.count) bytes of commit metadata, more than brokers accept (offset.metadata.max.bytes, 4096 by default); not committing it. Use fewer input partitions.")
                continue
            }
            offsets.append(TopicPartitionOffset(tp, offset: point.offset, metadata: point.metadata))
            committing.append((tp, point))
        }
        guard !offsets.isEmpty else { return done }
        let begin = RunnerTimeline.now()
        defer { timeline.add(.committing, since: begin) }
        do {
            try output.control.waitingOnKafka("the group coordinator to answer a commit") { try consumer.commit(offsets) }
            for (tp, point) in committing { tracker.noteCommitted(tp, point) }
            timeline.commits += 1
            done += committing.map(\.0.partition)
        } catch {
            lastFailure = "\(error)"
            if let kafka = error as? KafkaError, kafka.isStaleGeneration {
                awaitsNewGeneration = true
                logger.warning(
                    "\(stageName): commit refused, the group is rebalancing: will commit again once the group has assigned its partitions: \(error)")
            } else {
                logger.warning("\(stageName): commit failed, will retry at the next interval: \(error)")
            }
        }
        return done
    }
}
