import Kafka
import Pipeline
import RecordFormats
import Runner

/// librdkafka and the brokers, simulated on one thread over the in-memory topics: the clients
/// a real `StageRunner` gets from it (through a process's `ProcessClients`) act as librdkafka's do, on the
/// simulation's own clock and schedule, and can be made to fail as a real cluster fails.
///
/// - a consumer group hands out partitions the way the cooperative-sticky assignor does: a
///   member that joins or leaves starts a rebalance; owners give up what moves first (their
///   revoke callback runs inside their next poll), and only once every such partition is given
///   up is it assigned to its new owner (inside that member's next poll). Each rebalance is a
///   new generation; a member takes its part in it when it polls.
/// - a commit from a member that has not taken its part in the rebalance under way is refused
///   (`REBALANCE_IN_PROGRESS`), and, as librdkafka 2.0.2 does, the member joins again keeping its
///   assignment, which starts the rebalance over for everyone; a commit the cluster is told to
///   refuse is refused for a stale generation (`ILLEGAL_GENERATION`), and the member then gives
///   up its whole assignment (revoked in its next poll, as lost) and joins again. A rebalance
///   hands out its assignment only once every member has polled since it began and
///   `rebalanceDelay` has passed (the JoinGroup and SyncGroup round trips).
/// - a producer's records are written when it serves its delivery reports (`poll`, `flush`),
///   unless the brokers are unreachable: then they wait, and `flush` spends its timeout on the
///   simulated clock. A topic can refuse records larger than a size (the broker's
///   `max.message.bytes`), or be missing.
/// - a poll can be cut by a rebalance between two records, as librdkafka's batch calls are.
final class SimulatedCluster: @unchecked Sendable {
    // @unchecked: the simulation runs on one thread; nothing here is touched concurrently.
    let kafka: InMemoryKafka
    /// The simulated wall clock (ms); the runners read it through `clock`.
    var now: Int64
    /// The producer's `message.max.bytes`: a larger record is refused at `send`.
    var producerLimit = 1_000_000
    /// Topics whose brokers take records only up to this size (`max.message.bytes`).
    var brokerLimits: [String: Int] = [:]
    /// Topics that refuse every record (`TOPIC_AUTHORIZATION_FAILED`: an ACL taken away), until
    /// when (clock ms), and every topic that ever refused one.
    var refusedTopics: [String: Int64] = [:]
    private(set) var topicsThatRefused: Set<String> = []
    /// Until when no broker answers (clock ms): records wait, commits fail, polls bring nothing.
    var unreachableUntil: Int64 = .min
    /// End-offset lookups answered NOT_LEADER_FOR_PARTITION (a leader moved since the client's
    /// metadata), how many more.
    var failedEndLookups = 0
    /// Commits of these groups refused, as for a stale generation, how many more times.
    var refusedCommits: [String: Int] = [:]
    /// The next polls of these groups' members are cut by a rebalance after this many records.
    var cutPolls: [String: Int] = [:]
    /// Called with each partition a member was assigned, once its assignment callback has run
    /// (the runner has read where the partition starts) and before the poll fetches anything:
    /// where retention moves a log start between the two.
    var afterAssignment: ((TopicPartition) -> Void)?
    /// Whether the cluster answers DescribeConfigs (librdkafka's mock cluster does not).
    var describesConfigs = true
    /// How long a rebalance takes from its start until the coordinator hands out the new
    /// assignment (the JoinGroup and SyncGroup round trips, every member rejoining): meanwhile
    /// the group is rebalancing, and a commit of the old generation is refused.
    var rebalanceDelay: Int64 = 1_000
    /// Who decides which member owns what.
    var assignor = Assignor.cooperativeSticky
    /// A planted defect (never in the runner): the log starts the cluster tells clients are
    /// wrong.
    var logStartFault: LogStartFault?
    /// DeleteRecords: when requests are carried out, whether they are refused (`SimulatedDeletions.swift`).
    let recordDeletions = RecordDeletions()
    /// What a client saw a runner do that no runner may (a commit past what it was handed, of a
    /// partition it does not own): the checks report each.
    private(set) var violations: [String] = []
    /// Per partition and offset, when a poll last handed the record out (clock ms; `.min`: never).
    /// A stage judges what a poll brings within the poll's turn, so no later: a window size can
    /// have found a hit too late only if this is at or past the window's expiry (the horizon
    /// never passes the clock).
    private(set) var handedOut: [TopicPartition: [Int64]] = [:]

    fileprivate func noteHandedOut(_ events: [HeldRecord]) {
        for event in events {
            let tp = TopicPartition(topic: event.topic, partition: event.partition)
            let missing = Int(event.offset) + 1 - (handedOut[tp]?.count ?? 0)
            if missing > 0 { handedOut[tp, default: []].append(contentsOf: repeatElement(.min, count: missing)) }
            handedOut[tp]![Int(event.offset)] = now
        }
    }
    /// What happened, for the checks and the trace.
    private(set) var rebalances = 0
    private(set) var refusals = 0
    var trace: [String]?

