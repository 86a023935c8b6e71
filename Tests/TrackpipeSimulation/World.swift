import Kafka
import Pipeline
import TrackingDomain

/// An input message as produced, with what must become of it.
struct ProducedMessage {
    var fate: Fate
    var kafkaTimestamp: Int64
    /// Simulated wall-clock ms at which it was written to the input topic.
    var producedAt: Int64
    var kind: HitSource.Kind
}

/// Everything one schedule runs in: the simulated clock, the in-memory cluster, the hit
/// source, and per instance a simulated runner per stage. It applies operations one at a time
/// and, at the end, drains: every hit produced, every record read by its stage, and everything
/// emitted.
final class World {
    static let normalizeGroup = "trackpipe"
    static let aggregateGroup = "trackpipe-aggregate"
    static let repartitionTopic = "trackpipe-repartition"
    static let outputTopic = "aggregates"
    static let deadLetterTopic = "dlq"

    let scenario: Scenario
    let options: SimulationOptions
    let kafka = InMemoryKafka()
    private(set) var now: Int64
    private var source: HitSource
    private(set) var mode: Mode
    private(set) var inputTopic: String
    private(set) var inputPartitions: Int
    private var topicGeneration = 1
    private(set) var runners: [Role: [any DrivenStage]] = [:]
    /// Runners replaced by a switch: their problems and totals still count.
    private(set) var retired: [any DrivenStage] = []
    private var orphans: [Role: Set<Int32>] = [:]
    /// topic → partition → offset.
    private(set) var produced: [String: [[ProducedMessage]]] = [:]
    /// Per input partition, until when its producer holds records back, and what it holds.
    private var stalls: [Int32: Int64] = [:]
    private var stalled: [Int32: [HitSource.Message]] = [:]
    private var silences: [Int32: Int64] = [:]
    private var routing: SplitMix
    private var writerIndex: [String: Int] = [:]
    private(set) var writers: [String] = []
    /// Crashes of stages that write the output (aggregate, or the one stage).
    private(set) var outputCrashes = 0
    private(set) var crashes = 0
    private(set) var rebalances = 0
    /// Until when no source can have been idle, as far as operations tell (lockstep schedules;
    /// the checks narrow it further by the gaps between hits).
    private(set) var idleFreeUntil: Int64
    /// Where each input topic's life began (its partitions were assigned then).
    private(set) var topicStarts: [String: Int64] = [:]
    /// Problems found while running (the simulation refusing something a stage did).
    private(set) var problems: [String] = []
    private(set) var trace: [String]?
    /// Operations applied, including the drain's.
    private(set) var steps = 0
    /// What the operation being traced read.
    private var batchNote: String?
    /// When each runner last polled or ticked: a runner left alone for half the idle timeout may
    /// let its stage (or the stages it feeds) find a source idle.
    private var lastServed: [ObjectIdentifier: Int64] = [:]

    init(scenario: Scenario, options: SimulationOptions) {
        self.scenario = scenario
        self.options = options
        now = scenario.start
        source = HitSource(scenario.hitSettings)
        mode = scenario.mode
        inputTopic = "hits"
        inputPartitions = scenario.inputPartitions
        routing = SplitMix(scenario.hitSeed ^ 0x0A5B_17E0)
        idleFreeUntil = scenario.lockstep ? .max : scenario.start
        if options.trace {
            trace = []
            kafka.commitTrace = []
        }
        kafka.create(inputTopic, partitions: inputPartitions)
        kafka.create(Self.repartitionTopic, partitions: scenario.repartitionPartitions)
        kafka.create(Self.outputTopic, partitions: 1)
        kafka.create(Self.deadLetterTopic, partitions: 1)
        produced[inputTopic] = Array(repeating: [], count: inputPartitions)
        topicStarts[inputTopic] = now
        startWorkers()
    }

    // MARK: Workers

    private var activeRoles: [Role] { mode == .twoStage ? [.normalize, .aggregate] : [.aggregate] }

