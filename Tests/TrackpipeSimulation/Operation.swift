/// Which stage of an instance an operation drives. In one-stage mode `aggregate` is the stage
/// that reads the input directly (`AggregateStage` over `RawHitInput`) and `normalize` ops do
/// nothing.
public enum Role: String, Sendable, Hashable, CaseIterable {
    case normalize
    case aggregate

    var letter: String { self == .normalize ? "n" : "a" }
}

/// One step of a schedule. Operations are plain values with every random choice written into
/// them, so a schedule can be printed, replayed and shrunk by dropping operations; one that
/// names a stage or partition that does not exist at that point does nothing.
public enum Operation: Sendable, Hashable, CustomStringConvertible {
    /// The clock moves on by this many ms; what reached Kafka meanwhile is produced.
    case produce(advance: Int64)
    /// Nobody sends anything for this many ms (longer than the idle timeout): the clock moves
    /// on, and what was due meanwhile arrives right after.
    case pause(Int64)
    /// Records for this input partition are held by their producer for this many ms, then
    /// arrive together with the time they were created: a lagging partition.
    case stall(partition: Int32, for: Int64)
    /// Nothing new goes to this input partition for this many ms: an idle source.
    case silence(partition: Int32, for: Int64)
    /// The runner polls up to `budget` records of the partitions it owns (cut into runs of
    /// partitions by `cut`) and hands them to its stage as one batch.
    case process(Role, instance: Int, budget: Int, cut: UInt64)
    /// The runner lets time pass in its stage.
    case tick(Role, instance: Int)
    /// The runner commits its stage's commit points.
    case commit(Role, instance: Int)
    /// A cooperative rebalance: some partitions of `from` (chosen by `pick`) move to `to`; the
    /// old owner commits them first. `from == to` is a revoke and re-assign of the same member.
    case rebalance(Role, from: Int, to: Int, pick: UInt64)
    /// The stage (nil: the whole process, both stages) dies: its state and everything it did not
    /// commit are gone; it restarts owning nothing, and its partitions wait for `adopt`. With a
    /// phase, it dies in the middle of a commit: part way through writing its state
    /// (`writingState`), after its state was written (`prepared`), or after the records held for
    /// it went out too (`completed`), before the offsets.
    case crash(Role?, instance: Int, during: CommitPhase?)
    /// The group hands the partitions of crashed stages to its members (chosen by `pick`).
    case adopt(Role, pick: UInt64)
    /// The normalize stage processes a batch and dies before committing it: its successor sends
    /// the same events again.
    case resend(instance: Int, budget: Int, cut: UInt64)
    /// Kafka's log cleaner runs over some partitions of the state topic (chosen by `pick`).
    case compact(pick: UInt64)
    /// Retention deletes the oldest records of some partitions of the input and repartition
    /// topics, up to points chosen by `pick` (see `Feature.retention`).
    case retain(pick: UInt64)
    /// Every worker stops once the input is read to its end and restarts reading a new input
    /// topic (with this many partitions) under the same groups.
    case switchTopic(partitions: Int)
    /// Every worker stops once its input is read to the end and committed, and starts again in
    /// the other mode under the same group; refused, the operator applies `remedy`.
    case switchMode(to: Mode, remedy: SwitchRemedy)
    /// The cluster refuses every purge (DeleteRecords) for this many ms.
    case refusePurges(PurgeRefusal, for: Int64)

    public var description: String {
        switch self {
        case .produce(let advance): "+\(advance)"
        case .pause(let length): "pause(\(length))"
        case .stall(let partition, let length): "stall(p\(partition),\(length))"
        case .silence(let partition, let length): "silence(p\(partition),\(length))"
        case .process(let role, let instance, let budget, _):
            "\(role.letter)\(instance).p\(budget == Int.max ? "*" : String(budget))"
        case .tick(let role, let instance): "\(role.letter)\(instance).t"
        case .commit(let role, let instance): "\(role.letter)\(instance).c"
        case .rebalance(let role, let from, let to, _): "move(\(role.letter)\(from)->\(role.letter)\(to))"
        case .crash(let role, let instance, let phase):
            "CRASH(\(role.map { "\($0.letter)\(instance)" } ?? "instance \(instance)")\(phase.map { " in a commit, \($0)" } ?? ""))"
        case .adopt(let role, _): "adopt(\(role.letter))"
        case .resend(let instance, let budget, _): "RESEND(n\(instance).p\(budget))"
        case .compact: "compact"
        case .retain: "retain"
        case .switchTopic(let partitions): "SWITCH-TOPIC(\(partitions))"
        case .switchMode(let mode, let remedy): "SWITCH-TO-\(mode == .oneStage ? "ONE-STAGE" : "TWO-STAGES")(then \(remedy.rawValue))"
        case .refusePurges(let refusal, let length): "refuse-purges(\(refusal.rawValue),\(length))"
        }
    }

    /// Whether the operation kills a stage.
    var crashes: Bool {
        switch self {
        case .crash, .resend: true
        default: false
        }
    }
}

/// How a cluster refuses a purge.
public enum PurgeRefusal: String, Sendable, Hashable, CaseIterable {
    /// It does not delete records (what both embedded brokers answer).
    case unsupported
    /// The worker's principal has no Delete grant on the topic.
    case notAuthorized = "not-authorized"
    /// The leaders do not answer in time.
    case timedOut = "timed-out"
}

/// What the operator does when the workers refuse to start in another mode under the group, as
/// the refusal says: either remedy counts the input again from its beginning.
public enum SwitchRemedy: String, Sendable, Hashable, CaseIterable {
    /// Run the new mode under a `--group` of its own.
    case newGroup = "new-group"
    /// Reset the group's offsets of the input to the earliest
    /// (`kafka-consumer-groups.sh --reset-offsets --to-earliest`), and start again.
    case resetOffsets = "reset-offsets"
}
