/// How schedules are made and judged, beyond their family.
public struct SimulationOptions: Sendable {
    public var size: ScheduleSize = .standard
    /// Features added to, or taken from, the family's set.
    public var enable: Set<Feature> = []
    public var disable: Set<Feature> = []
    /// Fail on a revision that steps back even after a crash (by default that is reported
    /// apart: the current design may re-emit intermediate records until a new owner catches up).
    public var strictRevisions = false
    /// Check the strict lateness rule; nil: as the family says.
    public var strictLateness: Bool?
    /// Apply the strict lateness rule to every hit of every schedule, idle sources or not: for
    /// a design where idleness no longer decides lateness (today it finds the quiet-pause bug).
    public var strictLatenessThroughIdleness = false
    /// Record what every operation did (replays of one seed).
    public var trace = false
    /// A defect planted in the simulated runner or cluster, to show that the checks catch it.
    public var fault: Fault?

    public init() {}
}

/// Defects the simulation can plant in its own runner or cluster (never in the stages), so that
/// a test can show each check failing for the reason it exists.
public enum Fault: String, Sendable, CaseIterable {
    /// The runner commits how far it read instead of the stage's commit points: a new owner
    /// skips hits that open windows still held.
    case commitReadPosition = "commit-read-position"
    /// The consumer skips one record of the input: a hit is never seen.
    case skipOneRecord = "skip-one-record"
    /// After the run, an older record of some key is delivered again at the end of the output:
    /// a stale aggregate overwrites the full one.
    case reemitStaleRecord = "reemit-stale-record"
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
    /// For `trackpipe-bench simulate`: up to a few thousand messages.
    public static let standard = ScheduleSize(steps: 20...90, rate: 5...40)
}