    private func runner(_ role: Role, _ instance: Int) -> (any DrivenStage)? {
        guard let members = runners[role], members.indices.contains(instance) else { return nil }
        return members[instance]
    }

    /// Starts one runner per stage and instance for the current mode and input topic, and
    /// hands out every partition of their topics at random.
    private func startWorkers() {
        let scenario = self.scenario
        let inputTopic = self.inputTopic
        let sources = inputPartitions
        let repartition = kafka.topic(Self.repartitionTopic)
        let output = kafka.topic(Self.outputTopic)
        let deadLetters = kafka.topic(Self.deadLetterTopic)
        let limits = NormalizerLimits()
        runners = [:]
        switch mode {
        case .twoStage:
            runners[.normalize] = (0..<scenario.instances).map { instance in
                SimulatedRunner(
                    role: .normalize, instance: instance, group: Self.normalizeGroup, topic: inputTopic,
                    destinations: [.repartition: repartition, .deadLetter: deadLetters]
                ) {
                    NormalizeStage(
                        inputTopic: inputTopic, sourcePartitions: sources, repartitionPartitions: Int32(scenario.repartitionPartitions),
                        limits: limits, maxFutureSkew: scenario.maxFutureSkew, idleTimeout: scenario.window.idleTimeout,
                        markInterval: scenario.markInterval, parallelism: scenario.parallelism, batchBytes: scenario.batchBytes)
                }
            }
            runners[.aggregate] = (0..<scenario.instances).map { instance in
                SimulatedRunner(
                    role: .aggregate, instance: instance, group: Self.aggregateGroup, topic: Self.repartitionTopic,
                    destinations: [.output: output, .deadLetter: deadLetters]
                ) {
                    AggregateStage(
                        sourceTopic: inputTopic, input: RepartitionInput(), window: scenario.window, parallelism: scenario.parallelism)
                }
            }
        case .oneStage:
            // `--input-keyed-by-delivery` runs the aggregate stage in the group the normalize
            // stage uses (`Pipeline.runSingleStage`).
            runners[.aggregate] = (0..<scenario.instances).map { instance in
                SimulatedRunner(
                    role: .aggregate, instance: instance, group: Self.normalizeGroup, topic: inputTopic,
                    destinations: [.output: output, .deadLetter: deadLetters]
                ) {
                    AggregateStage(
                        sourceTopic: inputTopic, input: RawHitInput(limits: limits, maxFutureSkew: scenario.maxFutureSkew),
                        window: scenario.window, parallelism: scenario.parallelism)
                }
            }
        }
        if options.fault == .skipOneRecord {
            for member in runners.values.joined() where member.topic == inputTopic {
                (member as? any SkippingRecords)?.setSkip { [weak self] partition, offset in
                    self?.isSkipped(topic: inputTopic, partition: partition, offset: offset) ?? false
                }
            }
        }
        for member in runners.values.joined() { served(member) }
        for role in activeRoles {
            let members = runners[role]!
            let count = kafka.topic(members[0].topic).partitionCount
            var shares = Array(repeating: [Int32](), count: members.count)
            for partition in 0..<Int32(count) { shares[Int(routing.below(UInt64(members.count)))].append(partition) }
            for (member, share) in zip(members, shares) where !share.isEmpty { member.assign(share, kafka: kafka, now: now) }
        }
    }

    private func stamp(_ runner: any DrivenStage) -> WriteStamp {
        let label = runner.label
        let index: Int
        if let known = writerIndex[label] {
            index = known
        } else {
            index = writers.count
            writers.append(label)
            writerIndex[label] = index
        }
        return WriteStamp(time: now, writer: index, outputCrashes: outputCrashes)
    }

    // MARK: Operations

    /// Ends the idle-free span where a runner went without a tick, or left a record unread, for
    /// half the idle timeout: its stage, or the stages it sends marks to, may then have found a
    /// source idle.
    private func noteUnserved() {
        guard idleFreeUntil > scenario.start else { return }
        let limit = scenario.window.idleTimeout / 2
        for member in activeRoles.flatMap({ runners[$0]! }) {
            let served = lastServed[ObjectIdentifier(member)] ?? scenario.start
            if now - served >= limit { idleFreeUntil = min(idleFreeUntil, served) }
            if let waiting = member.oldestUnread(kafka: kafka), now - waiting >= limit {
                idleFreeUntil = min(idleFreeUntil, waiting)
            }
        }
    }

