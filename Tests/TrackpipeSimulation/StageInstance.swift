import Kafka
import Pipeline
import Runner

/// Where a commit can be cut short by a crash: in the middle of writing its state, once the
/// state it wrote is acknowledged, or once the records held for it went out too; in every case
/// before the offsets are committed.
public enum CommitPhase: Sendable, Hashable, CustomStringConvertible {
    /// After this share (in percent, rounded down) of the commit's state records reached the
    /// state topic: the rest, in flight, are lost (what a SIGKILL in the middle of a write
    /// leaves: a prefix, in the order sent).
    case writingState(percent: Int)
    case prepared
    case completed

    public var description: String {
        switch self {
        case .writingState(let percent): "writing its state, after \(percent) % of it"
        case .prepared: "prepared"
        case .completed: "completed"
        }
    }
}

/// What the world needs from one stage of one worker instance, whatever the stage.
protocol DrivenStage: AnyObject {
    var role: Role { get }
    var instance: Int { get }
    var generation: Int { get }
    var group: String { get }
    var topic: String { get }
    var label: String { get }
    /// The group member of its current life, for the group to hand partitions to.
    var memberId: Int? { get }
    var owned: [Int32] { get }
    /// Owned partitions whose state is still being read back.
    var restoring: [Int32] { get }
    var totals: Accounting { get }
    /// What its runners, in every life, found lost.
    var lostInput: [InputSpan] { get }
    var problems: [String] { get }
    var lastBatch: String { get }
    /// The stage's lowest watermark over its window tasks (nil: none, or no window stage).
    var watermark: Int64? { get }
    /// A turn of the loop whose poll brings up to `budget` records, cut into runs by `cut`.
    func process(budget: Int, cut: UInt64)
    /// A turn of the loop whose poll brings nothing: the group's moves are served, time passes
    /// in the stage.
    func tick()
    /// A turn that commits (`RunnerControl.requestCommit`); with a phase, the process dies there.
    func commit(stoppingAfter: CommitPhase?)
    /// The end of the run: a bounded run's last emissions, the last commit, the group left.
    func finish()
    /// SIGKILL; the instance restarts owning nothing. Returns what it owned.
    func crash() -> [Int32]
    func unread() -> Int64
    func oldestUnread() -> Int64?
}

/// One stage of one worker instance: the real `StageRunner` with its real parts, whose Kafka
/// clients are the simulated cluster's. The world drives it one turn of its loop at a time
/// (`StageRunner.turn`), choosing how each poll is cut, when it commits and when the process
/// dies; everything else — the offset guard, the commit coordinator, the rebalance listener,
/// the output channel, the state restorer — is the code that runs in production.
///
/// It adds only what a crash needs (a new life: fresh clients and a new runner over a fresh
/// stage, owning nothing) and the observations the checks make: each life's report balances,
/// no record of an owned partition is dropped, and an error the real loop would stop on is
/// reported (the worker would exit).
final class StageInstance<S: Stage>: DrivenStage {
    let role: Role
    let instance: Int
    let generation: Int
    let group: String
    let topic: String
    private let cluster: SimulatedCluster
    /// Builds a life's runner on its clients.
    private let makeRunner: (ProcessClients) -> StageRunner<S>
    /// Sets up a life's clients (the state topic, the planted faults).
    private let prepare: (ProcessLife) -> Void
    /// Who the checks say wrote what this instance's producer delivers.
    private let stamp: (any DrivenStage) -> WriteStamp
    private var runner: StageRunner<S>
    private var clients: ProcessClients
    private(set) var incarnation = 1
    /// The totals of former lives, and what they found lost.
    private var earlier = Accounting()
    private var earlierLost: [InputSpan] = []
    private var recorded: [String] = []
    /// The runner stopped on an error: the worker would have exited.
    private var stopped = false
    private(set) var lastBatch = ""

    init(
        role: Role, instance: Int, generation: Int, group: String, topic: String, cluster: SimulatedCluster,
        stamp: @escaping (any DrivenStage) -> WriteStamp, prepare: @escaping (ProcessLife) -> Void,
        makeRunner: @escaping (ProcessClients) -> StageRunner<S>
    ) {
        self.stamp = stamp
        self.role = role
        self.instance = instance
        self.generation = generation
        self.group = group
        self.topic = topic
        self.cluster = cluster
        self.prepare = prepare
        self.makeRunner = makeRunner
        (clients, runner) = Self.life(cluster: cluster, prepare: prepare, makeRunner: makeRunner)
        begin()
    }

