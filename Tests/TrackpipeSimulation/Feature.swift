/// A kind of trouble a schedule may contain. Families switch sets of them on; the command line
/// and the tests can switch any off (or on) to narrow a failure down.
public enum Feature: String, CaseIterable, Sendable, Comparable {
    /// Hits arriving after their window was emitted, within the retention: corrections.
    case lateHits = "late"
    /// Hits arriving a retention or more after their time.
    case beyondRetention = "beyond-retention"
    /// Device clocks ahead of the Kafka timestamp, within `--max-future-skew`.
    case fastClocks = "fast-clocks"
    /// Device clocks further ahead than the skew allows: `future_timestamp`.
    case wrongClocks = "wrong-clocks"
    /// Messages the normalizer must dead-letter.
    case badMessages = "bad"
    /// Deliveries with tracking off: filtered.
    case trackingOff = "tracking-off"
    /// The SDK sending a hit twice (both count).
    case retries
    /// Quiet pauses longer than the idle timeout, everyone silent.
    case pauses
    /// One input partition gets nothing new for a while.
    case idleSources = "idle-sources"
    /// One input partition's records are held back, then arrive together.
    case stalledSources = "stalled-sources"
    /// Stages (or whole processes) die, losing everything uncommitted.
    case crashes
    /// With `crashes`: some die in the middle of a commit, after the state is written, or after
    /// the records held for it went out too, before the offsets are committed.
    case commitCrashes = "commit-crashes"
    /// The window stage dies in the middle of writing its state for a commit, after some of its
    /// records reached the state topic (a merge of a window's segments cut short among them).
    case stateWriteCrashes = "state-write-crashes"
    /// The normalize stage dies after sending a batch and before committing it.
    case resends
    /// Cooperative rebalances move partitions between instances, with a commit first.
    case rebalances
    /// The input topic is switched under the same groups.
    case topicSwitch = "topic-switch"
    /// The workers are switched from two stages to `--input-keyed-by-delivery`.
    case oneStageSwitch = "one-stage-switch"
    /// The workers are switched from `--input-keyed-by-delivery` to two stages.
    case twoStageSwitch = "two-stage-switch"
    /// Kafka's log cleaner compacts the state topic now and then.
    case compaction
    /// After a refused mode switch, the operator may reset the group's offsets to the earliest,
    /// as the refusal offers, instead of starting a new group.
    case offsetReset = "offset-reset"
    /// A window-state cap small enough to evict windows early.
    case entryCap = "entry-cap"
    /// Two lanes per stage (concurrent task work).
    case lanes
    /// Repartition records cut small, so one batch's events span several records.
    case smallRecords = "small-records"
    /// Offsets of the input that are never delivered though the log holds them: transaction
    /// markers and records compaction removed, in the middle of partitions and at their ends.
    case markers
    /// Retention (or a size limit) deletes the oldest records of repartition partitions at any
    /// time, and of input partitions the group has committed on, read or not.
    case retention
    /// The aggregate stage of two stages purges the repartition topic after its commits
    /// (DeleteRecords, as `Pipeline` sets it up), every few commits or after each; the cluster
    /// carries each purge out a while after it was asked.
    case purges
    /// With `purges`: the cluster refuses purges for a while (no DeleteRecords, no Delete
    /// grant, leaders that do not answer in time).
    case refusedPurges = "refused-purges"

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    /// The features that mean a stage can die.
    static let dying: Set<Feature> = [.crashes, .resends, .stateWriteCrashes]
}

/// How the workers are composed.
public enum Mode: String, Sendable, Hashable {
    /// `normalize` behind a repartition topic, then `aggregate` (the default).
    case twoStage = "two-stage"
    /// `--input-keyed-by-delivery`: the aggregate stage reads the input (keyed by delivery).
    case oneStage = "one-stage"
}