    private func served(_ runner: any DrivenStage) { lastServed[ObjectIdentifier(runner)] = now }

    func apply(_ operation: Operation) {
        steps += 1
        let before = trace == nil ? nil : snapshot()
        switch operation {
        case .produce(let advance):
            now += max(0, advance)
            noteUnserved()
            produceDue()
        case .pause(let length):
            idleFreeUntil = min(idleFreeUntil, now)
            source.quiet(until: now + length)
            now += length
        case .stall(let partition, let length):
            guard partition < inputPartitions else { break }
            stalls[partition] = max(stalls[partition] ?? now, now + length)
        case .silence(let partition, let length):
            guard partition < inputPartitions else { break }
            silences[partition] = max(silences[partition] ?? now, now + length)
        case .process(let role, let instance, let budget, let cut):
            guard let runner = runner(role, instance) else { break }
            if runner.process(budget: budget, cut: cut, kafka: kafka, now: now, stamp: stamp(runner)) > 0, trace != nil {
                batchNote = "read \(runner.lastBatch)"
            }
        case .tick(let role, let instance):
            guard let runner = runner(role, instance) else { break }
            served(runner)
            runner.tick(now: now, stamp: stamp(runner))
        case .commit(let role, let instance):
            guard let runner = runner(role, instance) else { break }
            commit(runner)
        case .rebalance(let role, let from, let to, let pick):
            guard let giver = runner(role, from), let taker = runner(role, to), !giver.owned.isEmpty else { break }
            var random = SplitMix(pick)
            var moving = giver.owned.filter { _ in random.chance(0.5) }
            if moving.isEmpty { moving = [random.pick(giver.owned)] }
            revoke(moving, from: giver)
            taker.assign(moving, kafka: kafka, now: now)
            rebalances += 1
        case .crash(let role, let instance):
            for role in role.map({ [$0] }) ?? activeRoles {
                guard let runner = runner(role, instance) else { continue }
                crash(runner)
            }
        case .adopt(let role, let pick):
            adopt(role, pick: pick)
        case .resend(let instance, let budget, let cut):
            guard mode == .twoStage, let runner = runner(.normalize, instance) else { break }
            runner.process(budget: budget, cut: cut, kafka: kafka, now: now, stamp: stamp(runner))
            crash(runner)
        case .switchTopic(let partitions):
            guard mode == .twoStage else { break }
            stopEveryWorker()
            topicGeneration += 1
            inputTopic = "hits-\(topicGeneration)"
            inputPartitions = max(1, partitions)
            kafka.create(inputTopic, partitions: inputPartitions)
            produced[inputTopic] = Array(repeating: [], count: inputPartitions)
            topicStarts[inputTopic] = now
            stalls = [:]
            silences = [:]
            startWorkers()
        case .switchToOneStage:
            guard mode == .twoStage else { break }
            stopEveryWorker()
            mode = .oneStage
            startWorkers()
        }
        if let before { record(batchNote.map { "\(operation) \($0)" } ?? "\(operation)", since: before) }
        batchNote = nil
    }

    private func commit(_ runner: any DrivenStage) {
        if options.fault == .commitReadPosition, let runner = runner as? any ReadPositionCommitting {
            runner.commitReadPositions(kafka: kafka)
            return
        }
        runner.commit(kafka: kafka, only: nil)
    }

    private func revoke(_ partitions: [Int32], from runner: any DrivenStage) {
        if options.fault == .commitReadPosition, let committing = runner as? any ReadPositionCommitting {
            committing.commitReadPositions(kafka: kafka)
        }
        runner.revoke(partitions, kafka: kafka)
    }

