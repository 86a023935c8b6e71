/// A named kind of schedule: a mode, the features it turns on, and how its runners are driven.
/// Each family aims at one area, so that a failing family says where to look.
public enum ScheduleFamily: String, CaseIterable, Sendable {
    /// Two stages; out-of-order, late and bad input; no process dies, nothing moves.
    case steady
    case steadyOneStage = "steady-one-stage"
    /// Two stages; every event-time hazard: corrections, hits past retention, fast and wrong
    /// device clocks, quiet pauses, idle and stalled sources, an entry cap.
    case eventTime = "event-time"
    case eventTimeOneStage = "event-time-one-stage"
    /// Two stages; cooperative rebalances (commit, revoke, assign from the checkpoint), no crash.
    case rebalance
    case rebalanceOneStage = "rebalance-one-stage"
    /// Two stages; crashes of either stage or both at any point, re-sent upstream batches,
    /// takeovers from whatever checkpoint was committed last.
    case crash
    case crashOneStage = "crash-one-stage"
    /// Two stages; crashes, re-sends and rebalances with a retention longer than the schedule,
    /// ending as a bounded run (`finish`): takeovers, replays and duplicate filtering, with no
    /// window evicted before the end and no emission left to the watermark (those are what the
    /// crash families check).
    case recovery
    case recoveryOneStage = "recovery-one-stage"
    /// Two stages; everything above at once.
    case chaos
    case chaosOneStage = "chaos-one-stage"
    /// Two stages; the input topic is switched under the same groups.
    case topicSwitch = "topic-switch"
    /// Two stages over input keyed by delivery, then a switch to one stage.
    case oneStageSwitch = "one-stage-switch"
    /// Two stages driven in lockstep so that no source is ever idle; corrections, hits past
    /// retention and fast device clocks; the strict lateness rule is checked.
    case strictLateness = "strict-lateness"
    case strictLatenessOneStage = "strict-lateness-one-stage"
    /// Lockstep as above, plus quiet pauses longer than the idle timeout and a partition held
    /// back (a lagging source); the strict rule is checked on every hit, through the pauses.
    case quietPause = "quiet-pause"

    /// Families that fail on the current stages (issue 18), each with the failure it finds (see
    /// docs/simulation.md). The quick test runs every other family and checks that these still
    /// fail; a fix of the stages removes its families from here, and the test then holds them to
    /// every check.
    public static let knownFailing: [ScheduleFamily: String] = [
        .rebalance: takeover + "; " + replayVerdict,
        .rebalanceOneStage: takeover + "; " + replayVerdict,
        .crash: takeover + "; " + replayVerdict + "; " + quietTakeover,
        .crashOneStage: takeover + "; " + replayVerdict,
        .chaos: takeover + "; " + replayVerdict + "; " + quietTakeover,
        .chaosOneStage: takeover + "; " + replayVerdict,
        .topicSwitch:
            "the duplicate filter knows a source partition and offset, not the topic: after a switch the new topic's hits are dropped as copies (SourceDedup)",
        .oneStageSwitch:
            "the one stage adopts the normalize group's plain commits (no checkpoint): it replays nothing of the windows open at the switch and overwrites full records with partial ones",
        .strictLateness: strictRule,
        .strictLatenessOneStage: strictRule,
        .quietPause:
            "when every source is idle the watermark follows the wall clock from the fastest source's time: after a quiet pause a lagging partition's hits are too_late though their own partition had not got that far (WatermarkTracker.advance)",
    ]

    private static let takeover =
        "a new owner's first batch past the previous owner's mark replaces its output with the emitted windows still in the store: windows emitted or corrected and evicted in that same batch (or evicted during the silent replay) are never sent (AggregateTask.count)"
    private static let replayVerdict =
        "too_late depends on batch cuts and wall-clock idleness, so a replay can judge a hit differently from its first owner: after a crash a hit is both dead-lettered and counted, or its old owner's record with it keeps the highest revision; in a silent replay a hit its old owner counted becomes too_late and is dropped without a dead letter"
    private static let quietTakeover =
        "a task whose batch ends with its sources' idle marks never learns when input last came (SourceMarks keeps a source's last idle flag, WatermarkTracker.observe notes input time only for non-idle reports): a new owner that reads its whole backlog at once emits nothing while the input stays quiet"
    private static let strictRule =
        "too_late is decided against the horizon at the start of a batch, from the minimum over sources of event times: a device clock ahead of its Kafka timestamp moves its source's watermark (later ordinary hits become too_late), and hits past their partition's progress are still counted"