    private var groups: [String: SimulatedGroup] = [:]
    private var nextMemberId = 1

    init(kafka: InMemoryKafka, now: Int64) {
        self.kafka = kafka
        self.now = now
    }

    var clock: @Sendable () -> Int64 {
        { [unowned self] in self.now }
    }

    var isUnreachable: Bool { now < unreachableUntil }

    func violation(_ text: String) { violations.append(text) }

    func note(_ line: @autoclosure () -> String) { trace?.append("[\(now)] " + line()) }

    func group(_ id: String) -> SimulatedGroup {
        if let group = groups[id] { return group }
        let group = SimulatedGroup(id: id, cluster: self)
        groups[id] = group
        return group
    }

    // MARK: Clients

    /// A consumer of one process (its `life`); `ProcessClients` is the factory the runners get.
    func consumer(config: KafkaConfig, rebalance: RebalanceHandler?, maxBatch: Int, life: ProcessLife) -> SimulatedConsumer {
        defer { nextMemberId += 1 }
        return SimulatedConsumer(
            cluster: self, memberId: nextMemberId, group: config["group.id"] ?? "", rebalance: rebalance, maxBatch: maxBatch,
            reportsEnds: config["enable.partition.eof"] == "true", instanceId: config["group.instance.id"], life: life)
    }

    // MARK: Group bookkeeping

    func rebalanced(_ group: SimulatedGroup) {
        rebalances += 1
        note("group \(group.id): generation \(group.generation)")
    }

    func refused(_ group: SimulatedGroup, member: Int) {
        refusals += 1
        note("group \(group.id): commit of member \(member) refused")
    }

    func refusedTopic(_ topic: String) { topicsThatRefused.insert(topic) }
}

/// How a planted defect misreports log starts (`Fault.hiddenRetention`, `Fault.phantomRetention`).
enum LogStartFault {
    /// Every partition is said to begin at 0, whatever retention deleted.
    case hidden
    /// Every partition is said to begin at its end, though it holds every record.
    case phantom
}

/// Who decides which member of a group owns what.
enum Assignor {
    /// librdkafka's cooperative-sticky assignor: a member joining or leaving starts a rebalance,
    /// each generation is settled by every member rejoining (see `SimulatedCluster`).
    case cooperativeSticky
    /// The schedule decides (the stage simulator's `World`): a member owns what it is handed
    /// (`move`), a member that leaves or dies leaves its partitions unowned until they are handed
    /// on, and the coordinator takes every member's commits. Handing over is still cooperative:
    /// the old owner gives a partition up in its next poll (its revoke callback commits), and only
    /// then does the new owner take it, in its next poll.
    case directed
}

/// One consumer group's coordinator: members, the generation, and who owns what.
final class SimulatedGroup {
    let id: String
    unowned let cluster: SimulatedCluster
    private(set) var generation = 0
    private(set) var topic: String?
    /// Members in the order they joined (the assignor's order).
    private(set) var members: [Int] = []
    /// What each member owns, as far as the group is concerned (given up once revoked).
    private(set) var owned: [Int: Set<Int32>] = [:]
    /// What each member must give up at its next poll, and what it is then to take.
    private(set) var toRevoke: [Int: Set<Int32>] = [:]
    private(set) var toAssign: [Int: Set<Int32>] = [:]
    /// The generation each member last took part in.
    private(set) var memberGeneration: [Int: Int] = [:]
    /// Members that must give up everything they own, as lost, and join again.
    private(set) var lost: Set<Int> = []
    /// Members that have polled since the generation began (rejoined it), and when the
    /// coordinator may hand out its assignment.
    private var rejoined: Set<Int> = []
    private var readyAt: Int64 = .min

    init(id: String, cluster: SimulatedCluster) {
        self.id = id
        self.cluster = cluster
    }

    private var directed: Bool { cluster.assignor == .directed }

    func join(_ member: Int, topic: String) {
        self.topic = topic
        if !members.contains(member) { members.append(member) }
        owned[member] = owned[member] ?? []
        if directed {
            memberGeneration[member] = generation
        } else {
            rebalance()
        }
    }

    /// Directed: `partitions` go to `member`; whoever owns them (or was to take them) gives them
    /// up first. A partition moved to its own owner is revoked and assigned again.
    func move(_ partitions: Set<Int32>, to member: Int) {
        precondition(directed, "only a directed group is told who owns what")
        generation += 1
        cluster.rebalanced(self)
        for other in members {
            toAssign[other]?.subtract(partitions)
            let giving = (owned[other] ?? []).intersection(partitions)
            if !giving.isEmpty { toRevoke[other, default: []].formUnion(giving) }
        }
        toAssign[member, default: []].formUnion(partitions)
    }

