/// How schedules are made and judged, beyond their family.
public struct SimulationOptions: Sendable {
    public var size: ScheduleSize = .standard
    /// Features added to, or taken from, the family's set.
    public var enable: Set<Feature> = []
    public var disable: Set<Feature> = []
    /// Fail on a revision that steps back even after a crash (the default: records go out only
    /// once the state they carry is written, so no restart may step a key back). Off, a step
    /// back after a crash is counted apart instead.
    public var strictRevisions = true
    /// Check the strict lateness rule; nil: as the family says.
    public var strictLateness: Bool?
    /// Apply the strict lateness rule to every hit of every schedule, idle sources or not: a rule
    /// the design does not keep (when every source is idle, event time goes on with the wall
    /// clock, so that a quiet topic still closes its windows).
    public var strictLatenessThroughIdleness = false
    /// Check the bound the design keeps on lateness through quiet periods; nil: as the family
    /// says (lockstep schedules only).
    public var quietBound: Bool?
    /// The operator's remedy after a refused mode switch, whatever the schedule drew (nil: as
    /// drawn), to tell the remedies' failures apart.
    public var remedy: SwitchRemedy?
    /// Record what every operation did (replays of one seed).
    public var trace = false
    /// A defect planted in the simulated cluster, to show that the checks catch it.
    public var fault: Fault?

    public init() {}
}

/// Defects the simulation can plant in its own cluster (never in the runner or the stages), so
/// that a test can show each check failing for the reason it exists.
public enum Fault: String, Sendable, CaseIterable {
    /// The state topic's log cleaner also removes the latest state of a window: a new owner
    /// reads back an older state (or none) of that window.
    case lossyCompaction = "lossy-compaction"
    /// The consumer skips one record of the input: a hit is never seen.
    case skipOneRecord = "skip-one-record"
    /// After the run, an older record of some key is delivered again at the end of the output
    /// (of the smallest size): a stale aggregate overwrites the full one.
    case reemitStaleRecord = "reemit-stale-record"
    /// The first instance's records reach the repartition topic two idle timeouts after it sent
    /// them (its connection to the brokers stalls), overtaken by the other instances' written
    /// meanwhile: the assumption the originals rule rests on, broken, so that some `too_late`
    /// hits cross without their original.
    case overtakenRecords = "overtaken-records"
    /// The brokers carry a purge out to the partition's end, whatever it asked: records no one
    /// has counted yet are gone.
    case purgePastCommit = "purge-past-commit"
    /// A state write cut short by a death keeps its deletions (tombstones) although records sent
    /// before them were lost: the order Kafka keeps within a partition is what makes a cut merge
    /// harmless, and without it a window's segments go while its head still names them.
    case unorderedStateWrite = "unordered-state-write"
    /// The cluster says every partition begins at 0 whatever retention deleted: records deleted
    /// before they were read go unnoticed.
    case hiddenRetention = "hidden-retention"
    /// The cluster says every partition begins at its end though it holds every record: offsets
    /// that were never records (markers) are taken for lost input.
    case phantomRetention = "phantom-retention"
}

/// How big schedules are: the number of steps and the rate of hits.
public struct ScheduleSize: Sendable, Hashable {
    public var steps: ClosedRange<Int>
    /// Messages a second of simulated time.
    public var rate: ClosedRange<Int>

    public init(steps: ClosedRange<Int>, rate: ClosedRange<Int>) {
        self.steps = steps
        self.rate = rate
    }

    /// For the test suite: tens to a few hundred messages.
    public static let quick = ScheduleSize(steps: 12...40, rate: 4...20)
    /// For `trackpipe-check simulate`: up to a few thousand messages.
    public static let standard = ScheduleSize(steps: 20...90, rate: 5...40)
}
