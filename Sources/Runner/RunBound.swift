import Kafka
import Logging

/// Where a bounded run stops, and whether it has: the one judge of a run's end
/// (`RunnerSettings.Bound`). The runner asks it each turn which partitions' ends to read now,
/// and whether the run is done; it reads the ends itself (`StageRunner.takeEnds`).
struct RunBound: RunnerPart {
    let context: RunnerContext
    let bound: RunnerSettings.Bound
    /// In a group, with its topic's partition count known: a bounded run must read every one.
    let partitionCount: Int?
    /// How long partitions held by other members are waited for: twice the session timeout, as
    /// a member that died keeps its partitions that long.
    let patience: Int64
    private(set) var upstreamEndsTaken = false
    /// Since when this run has read what it owns to its end while other members of its group
    /// held the rest; nil when that is not so.
    private var othersHoldSince: Int64?

    init(_ context: RunnerContext) {
        self.context = context
        let settings = context.settings
        bound = settings.bound
        partitionCount = settings.joinsGroup ? settings.partitionCount : nil
        patience = 2 * (settings.consumer["session.timeout.ms"].flatMap { Int64($0) } ?? 45_000)
    }

    /// Whether the owned partitions' ends are to be known now: from the assignment on, or once
    /// the upstream runner has finished.
    var endsAreDue: Bool {
        switch bound {
        case .unbounded: false
        case .endAtAssignment: true
        case .endWhenUpstreamFinishes: upstreamEndsTaken
        }
    }

    /// Every end is known and reached, of every partition of the topic where the count is known.
    func isReached(_ tracker: PartitionTracker) -> Bool {
        guard endsAreDue, tracker.allAtEnd else { return false }
        guard let partitionCount else { return true }
        return tracker.heldByOthers(of: partitionCount).isEmpty
    }

    /// Once the upstream runner has finished, the ends of this runner's input are final: the
    /// partitions whose ends to read now, once. A runner that must read every partition takes
    /// the bound owning none too: partitions assigned later have their ends read as they come
    /// (`StageRunner.retryEnds`), and while other members hold them `awaitOthers` counts.
    mutating func upstreamBound(_ tracker: PartitionTracker) -> [TopicPartition]? {
        guard case .endWhenUpstreamFinishes(let upstream) = bound, !upstreamEndsTaken, upstream.isFinished,
            partitionCount != nil || !tracker.isEmpty
        else { return nil }
        upstreamEndsTaken = true
        return tracker.partitions
    }

    /// A bounded run in a group counts its whole input, so it must read every partition: one
    /// that another member of the group holds keeps it from ending (it exited 0 having counted a
    /// third of the hits). It waits out a rebalance, which may hand them over, then refuses (exit
    /// 64): the other members are a live deployment of the group, or another bounded run.
    mutating func awaitOthers(now: Int64, tracker: PartitionTracker, assigned: Bool, logger: Logger) -> PipelineError? {
        guard endsAreDue, let partitionCount, assigned, tracker.ownedAtEnd, case let held = tracker.heldByOthers(of: partitionCount),
            !held.isEmpty
        else {
            othersHoldSince = nil
            return nil
        }
        guard let since = othersHoldSince else {
            othersHoldSince = now
            let owned = tracker.sortedPartitions.map(\.partition)
            logger.notice(
                "\(stageName): \(owned.isEmpty ? "owns no partition of \(topic)" : "read partitions \(owned) of \(topic) to their end"); partitions \(held) are held by other members of the group: waiting up to \(patience / 1000) s for a rebalance to hand them over")
            return nil
        }
        guard now - since >= patience else { return nil }
        return PipelineError.configuration(
            "\(stageName): partitions \(held) of \(topic) stayed with other members of the group for \(patience / 1000) s while this bounded run had nothing else to read. A bounded run (--until-end) counts its whole input and runs alone in its group: stop the group's other members (a live worker of this --group, or another --until-end run) and run it again, or count the input under a --group of its own, or with trackpipe replay")
    }
}