    /// A member left (closed) or died: what it owned goes to the others.
    func leave(_ member: Int) {
        members.removeAll { $0 == member }
        owned[member] = nil
        toRevoke[member] = nil
        toAssign[member] = nil
        memberGeneration[member] = nil
        lost.remove(member)
        if !directed { rebalance() }
    }

    /// The target assignment, sticky: each member keeps what it owns up to its fair share; the
    /// rest goes, partition by partition, to the members with the fewest.
    private func rebalance() {
        generation += 1
        rejoined = []
        readyAt = cluster.now + cluster.rebalanceDelay
        cluster.rebalanced(self)
        guard let topic, !members.isEmpty else { return }
        let partitions = Int32(cluster.kafka.topic(topic).partitionCount)
        let share = (Int(partitions) + members.count - 1) / members.count
        var target: [Int: Set<Int32>] = [:]
        var taken: Set<Int32> = []
        for member in members {
            let keep = (owned[member] ?? []).subtracting(toRevoke[member] ?? []).sorted().prefix(share)
            target[member] = Set(keep)
            taken.formUnion(keep)
        }
        for partition in 0..<partitions where !taken.contains(partition) {
            let member = members.min { (target[$0]?.count ?? 0, members.firstIndex(of: $0)!) < (target[$1]?.count ?? 0, members.firstIndex(of: $1)!) }!
            target[member, default: []].insert(partition)
        }
        for member in members {
            let current = (owned[member] ?? []).subtracting(toRevoke[member] ?? [])
            toRevoke[member, default: []].formUnion(current.subtracting(target[member] ?? []))
            toAssign[member] = (target[member] ?? []).subtracting(current)
        }
    }

    /// The member gave up these partitions (its revoke callback ran).
    func revoked(_ member: Int, _ partitions: Set<Int32>) {
        owned[member, default: []].subtract(partitions)
        toRevoke[member, default: []].subtract(partitions)
    }

    /// What the member may take now: its share of the rebalance, minus what another member has
    /// yet to give up (cooperative rebalancing moves a partition only once it is free).
    func assignable(to member: Int) -> Set<Int32> {
        guard isSettling else { return [] }
        let pending = toRevoke.values.reduce(into: Set<Int32>()) { $0.formUnion($1) }
        return (toAssign[member] ?? []).subtracting(pending)
    }

    func assigned(_ member: Int, _ partitions: Set<Int32>) {
        owned[member, default: []].formUnion(partitions)
        toAssign[member, default: []].subtract(partitions)
        if (toAssign[member] ?? []).isEmpty { memberGeneration[member] = generation }
    }

    /// The member polled: it takes part in the rebalance under way.
    func polled(_ member: Int) { rejoined.insert(member) }

    /// Every member has rejoined and the round trips are done: the assignment can go out.
    var isSettling: Bool { directed || (cluster.now >= readyAt && Set(members).isSubset(of: rejoined)) }

    /// Whether the member has taken its part in the current generation.
    func isCurrent(_ member: Int) -> Bool {
        directed || (memberGeneration[member] == generation && (toRevoke[member] ?? []).isEmpty)
    }

    /// What the group says the member owns.
    func ownership(of member: Int) -> Set<Int32> { owned[member] ?? [] }

    /// The coordinator refused the member's commit for a generation it no longer knows
    /// (`ILLEGAL_GENERATION`): librdkafka gives up the whole assignment as lost and joins again.
    func refuse(_ member: Int) {
        cluster.refused(self, member: member)
        lost.insert(member)
    }

    /// The coordinator refused the member's commit because the group is rebalancing
    /// (`REBALANCE_IN_PROGRESS`): librdkafka 2.0.2 keeps the assignment and joins again, and a
    /// JoinGroup while the group completes a rebalance starts it over, for every member.
    func refuseDuringRebalance(_ member: Int) {
        cluster.refused(self, member: member)
        rebalance()
    }

    /// The member gave up everything (lost) and joins again.
    func rejoin(_ member: Int) {
        lost.remove(member)
        owned[member] = []
        toRevoke[member] = []
        toAssign[member] = []
        memberGeneration[member] = nil
        rebalance()
    }

    func isLost(_ member: Int) -> Bool { lost.contains(member) }
}

/// A consumer of the simulated cluster: a group member (`subscribe`) or a reader of fixed
/// partitions (`assign`), reading the in-memory logs.
final class SimulatedConsumer: ConsumerClient {
    unowned let cluster: SimulatedCluster
    let memberId: Int
    let groupId: String
    let rebalance: RebalanceHandler?
    let maxBatch: Int
    let reportsEnds: Bool
    let groupInstanceId: String?
    private var subscribed: String?
    /// Owned (or assigned) partitions and the next offset to read.
    private var positions: [TopicPartition: Int64] = [:]
    private var paused: Set<TopicPartition> = []
    /// The end last reported per partition, so that it is reported once.
    private var reportedEnds: [TopicPartition: Int64] = [:]
    private(set) var closed = false
    /// Inside the revoke callback of a lost assignment: commits are refused.
    private var losing = false
    /// The process this client belongs to: whether it is alive, and how its polls are cut.
    let life: ProcessLife
    /// What the last poll handed out, for the trace ("1:0-4 2:7-8"); the world clears it before
    /// a turn.
    var lastPoll = ""