    private static func life(
        cluster: SimulatedCluster, prepare: (ProcessLife) -> Void, makeRunner: (ProcessClients) -> StageRunner<S>
    ) -> (ProcessClients, StageRunner<S>) {
        let clients = ProcessClients(cluster: cluster)
        prepare(clients.life)
        return (clients, makeRunner(clients))
    }

    private func begin() {
        clients.life.stamp = { [unowned self] in self.stamp(self) }
        do {
            try runner.begin()
        } catch {
            recorded.append("\(label) could not start: \(error)")
            stopped = true
        }
    }

    var label: String { "\(role.letter)\(instance)#\(incarnation)\(generation > 1 ? "g\(generation)" : "")" }

    private var member: SimulatedConsumer? { clients.consumers.first(where: \.isMember) }
    var memberId: Int? { stopped ? nil : member?.memberId }

    var owned: [Int32] { (member?.readPositions.keys.map(\.partition) ?? []).sorted() }

    var restoring: [Int32] {
        clients.consumers.filter { !$0.isMember }.flatMap { $0.readPositions.keys.map(\.partition) }.sorted()
    }

    var watermark: Int64? { runner.gauges.watermark }

    var totals: Accounting {
        var totals = earlier
        totals.add(runner.currentTotals())
        return totals
    }

    var lostInput: [InputSpan] { earlierLost + runner.lostInput }

    var problems: [String] {
        var problems = recorded
        let accounting = totals
        if !accounting.balanced {
            problems.append(
                "\(label): unbalanced report: consumed \(accounting.consumed) != accepted \(accounting.accepted) + filtered \(accounting.filteredTotal) + dead-lettered \(accounting.deadLetteredTotal) + duplicates \(accounting.duplicates)"
            )
        }
        if accounting.staleDropped > 0 {
            problems.append("\(label): dropped \(accounting.staleDropped) records as not owned or already read, though they were neither")
        }
        return problems
    }

    // MARK: Turns

    private func turn(_ plan: PollPlan) {
        guard !stopped, !clients.life.killed else { return }
        clients.life.plan = plan
        for consumer in clients.consumers { consumer.lastPoll = "" }
        do {
            _ = try runner.turn()
        } catch {
            // A death the schedule armed is not the runner's failure.
            if !clients.life.killed {
                recorded.append("\(label) stopped at t=\(cluster.now): \(error)")
                stopped = true
            }
        }
        lastBatch = clients.consumers.map(\.lastPoll).filter { !$0.isEmpty }.joined(separator: " ")
    }

    func process(budget: Int, cut: UInt64) { turn(PollPlan(budget: budget, cut: cut)) }

    func tick() { turn(PollPlan(budget: 0, cut: 0)) }

    func commit(stoppingAfter phase: CommitPhase?) {
        guard !stopped, !clients.life.killed else { return }
        runner.control.requestCommit()
        clients.life.dieAt = phase
        clients.life.stateCut = nil
        clients.life.stateWrite = []
        tick()
        clients.life.dieAt = nil
    }

    func finish() {
        guard !stopped, !clients.life.killed else { return }
        clients.life.plan = PollPlan(budget: 0, cut: 0)
        do {
            _ = try runner.finish()
        } catch {
            recorded.append("\(label) failed to finish at t=\(cluster.now): \(error)")
        }
        stopped = true
    }

    func crash() -> [Int32] {
        let lost = clients.life.killed ? clients.life.ownedAtDeath : owned
        earlier.add(runner.currentTotals())
        earlierLost += runner.lostInput
        clients.life.kill()
        incarnation += 1
        stopped = false
        (clients, runner) = Self.life(cluster: cluster, prepare: prepare, makeRunner: makeRunner)
        begin()
        return lost
    }

    // MARK: Observation

    /// Records of owned partitions not read yet (held-back partitions' included).
    func unread() -> Int64 {
        (member?.readPositions ?? [:]).reduce(0) { $0 + cluster.kafka.topic($1.key.topic).end(of: $1.key.partition) - $1.value }
    }

    /// When the oldest record waiting to be read was written; nil when nothing waits.
    func oldestUnread() -> Int64? {
        (member?.readPositions ?? [:]).compactMap { tp, position in
            let log = cluster.kafka.topic(tp.topic)
            return position < log.end(of: tp.partition) ? log.entry(partition: tp.partition, offset: position).stamp.time : nil
        }.min()
    }
}