    /// The families the quick test runs.
    public static var passing: [ScheduleFamily] { allCases.filter { knownFailing[$0] == nil } }

    public var spec: FamilySpec {
        let input: Set<Feature> = [.badMessages, .trackingOff, .retries, .lateHits]
        let time: Set<Feature> = [
            .beyondRetention, .fastClocks, .wrongClocks, .pauses, .idleSources, .stalledSources, .entryCap, .smallRecords, .lanes,
        ]
        switch self {
        case .steady: return FamilySpec(mode: .twoStage, features: input.union([.smallRecords]))
        case .steadyOneStage: return FamilySpec(mode: .oneStage, features: input)
        case .eventTime: return FamilySpec(mode: .twoStage, features: input.union(time))
        case .eventTimeOneStage: return FamilySpec(mode: .oneStage, features: input.union(time).subtracting([.smallRecords]))
        case .rebalance: return FamilySpec(mode: .twoStage, features: input.union([.beyondRetention, .rebalances, .smallRecords]))
        case .rebalanceOneStage: return FamilySpec(mode: .oneStage, features: input.union([.beyondRetention, .rebalances]))
        case .crash: return FamilySpec(mode: .twoStage, features: input.union([.beyondRetention, .crashes, .resends, .smallRecords]))
        case .crashOneStage: return FamilySpec(mode: .oneStage, features: input.union([.beyondRetention, .crashes]))
        case .recovery:
            return FamilySpec(
                mode: .twoStage, features: input.union([.crashes, .resends, .rebalances, .smallRecords]), longRetention: true,
                endsWithFinish: true)
        case .recoveryOneStage:
            return FamilySpec(mode: .oneStage, features: input.union([.crashes, .rebalances]), longRetention: true, endsWithFinish: true)
        case .chaos: return FamilySpec(mode: .twoStage, features: input.union(time).union([.crashes, .resends, .rebalances]))
        case .chaosOneStage:
            return FamilySpec(mode: .oneStage, features: input.union(time).union([.crashes, .rebalances]).subtracting([.smallRecords]))
        case .topicSwitch: return FamilySpec(mode: .twoStage, features: input.union([.topicSwitch]))
        case .oneStageSwitch: return FamilySpec(mode: .twoStage, features: input.union([.oneStageSwitch]))
        case .strictLateness:
            return FamilySpec(
                mode: .twoStage, features: input.union([.beyondRetention, .fastClocks]), lockstep: true, strictLateness: true)
        case .strictLatenessOneStage:
            return FamilySpec(
                mode: .oneStage, features: input.union([.beyondRetention, .fastClocks]), lockstep: true, strictLateness: true)
        case .quietPause:
            return FamilySpec(
                mode: .twoStage, features: input.union([.pauses, .stalledSources]), lockstep: true, strictLateness: true,
                strictLatenessThroughIdleness: true)
        }
    }
}

/// What a family is made of.
public struct FamilySpec: Sendable {
    public var mode: Mode
    public var features: Set<Feature>
    /// Every runner polls everything and ticks at every step, and the clock moves by less than
    /// a quarter of the idle timeout: no source goes idle while hits flow, which is what the
    /// strict lateness rule needs.
    public var lockstep: Bool
    /// Check the strict lateness rule by default.
    public var strictLateness: Bool
    /// A retention longer than the schedule: no window is evicted before the final drain.
    public var longRetention: Bool
    /// Check the strict lateness rule on every hit, through idle periods.
    public var strictLatenessThroughIdleness: Bool
    /// End every schedule with `finish` (a bounded run) rather than with a far tick.
    public var endsWithFinish: Bool

    public init(
        mode: Mode, features: Set<Feature>, lockstep: Bool = false, strictLateness: Bool = false, longRetention: Bool = false,
        strictLatenessThroughIdleness: Bool = false, endsWithFinish: Bool = false
    ) {
        self.endsWithFinish = endsWithFinish
        self.mode = mode
        self.features = features
        self.lockstep = lockstep
        self.strictLateness = strictLateness
        self.longRetention = longRetention
        self.strictLatenessThroughIdleness = strictLatenessThroughIdleness
    }
}