    init(
        cluster: SimulatedCluster, memberId: Int, group: String, rebalance: RebalanceHandler?, maxBatch: Int, reportsEnds: Bool,
        instanceId: String?, life: ProcessLife
    ) {
        self.life = life
        self.cluster = cluster
        self.memberId = memberId
        self.groupId = group
        self.rebalance = rebalance
        self.maxBatch = maxBatch
        self.reportsEnds = reportsEnds
        self.groupInstanceId = instanceId
    }

    private var group: SimulatedGroup { cluster.group(groupId) }

    /// Whether it is a group member (subscribed), rather than a reader of fixed partitions.
    var isMember: Bool { subscribed != nil }

    func subscribe(topics: [String]) throws {
        guard let topic = topics.first else { return }
        subscribed = topic
        group.join(memberId, topic: topic)
    }

    func assign(_ offsets: [TopicPartitionOffset]) throws {
        positions = [:]
        for offset in offsets {
            positions[offset.topicPartition] = offset.offset >= 0 ? offset.offset : startOffset(offset.topicPartition, committedOr: offset.offset)
        }
        reportedEnds = [:]
    }

    private func startOffset(_ tp: TopicPartition, committedOr offset: Int64) -> Int64 {
        if offset == KafkaOffset.end { return cluster.kafka.topic(tp.topic).end(of: tp.partition) }
        return cluster.kafka.topic(tp.topic).start(of: tp.partition)
    }

    /// Rebalance callbacks first (as librdkafka serves them inside the poll), then records of
    /// owned, unpaused partitions, a run per partition, and their ends.
    func pollBatch<R>(timeoutMilliseconds: Int32, _ body: (HeldBatch) throws -> R) rethrows -> R? {
        lastPoll = ""
        guard !closed, !life.killed else { return nil }
        var revocations: [ConsumerBatch.Revocation] = []
        serveGroup(revocations: &revocations, gathered: 0)
        if !cluster.isUnreachable { resetBelowLogStart() }
        if !isMember, cluster.isUnreachable {
            // A reader outside the groups waits its poll's timeout for brokers that do not answer
            // (the members' polls are the world's to time).
            cluster.now += Int64(max(1, timeoutMilliseconds))
            return nil
        }
        guard !cluster.isUnreachable else { return nil }
        // The schedule cuts the polls of members and of state restores; another reader outside
        // the groups reads what it asked for.
        if let plan = life.plan, isMember || positions.keys.allSatisfy({ $0.topic == life.stateTopic }) {
            let events = gather(plan)
            guard !events.isEmpty || !revocations.isEmpty else { return nil }
            cluster.noteHandedOut(events)
            return try body(HeldBatch(events: events, revocations: revocations))
        }
        var events: [HeldRecord] = []
        let cut = subscribed == nil ? nil : cluster.cutPolls.removeValue(forKey: groupId)
        gathering: for tp in positions.keys.sorted(by: { ($0.topic, $0.partition) < ($1.topic, $1.partition) }) where !paused.contains(tp) {
            guard events.count < maxBatch, let position = positions[tp] else { continue }
            let log = cluster.kafka.topic(tp.topic)
            let end = log.end(of: tp.partition)
            var offset = position
            while offset < end && events.count < maxBatch {
                let entry = log.entry(partition: tp.partition, offset: offset)
                if !entry.skipped {
                    events.append(
                        HeldRecord(
                            topic: tp.topic, partition: tp.partition, offset: offset, key: log.bytes(entry.key), value: log.bytes(entry.value),
                            timestamp: entry.timestamp, headers: entry.headers))
                }
                offset += 1
                if let cut, events.count == cut, let topic = subscribed {
                    positions[tp] = offset
                    // The assignment lost between two records of the batch (librdkafka 2.0.2
                    // after a refused SyncGroup), and the same partitions assigned again at once,
                    // from their commits: what was gathered before belongs to the assignment that
                    // held then, and the same offsets come again.
                    let owned = Set(positions.keys.filter { $0.topic == topic }.map(\.partition))
                    // Lost: the revoke callback's commit is refused, the generation being gone.
                    losing = true
                    give(owned, topic: topic, revocations: &revocations, gathered: events.count, lost: true)
                    losing = false
                    take(owned, topic: topic, note: "again within a poll")
                    continue gathering
                }
            }
            if positions[tp] != nil { positions[tp] = offset }
            if reportsEnds, offset == end, reportedEnds[tp] != end, events.count < maxBatch {
                reportedEnds[tp] = end
                events.append(HeldRecord.partitionEnd(topic: tp.topic, partition: tp.partition, offset: end))
            }
        }
        guard !events.isEmpty else { return nil }
        cluster.noteHandedOut(events)
        return try body(HeldBatch(events: events, revocations: revocations))
    }