    private func crash(_ runner: any DrivenStage) {
        idleFreeUntil = min(idleFreeUntil, now)
        orphans[runner.role, default: []].formUnion(runner.crash())
        crashes += 1
        if runner.role == .aggregate { outputCrashes += 1 }
    }

    /// The group gives the partitions of crashed members to its members.
    private func adopt(_ role: Role, pick: UInt64) {
        guard let lost = orphans[role], !lost.isEmpty, let members = runners[role] else { return }
        var random = SplitMix(pick)
        var shares = Array(repeating: [Int32](), count: members.count)
        for partition in lost.sorted() { shares[Int(random.below(UInt64(members.count)))].append(partition) }
        for (member, share) in zip(members, shares) where !share.isEmpty { member.assign(share, kafka: kafka, now: now) }
        orphans[role] = []
    }

    /// The operator's switch: what the stages owe is caught up, every member commits and leaves.
    private func stopEveryWorker() {
        idleFreeUntil = min(idleFreeUntil, now)
        releaseStalls(all: true)
        for role in activeRoles {
            adopt(role, pick: UInt64(bitPattern: now))
            for member in runners[role]! {
                member.process(budget: .max, cut: UInt64(bitPattern: now), kafka: kafka, now: now, stamp: stamp(member))
            }
        }
        for role in activeRoles {
            for member in runners[role]! {
                commit(member)
                revoke(member.owned, from: member)
                retired.append(member)
            }
        }
    }

    // MARK: Producing

    private func produceDue() {
        releaseStalls(all: false)
        for message in source.due(at: now) {
            guard let partition = route(message) else { continue }
            if let until = stalls[partition], until > now {
                stalled[partition, default: []].append(message)
            } else {
                write(message, to: partition)
            }
        }
    }

    private func releaseStalls(all: Bool) {
        for partition in stalls.keys.sorted() where all || stalls[partition]! <= now {
            for message in stalled[partition] ?? [] { write(message, to: partition) }
            stalled[partition] = nil
            stalls[partition] = nil
        }
    }

    /// The input partition of a message: by delivery when the input is keyed so, else any
    /// partition that is not silent. A message for a silent partition is never sent.
    private func route(_ message: HitSource.Message) -> Int32? {
        func silent(_ partition: Int32) -> Bool { (silences[partition] ?? .min) > now }
        if scenario.keyedByDelivery, case .counted(let expected) = message.fate {
            let partition = Int32(Self.stableHash(expected.deliveryId) % UInt64(inputPartitions))
            return silent(partition) ? nil : partition
        }
        let open = (0..<Int32(inputPartitions)).filter { !silent($0) }
        guard !open.isEmpty else { return nil }
        return open[Int(routing.below(UInt64(open.count)))]
    }

    private func write(_ message: HitSource.Message, to partition: Int32) {
        let timestamp = message.kafkaTimestamp ?? message.produceAt
        var fate = message.fate
        if !message.hasOwnTime, case .counted(var expected) = fate {
            // Without its own time a hit's event time is its Kafka timestamp (the contract).
            expected.eventTime = timestamp
            fate = .counted(expected)
        }
        kafka.topic(inputTopic).append(
            partition: partition, key: message.key, value: message.value, timestamp: timestamp,
            stamp: WriteStamp(time: now, writer: -1, outputCrashes: outputCrashes))
        produced[inputTopic]![Int(partition)].append(
            ProducedMessage(fate: fate, kafkaTimestamp: timestamp, producedAt: now, kind: message.kind))
    }

    /// FNV-1a: the simulation's own stable hash, so that keying the input shares nothing with
    /// the stages' routing.
    static func stableHash(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }

    // MARK: The end