    /// A poll as the schedule cut it: up to `plan.budget` records in runs of random length from
    /// partitions picked at random (a consumer hands out what each fetch brought), then the ends
    /// of the partitions read to their end.
    private func gather(_ plan: PollPlan) -> [HeldRecord] {
        var random = SplitMix(plan.cut)
        var next = positions.filter { !paused.contains($0.key) }
        var available = next.keys.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }.filter {
            next[$0]! < cluster.kafka.topic($0.topic).end(of: $0.partition)
        }
        var slices: [(tp: TopicPartition, offsets: Range<Int64>)] = []
        var left = max(0, plan.budget)
        while left > 0, !available.isEmpty {
            let index = Int(random.below(UInt64(available.count)))
            let tp = available[index]
            let from = next[tp]!
            let end = cluster.kafka.topic(tp.topic).end(of: tp.partition)
            let run = min(end - from, Int64(min(left, 1 + Int(random.below(UInt64(min(left, 64)))))))
            slices.append((tp, from..<from + run))
            next[tp] = from + run
            left -= Int(run)
            if from + run == end { available.remove(at: index) }
        }
        var events: [HeldRecord] = []
        for (tp, offsets) in slices {
            let log = cluster.kafka.topic(tp.topic)
            for offset in offsets {
                let entry = log.entry(partition: tp.partition, offset: offset)
                if entry.skipped || life.skip?(tp.topic, tp.partition, offset) == true { continue }
                events.append(
                    HeldRecord(
                        topic: tp.topic, partition: tp.partition, offset: offset, key: log.bytes(entry.key), value: log.bytes(entry.value),
                        timestamp: entry.timestamp, headers: entry.headers))
            }
        }
        let prefix = subscribed == nil ? "state " : ""
        lastPoll = slices.map { "\(prefix)\($0.tp.partition):\($0.offsets.lowerBound)-\($0.offsets.upperBound - 1)" }.joined(separator: " ")
        // In partition order: a seed replays the same batches in every process.
        for tp in next.keys.sorted(by: { ($0.topic, $0.partition) < ($1.topic, $1.partition) }) {
            let position = next[tp]!
            positions[tp] = position
            let end = cluster.kafka.topic(tp.topic).end(of: tp.partition)
            if reportsEnds, position == end, reportedEnds[tp] != end {
                reportedEnds[tp] = end
                events.append(HeldRecord.partitionEnd(topic: tp.topic, partition: tp.partition, offset: end))
            }
        }
        return events
    }

    /// A fetch below a partition's log start (retention or DeleteRecords moved it past) is out
    /// of range (OFFSET_OUT_OF_RANGE): librdkafka, with `auto.offset.reset=earliest` as trackpipe
    /// sets it, goes on from the log start, and the records in between are never delivered.
    /// Paused partitions are not fetched, and are moved once resumed.
    private func resetBelowLogStart() {
        cluster.settleDeletions()
        for (tp, position) in positions.sorted(by: { ($0.key.topic, $0.key.partition) < ($1.key.topic, $1.key.partition) })
        where !paused.contains(tp) {
            let start = cluster.kafka.topic(tp.topic).start(of: tp.partition)
            guard position < start else { continue }
            positions[tp] = start
            reportedEnds[tp] = nil
            cluster.note("\(groupId) member \(memberId): \(tp) offset \(position) out of range, reset to the log start \(start)")
        }
    }

    /// The partitions this consumer reads (owned, or assigned), and where it reads next.
    var readPositions: [TopicPartition: Int64] { closed || life.killed ? [:] : positions }

    /// The group's moves this member takes part in: a lost assignment given up and joined
    /// again, revocations, then what it may take.
    private func serveGroup(revocations: inout [ConsumerBatch.Revocation], gathered: Int) {
        guard let topic = subscribed else { return }
        if group.isLost(memberId) {
            let all = Set(positions.keys.filter { $0.topic == topic }.map(\.partition))
            if !all.isEmpty { give(all, topic: topic, revocations: &revocations, gathered: gathered, lost: true) }
            group.rejoin(memberId)
        }
        let revoke = group.toRevoke[memberId] ?? []
        if !revoke.isEmpty { give(revoke, topic: topic, revocations: &revocations, gathered: gathered, lost: false) }
        group.polled(memberId)
        let take = group.assignable(to: memberId)
        if !take.isEmpty || (group.isSettling && (group.toAssign[memberId] ?? []).isEmpty && !group.isCurrent(memberId)) {
            self.take(take, topic: topic)
        }
    }

    /// Takes partitions from their commits (the log's start without one), through the handler.
    private func take(_ partitions: Set<Int32>, topic: String, note: String = "") {
        let list = partitions.sorted().map { TopicPartition(topic: topic, partition: $0) }
        for tp in list {
            let committed = cluster.kafka.committed(group: groupId, topic: topic, partition: tp.partition)
            positions[tp] = committed.map { $0.offset } ?? cluster.kafka.topic(topic).start(of: tp.partition)
            reportedEnds[tp] = nil
        }
        group.assigned(memberId, partitions)
        cluster.note("\(groupId) member \(memberId): assigned \(partitions.sorted()) \(note)")
        rebalance?.partitionsAssigned(list)
        for tp in list { cluster.afterAssignment?(tp) }
    }

    private func give(_ partitions: Set<Int32>, topic: String, revocations: inout [ConsumerBatch.Revocation], gathered: Int, lost: Bool) {
        let list = partitions.sorted().map { TopicPartition(topic: topic, partition: $0) }
        cluster.note("\(groupId) member \(memberId): \(lost ? "lost" : "revoked") \(partitions.sorted())")
        revocations.append(ConsumerBatch.Revocation(before: gathered, partitions: list))
        rebalance?.partitionsRevoking(list)
        for tp in list {
            positions[tp] = nil
            paused.remove(tp)
        }
        group.revoked(memberId, partitions)
    }

    func commit(_ offsets: [TopicPartitionOffset]) throws {
        guard !offsets.isEmpty else { return }
        try life.check()
        if life.diesAtCommit { throw life.kill() }
        if cluster.isUnreachable { throw KafkaError(.transport, "committing \(offsets)") }
        if subscribed != nil {
            if losing {
                cluster.refused(group, member: memberId)
                throw KafkaError(.illegalGeneration, "committing \(offsets)")
            }
            if let refusals = cluster.refusedCommits[groupId], refusals > 0 {
                cluster.refusedCommits[groupId] = refusals - 1
                group.refuse(memberId)
                throw KafkaError(.illegalGeneration, "committing \(offsets)")
            }
            if !group.isCurrent(memberId) {
                group.refuseDuringRebalance(memberId)
                throw KafkaError(.rebalanceInProgress, "committing \(offsets)")
            }
        }
        for offset in offsets {
            if let position = positions[offset.topicPartition] {
                if offset.offset > position {
                    cluster.violation("\(groupId) committed \(offset.topicPartition) at \(offset.offset), past what it was handed (\(position))")
                }
            } else if subscribed != nil {
                cluster.violation("\(groupId) committed \(offset.topicPartition), which it does not own")
            }
            cluster.kafka.commit(
                group: groupId, topic: offset.topic, partition: offset.partition,
                InMemoryKafka.Committed(offset: offset.offset, metadata: offset.metadata))
        }
    }

    func committed(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset] {
        try committed(by: groupId, partitions, timeoutMilliseconds: timeoutMilliseconds)
    }

    func committed(by group: String, _ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset] {
        try life.check()
        if cluster.isUnreachable { throw KafkaError(.timedOut, "reading committed offsets") }
        return partitions.map { tp in
            let committed = cluster.kafka.committed(group: group, topic: tp.topic, partition: tp.partition)
            return TopicPartitionOffset(tp, offset: committed?.offset ?? KafkaOffset.invalid, metadata: committed?.metadata)
        }
    }

    func beginningOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset] {
        try life.check()
        if cluster.isUnreachable { throw KafkaError(.timedOut, "looking up offsets") }
        return partitions.map { TopicPartitionOffset($0, offset: reportedStart(of: $0)) }
    }

    /// A partition's log start as the cluster tells it (see `LogStartFault`).
    private func reportedStart(of tp: TopicPartition) -> Int64 {
        let log = cluster.kafka.topic(tp.topic)
        switch cluster.logStartFault {
        case nil: return log.start(of: tp.partition)
        case .hidden: return 0
        case .phantom: return log.end(of: tp.partition)
        }
    }

    func endOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32) throws -> [TopicPartitionOffset] {
        try life.check()
        if cluster.isUnreachable { throw KafkaError(.timedOut, "looking up offsets") }
        if cluster.failedEndLookups > 0 {
            cluster.failedEndLookups -= 1
            throw KafkaError(.notLeader, "looking up offsets for timestamp -1")
        }
        return partitions.map { TopicPartitionOffset($0, offset: cluster.kafka.topic($0.topic).end(of: $0.partition)) }
    }

    func pause(_ partitions: [TopicPartition]) throws {
        try life.check()
        paused.formUnion(partitions)
    }

    func resume(_ partitions: [TopicPartition]) throws {
        try life.check()
        paused.subtract(partitions)
    }

    func seek(_ offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws {
        try life.check()
        for offset in offsets where positions[offset.topicPartition] != nil {
            positions[offset.topicPartition] = offset.offset >= 0 ? offset.offset : startOffset(offset.topicPartition, committedOr: offset.offset)
            reportedEnds[offset.topicPartition] = nil
        }
    }

    func cachedWatermarks(_ partition: TopicPartition) -> (low: Int64, high: Int64)? {
        (reportedStart(of: partition), cluster.kafka.topic(partition.topic).end(of: partition.partition))
    }

    /// Leaves the group: what it owns is revoked through the handler first, as librdkafka's
    /// close does.
    func close() {
        guard !closed else { return }
        if let topic = subscribed {
            var revocations: [ConsumerBatch.Revocation] = []
            let all = Set(positions.keys.filter { $0.topic == topic }.map(\.partition))
            if !all.isEmpty { give(all, topic: topic, revocations: &revocations, gathered: 0, lost: false) }
            group.leave(memberId)
        }
        closed = true
    }

    /// The process died: no callback, no commit; the group moves its partitions on (as after
    /// the session timeout).
    func crash() {
        guard !closed else { return }
        closed = true
        if subscribed != nil { group.leave(memberId) }
    }
}

/// A producer of the simulated cluster: records are written when delivery reports are served.
final class SimulatedProducer: ProducerClient, @unchecked Sendable {
    // @unchecked: the simulation runs on one thread.
    unowned let cluster: SimulatedCluster
    let onDelivery: (@Sendable (DeliveryReport) -> Void)?
    private struct Queued {
        var topic: String
        var partition: Int32?
        var key: [UInt8]?
        var value: [UInt8]?
        var headers: [KafkaHeader]
        var timestamp: Int64?
        var token: UInt64
        /// When it was sent (the planted `overtakenRecords` fault delays it from there).
        var sentAt: Int64
    }
    private var queue: [Queued] = []
    let life: ProcessLife

    /// Makes the deleter that asks over this producer's connections, as librdkafka's does.
    private let makeDeleter: () -> SimulatedDeleter

    init(cluster: SimulatedCluster, onDelivery: (@Sendable (DeliveryReport) -> Void)?, life: ProcessLife, deleter: @escaping () -> SimulatedDeleter) {
        self.cluster = cluster
        self.onDelivery = onDelivery
        self.life = life
        makeDeleter = deleter
    }

    func recordDeleter() throws -> any RecordDeletionClient {
        try life.check()
        return makeDeleter()
    }

    func topic(_ name: String) -> ProducerTopic { ProducerTopic(name: name) }