    /// Produces everything still to come, lets every stage read its input to the end, and emits
    /// everything: with `finish` (a bounded run) or with a tick so far ahead that every source is
    /// idle and every window is past its grace and retention.
    func drain() {
        source.stopGenerating()
        let step = max(20, scenario.window.idleTimeout / 4)
        var guardSteps = 0
        while !source.isEmpty || !stalled.isEmpty || !stalls.isEmpty {
            let before = trace == nil ? nil : snapshot()
            now += step
            produceDue()
            if let before { record("drain: +\(step)", since: before) }
            catchUp(tick: true)
            guardSteps += 1
            if guardSteps > 100_000 {
                problems.append("the drain did not end")
                return
            }
        }
        var before = trace == nil ? nil : snapshot()
        for role in activeRoles { adopt(role, pick: UInt64(bitPattern: now)) }
        if let mark = before { record("drain: adopt orphans", since: mark) }
        for _ in 0..<4 { catchUp(tick: true) }
        before = trace == nil ? nil : snapshot()
        let far = scenario.window.size + scenario.window.grace + scenario.window.retention + 2 * scenario.window.idleTimeout + 1_000
        if scenario.drainByFinish {
            for role in activeRoles {
                for member in runners[role]! {
                    member.process(budget: .max, cut: UInt64(bitPattern: now), kafka: kafka, now: now, stamp: stamp(member))
                    member.finish(now: now, stamp: stamp(member))
                }
            }
        } else {
            now += far
            for role in activeRoles {
                for member in runners[role]! {
                    member.process(budget: .max, cut: UInt64(bitPattern: now), kafka: kafka, now: now, stamp: stamp(member))
                    member.tick(now: now, stamp: stamp(member))
                }
            }
        }
        if let mark = before { record(scenario.drainByFinish ? "drain: read all, finish" : "drain: +\(far), read all, tick", since: mark) }
        for role in activeRoles {
            for member in runners[role]! where member.unread(kafka: kafka) > 0 {
                problems.append("\(member.label) left \(member.unread(kafka: kafka)) records unread at the end")
            }
        }
        if options.fault == .reemitStaleRecord { reemitStaleRecord() }
    }

    /// Every stage reads what it has, in stage order, and lets time pass.
    private func catchUp(tick: Bool) {
        for role in activeRoles {
            for member in runners[role]! {
                let before = trace == nil ? nil : snapshot()
                if member.process(budget: .max, cut: UInt64(bitPattern: now) ^ UInt64(member.instance), kafka: kafka, now: now, stamp: stamp(member)) > 0,
                    let before
                {
                    record("  \(member.label) read \(member.lastBatch)", since: before)
                }
                if tick {
                    let before = trace == nil ? nil : snapshot()
                    member.tick(now: now, stamp: stamp(member))
                    if let before, snapshot().ends != before.ends { record("  \(member.label) tick", since: before) }
                }
            }
        }
    }

    /// The planted `reemitStaleRecord` fault: the first record of a key that has several comes
    /// again at the end of the output.
    private func reemitStaleRecord() {
        let output = kafka.topic(Self.outputTopic)
        let records = output.partitions[0]
        var seen: [[UInt8]: Int] = [:]
        for (index, entry) in records.enumerated() {
            guard let key = output.bytes(entry.key) else { continue }
            if let first = seen[key] {
                let stale = records[first]
                output.append(
                    partition: 0, key: output.bytes(stale.key), value: output.bytes(stale.value) ?? [], timestamp: nil,
                    stamp: WriteStamp(time: now, writer: -1, outputCrashes: outputCrashes))
                return
            }
            seen[key] = index
        }
    }

    var allRunners: [any DrivenStage] { retired + activeRoles.flatMap { runners[$0]! } }

    // MARK: Trace

    private struct Snapshot {
        var ends: [String: [Int64]]
        var commits: Int
    }

    private func snapshot() -> Snapshot {
        var ends: [String: [Int64]] = [:]
        for (name, log) in kafka.topics { ends[name] = (0..<Int32(log.partitionCount)).map { log.end(of: $0) } }
        return Snapshot(ends: ends, commits: kafka.commitTrace?.count ?? 0)
    }