    func send(
        to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?, token: UInt64
    ) throws {
        try life.check()
        let size = DeadLetterCut.size(keyBytes: key?.count ?? 0, valueBytes: value?.count ?? 0, headers: headers) - 200
        if size > cluster.producerLimit {
            throw KafkaError(.messageTooLarge, "producing to \(topic.name)")
        }
        queue.append(
            Queued(
                topic: topic.name, partition: partition, key: key.map { Array($0) }, value: value.map { Array($0) }, headers: headers,
                timestamp: timestamp ?? cluster.now, token: token, sentAt: cluster.now))
    }

    @discardableResult
    /// The headers as values: this producer keeps no other kind.
    func send(
        to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headerBlock: KafkaHeaderBlock, timestamp: Int64?, token: UInt64
    ) throws {
        try send(to: topic, partition: partition, key: key, value: value, headers: headerBlock.headers, timestamp: timestamp, token: token)
    }

    func poll(timeoutMilliseconds: Int32) -> Int {
        deliver(waiting: false)
    }

    func flush(timeoutMilliseconds: Int32) throws {
        try life.check()
        let stateBefore = stateDelivered
        deliver()
        // Armed to die once the state written for a commit is acknowledged: now.
        if life.diesOnceStateIsWritten, stateDelivered > stateBefore { throw life.kill() }
        guard queue.isEmpty else {
            // Waiting on brokers that do not answer: the time passes.
            cluster.now += Int64(timeoutMilliseconds)
            deliver()
            if !queue.isEmpty { throw KafkaError(.timedOut, "flush did not complete within \(timeoutMilliseconds) ms") }
            return
        }
    }

    var outstanding: Int { queue.count }

    /// The process died: what was not delivered is gone.
    func crash() {
        queue = []
    }

    /// State records delivered, for a death armed for once the state is written.
    private var stateDelivered = 0

    /// Delivers what is queued, in order; `waiting`: a flush, which waits for every record.
    @discardableResult
    private func deliver(waiting: Bool = true) -> Int {
        guard !life.killed, !cluster.isUnreachable else { return 0 }
        var batch = queue
        queue = []
        if !waiting, let delay = life.repartitionDelay,
            let held = batch.firstIndex(where: { $0.topic.hasSuffix("-repartition") && $0.sentAt + delay > cluster.now })
        {
            queue = Array(batch[held...])
            batch.removeSubrange(held...)
        }
        for (index, record) in batch.enumerated() {
            guard let log = cluster.kafka.topics[record.topic] else {
                report(record, error: KafkaError(.unknownTopic, "delivery failed"))
                continue
            }
            if (cluster.refusedTopics[record.topic] ?? .min) > cluster.now {
                cluster.refusedTopic(record.topic)
                report(record, error: KafkaError(.topicAuthorizationFailed, "delivery failed"))
                continue
            }
            let size = (record.key?.count ?? 0) + (record.value?.count ?? 0) + record.headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }
            if let limit = cluster.brokerLimits[record.topic], size > limit {
                report(record, error: KafkaError(.messageTooLarge, "delivery failed"))
                continue
            }
            let partition = record.partition ?? Self.partition(of: record.key, count: log.partitionCount)
            guard partition >= 0, Int(partition) < log.partitionCount else {
                cluster.violation("a record was sent to partition \(partition) of \(record.topic), which has \(log.partitionCount)")
                report(record, error: KafkaError(.unknownTopic, "delivery failed: no partition \(partition)"))
                continue
            }
            if record.topic == life.stateTopic {
                if let percent = life.statePercentBeforeDeath {
                    if life.stateCut == nil {
                        // The whole write is queued before it is flushed: this is all of it.
                        life.stateCut = batch[index...].filter { $0.topic == life.stateTopic }.count * percent / 100
                    }
                    if life.stateWrite.count == life.stateCut {
                        // Armed to die in the middle of this state write: the rest is lost.
                        let lost = batch[index...].filter { $0.topic == life.stateTopic }
                        life.onStateWriteCut?(life.stateWrite, lost.map { StateWriteRecord(key: $0.key ?? [], tombstone: $0.value == nil) })
                        if life.keepsDeletionsOfACutWrite {
                            // The planted `unorderedStateWrite` fault: the cut write's deletions
                            // land although what was sent before them did not.
                            let stamp = life.stamp?() ?? WriteStamp(time: cluster.now, writer: -1, outputCrashes: 0)
                            for deletion in lost where deletion.value == nil {
                                let partition = deletion.partition ?? Self.partition(of: deletion.key, count: log.partitionCount)
                                deletion.key.withOptionalBytes { key in
                                    _ = log.append(partition: partition, key: key, value: nil, timestamp: deletion.timestamp, stamp: stamp)
                                }
                            }
                        }
                        life.kill()
                        return batch.count
                    }
                    life.stateWrite.append(StateWriteRecord(key: record.key ?? [], tombstone: record.value == nil))
                }
                stateDelivered += 1
            }
            let stamp = life.stamp?() ?? WriteStamp(time: cluster.now, writer: -1, outputCrashes: 0)
            let offset = record.value.withOptionalBytes { value in
                record.key.withOptionalBytes { key in
                    log.append(
                        partition: partition, key: key, value: value, timestamp: record.timestamp, headers: record.headers,
                        stamp: stamp)
                }
            }
            onDelivery?(DeliveryReport(token: record.token, topic: record.topic, partition: partition, offset: offset, error: nil))
        }
        return batch.count
    }

    private func report(_ record: Queued, error: KafkaError) {
        onDelivery?(
            DeliveryReport(
                token: record.token, topic: record.topic, partition: record.partition ?? -1, offset: -1, error: error,
                refused: RefusedRecord(key: record.key, value: record.value, headers: record.headers, timestamp: record.timestamp)))
    }

    /// Keyless records spread by nothing: partition 0; keyed ones by a stable hash.
    static func partition(of key: [UInt8]?, count: Int) -> Int32 {
        guard let key, !key.isEmpty else { return 0 }
        var hash: UInt32 = 2_166_136_261
        for byte in key { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return Int32(hash % UInt32(count))
    }
}

extension SimulatedCluster {
    /// Kafka's defaults for what trackpipe's check reads, under the settings given to a topic.
    static let defaultConfigs = [
        "cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1", "segment.ms": "604800000",
        "segment.bytes": "1073741824", "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000",
    ]

    /// Every entry of each topic, as DescribeConfigs answers (a topic that does not exist, or a
    /// cluster that does not describe configs, leaves topics undescribed).
    func topicConfigs(_ topics: [String], timeoutMilliseconds: Int32) -> TopicConfigs {
        var answer = TopicConfigs()
        for topic in topics {
            if !describesConfigs {
                answer.undescribed[topic] = "_UNSUPPORTED_FEATURE: DescribeConfigs is not supported"
            } else if let log = kafka.topics[topic] {
                answer.described[topic] = Self.defaultConfigs.merging(log.configs) { $1 }
            } else {
                answer.undescribed[topic] = "UNKNOWN_TOPIC_OR_PART"
            }
        }
        return answer
    }
}