    private func record(_ operation: String, since before: Snapshot) {
        var line = "t=\(now - scenario.start) \(operation)"
        for name in kafka.topics.keys.sorted() {
            let log = kafka.topic(name)
            for partition in 0..<Int32(log.partitionCount) {
                let from = before.ends[name]?[Int(partition)] ?? 0
                let to = log.end(of: partition)
                guard to > from else { continue }
                switch name {
                case Self.outputTopic:
                    for offset in from..<to {
                        let entry = log.entry(partition: partition, offset: offset)
                        let key = log.bytes(entry.key).map { String(decoding: $0, as: UTF8.self) } ?? "?"
                        let revision = log.bytes(entry.value).flatMap(OutputRecord.revision(in:)) ?? -1
                        line += "\n    out \(key) rev \(revision) by \(writerName(entry.stamp.writer))"
                    }
                case Self.deadLetterTopic:
                    for offset in from..<to {
                        let entry = log.entry(partition: partition, offset: offset)
                        if let letter = DeadLetter(headers: entry.headers) {
                            line +=
                                "\n    dlq \(letter.reason) \(letter.sourceTopic)[\(letter.sourcePartition)]@\(letter.sourceOffset) by \(writerName(entry.stamp.writer))"
                        }
                    }
                default:
                    line += "\n    \(name)[\(partition)] +\(to - from) (now \(to))"
                    // Input messages that are not plain in-order hits, with their times.
                    for offset in from..<to {
                        guard let message = produced[name]?[Int(partition)][Int(offset)], message.kind != .ordinary else { continue }
                        var eventTime = ""
                        if case .counted(let hit) = message.fate { eventTime = " event time +\(hit.eventTime - scenario.start)," }
                        line +=
                            "\n      \(name)[\(partition)]@\(offset) \(message.kind.rawValue):\(eventTime) Kafka timestamp +\(message.kafkaTimestamp - scenario.start)"
                    }
                }
            }
        }
        if let commits = kafka.commitTrace {
            for commit in commits.dropFirst(before.commits) {
                line += "\n    commit \(commit.group) \(commit.topic)[\(commit.partition)] = \(commit.committed)"
            }
        }
        // A poll, tick or commit that changed nothing is left out.
        let runnerOperation = operation.first.map { $0 == "n" || $0 == "a" } ?? false && !operation.hasPrefix("adopt")
        if runnerOperation, !line.contains("\n"), !line.contains(" read ") { return }
        if ["move", "adopt", "CRASH", "RESEND", "SWITCH", "drain: adopt"].contains(where: operation.hasPrefix) {
            for role in Role.allCases {
                guard let members = runners[role] else { continue }
                let owned = members.map { "\($0.label) owns \($0.owned.map(String.init).joined(separator: ","))" }.joined(separator: "; ")
                line += "\n    \(role.rawValue): \(owned); orphans \((orphans[role] ?? []).sorted())"
            }
        }
        trace?.append(line)
    }

    func writerName(_ index: Int) -> String { index >= 0 && index < writers.count ? writers[index] : "producer" }
}

extension World {
    /// The planted `skipOneRecord` fault: the first hit to count on partition 0 of the first
    /// input topic.
    func isSkipped(topic: String, partition: Int32, offset: Int64) -> Bool {
        guard topic == "hits", partition == 0, let messages = produced[topic]?.first else { return false }
        let first = messages.firstIndex { if case .counted = $0.fate { true } else { false } }
        return first.map { Int64($0) == offset } ?? false
    }
}

protocol SkippingRecords {
    func setSkip(_ skip: @escaping (Int32, Int64) -> Bool)
}

extension SimulatedRunner: SkippingRecords {
    func setSkip(_ skip: @escaping (Int32, Int64) -> Bool) { self.skip = skip }
}

/// The planted `commitReadPosition` fault needs the runner's read positions.
protocol ReadPositionCommitting {
    func commitReadPositions(kafka: InMemoryKafka)
}

extension SimulatedRunner: ReadPositionCommitting {
    func commitReadPositions(kafka: InMemoryKafka) {
        let points = stage.commitPoints()
        for (partition, position) in positions {
            kafka.commit(
                group: group, topic: topic, partition: partition,
                InMemoryKafka.Committed(offset: position, metadata: points[partition]?.metadata))
        }
    }
}
