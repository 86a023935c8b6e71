import Foundation
import HitGenerator
import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import TrackingDomain
import TrackpipeTestSupport
import Windowing

/// What a schedule of the runner simulation throws at the real runners.
public enum RunnerFamily: String, CaseIterable, Sendable {
    /// Instances join, stop and crash: cooperative rebalances, revokes that commit, takeovers.
    case rebalances
    /// The coordinator refuses commits (a stale generation); librdkafka then gives up the
    /// member's assignment and joins again.
    case refusedCommits = "refused-commits"
    /// A poll cut by a lost assignment between two of its records (librdkafka 2.0.2), the same
    /// partitions assigned again from their commits.
    case cutPolls = "cut-polls"
    /// No broker answers for a while: records wait, commits fail, polls bring nothing.
    case outages
    /// Dead letters larger than the dead-letter topic takes, the broker refusing them.
    case oversizedDeadLetters = "oversized-dead-letters"
    /// A topic trackpipe writes refuses every record for a while (an ACL taken away): the worker
    /// stops, naming the topic, and its orchestrator starts it again.
    case refusedTopics = "refused-topics"
    /// All of the above.
    case mixed
    /// The cluster refuses purges of the repartition topic for a while (no DeleteRecords, no
    /// Delete grant, no answer in time), among rebalances, refused commits and outages. (Every
    /// family purges, as the worker does by default; `mixed` refuses purges too.)
    case purges
}

/// One schedule: a seed and a family, and what the run found.
public struct RunnerOutcome: Sendable {
    public var seed: UInt64
    public var family: RunnerFamily
    public var steps: Int
    public var rebalances: Int
    public var refusedCommits: Int
    /// Workers that stopped on a refused topic (and were started again).
    public var exits: Int
    public var settled: Bool
    /// Partitions of the repartition topic purged, and purges refused.
    public var purged: Int
    public var purgesRefused: Int
    /// Bytes written to the repartition topic, and the bytes it keeps at the end.
    public var repartitionBytesWritten: Int
    public var repartitionBytesKept: Int
    /// What the checks found wrong; empty for a pass.
    public var problems: [String]
    public var trace: [String]
    /// Window sizes counted by one pipeline, each checked against its own reference.
    public var sizes: Int

    public var passed: Bool { problems.isEmpty }
}

/// Deterministic simulation of the real pipeline: every instance's two real `StageRunner`s
/// (normalize, then aggregate behind the repartition topic), with their real parts (the offset
/// guard, the commit coordinator, the rebalance listener, the output channel), meet Kafka only
/// through the clients of a `SimulatedCluster`. A seed picks, step by step, which runner turns,
/// how far the clock moves, when hits are produced and what fault strikes; at the end the
/// faults stop, every runner is turned until the output settles, and the output is checked
/// against what the generator knows it sent.
public final class RunnerWorld {
    static let inputTopic = "hits"
    static let outputTopic = "aggregates"
    static let deadLetterTopic = "dlq"
    static let group = "sim"
    static let windowSize: Int64 = 60_000

    let seed: UInt64
    let family: RunnerFamily
    let kafka = InMemoryKafka()
    let cluster: SimulatedCluster
    private var random: SplitMix
    /// Purges are drawn apart (their interval, their delay, their refusals), so that the
    /// schedules drawn before purges existed stay as they were.
    private var purging: SplitMix
    private let purgeInterval: Int64
    private let corpus: [GeneratedHit]
    private var producedHits = 0
    private var instances: [Instance] = []
    private var nextInstance = 1
    private var problems: [String] = []
    private var steps = 0
    private var exits = 0
    private let logger: Logger
    private let inputPartitions = 4
    private let repartitionPartitions = 4
    let tracing: Bool
    /// 1m, or in half the seeds (drawn apart, so that the rest of a seed's schedule stays as it
    /// was) 1m and 2m from one pipeline, each size to a topic of its own and each held to its own
    /// reference count.
    let windowSizes: [Int64]
    var outputTopics: [String] { windowSizes.count == 1 ? [Self.outputTopic] : windowSizes.map { "\(Self.outputTopic)-\($0)" } }

    /// One worker process: its two runners, and the clients they were given.
    final class Instance {
        let number: Int
        let clients: ProcessClients
        let normalizer: StageRunner<NormalizeStage>
        let aggregator: StageRunner<AggregateStage<RepartitionInput>>
        var alive = true

        init(number: Int, clients: ProcessClients, normalizer: StageRunner<NormalizeStage>, aggregator: StageRunner<AggregateStage<RepartitionInput>>) {
            self.number = number
            self.clients = clients
            self.normalizer = normalizer
            self.aggregator = aggregator
        }

        /// `Pipeline`'s answer to one runner failing: the others are asked to stop, and finish
        /// (their last commit).
        func finishAll(but failed: AnyObject) {
            if normalizer !== failed {
                normalizer.requestStop()
                _ = try? normalizer.finish()
            }
            if aggregator !== failed {
                aggregator.requestStop()
                _ = try? aggregator.finish()
            }
        }
    }

    public init(seed: UInt64, family: RunnerFamily, hits: Int = 600, tracing: Bool = false) {
        self.seed = seed
        self.family = family
        self.tracing = tracing
        random = SplitMix(seed)
        purging = SplitMix(seed ^ 0x9_06E_DE1E)
        var sizing = SplitMix(seed ^ 0x0051_2E5E_5012_E5E5)
        windowSizes = sizing.chance(0.5) ? [Self.windowSize, 2 * Self.windowSize] : [Self.windowSize]
        // The worker's default is 30 s; shorter intervals purge through more of the faults.
        let interval = purging.pick([1, 500, 2_000, 30_000] as [Int64])
        purgeInterval = family == .purges ? min(interval, 500) : interval
        let start: Int64 = 1_795_341_600_000
        cluster = SimulatedCluster(kafka: kafka, now: start + 10 * 60_000)
        cluster.recordDeletions.delay = purging.pick([0, 300, 3_000] as [Int64])
        if tracing { cluster.trace = [] }
        var generated = HitStream(
            HitStreamConfig(count: hits, seed: seed ^ 0x5EED, deliveries: 5, start: start, span: 5 * 60_000, lateRate: 0, badRate: 0.03)
        ).generate()
        if family == .oversizedDeadLetters || family == .mixed {
            // Messages larger than the dead-letter topic takes: invalid, and too large to be hits.
            for index in stride(from: 7, to: generated.count, by: 97) {
                let size = index % 2 == 0 ? 1_200_000 : 400_000
                generated[index].value = [UInt8](repeating: UInt8(ascii: "x"), count: size)
                generated[index].truth = .rejected(size > NormalizerLimits().maxMessageBytes ? .tooLarge : .malformedJSON)
            }
        }
        corpus = generated
        var logger = Logger(label: "trackpipe.simulation")
        logger.logLevel = .critical
        self.logger = logger
        kafka.create(Self.inputTopic, partitions: inputPartitions)
        kafka.create("\(Self.group)-repartition", partitions: repartitionPartitions)
        kafka.create("\(Self.group)-state", partitions: repartitionPartitions)
        for topic in outputTopics { kafka.create(topic, partitions: 2) }
        kafka.create(Self.deadLetterTopic, partitions: 2)
    }

    // MARK: Running

    public func run(maxSteps: Int = 1_500) -> RunnerOutcome {
        startInstance()
        if random.chance(0.5) { startInstance() }
        while steps < maxSteps {
            steps += 1
            step()
        }
        let settled = drain()
        check(settled: settled)
        return RunnerOutcome(
            seed: seed, family: family, steps: steps, rebalances: cluster.rebalances, refusedCommits: cluster.refusals, exits: exits,
            settled: settled, purged: cluster.recordDeletions.purged, purgesRefused: cluster.recordDeletions.refused,
            repartitionBytesWritten: kafka.topic("\(Self.group)-repartition").writtenBytes,
            repartitionBytesKept: kafka.topic("\(Self.group)-repartition").retainedBytes,
            problems: problems, trace: cluster.trace ?? [], sizes: windowSizes.count)
    }

    private func step() {
        let roll = random.below(100)
        switch roll {
        case 0..<55: turnSomeone()
        case 55..<72: cluster.now += random.int(Int64(10)...Int64(400))
        case 72..<84: produce(random.int(1...40))
        default: fault()
        }
    }

    private func turnSomeone() {
        let live = instances.filter(\.alive)
        guard !live.isEmpty else { return startInstance() }
        let instance = random.pick(live)
        if random.chance(0.5) { turn(instance, instance.normalizer, "normalize") } else { turn(instance, instance.aggregator, "aggregate") }
    }

    private func turn<S: Stage>(_ instance: Instance, _ runner: StageRunner<S>, _ name: String) {
        guard instance.alive else { return }
        do {
            // A runner that stops turning on its own has failed (a refused record requests the
            // stop): `finish` says why, as `run` would.
            if try !runner.turn() {
                _ = try runner.finish()
                problems.append("step \(steps): instance \(instance.number) \(name) ended by itself")
                instance.alive = false
                instance.clients.crash()
            }
        } catch {
            runner.abandon(error)
            let text = "\(error)"
            if refusedTopic(named: error) {
                // What the worker does: the failed stage stops without committing, the other is
                // asked to stop and finishes (its last commit), the process exits, and the
                // orchestrator starts it again.
                exits += 1
                cluster.note("instance \(instance.number) exits: \(name) stopped on \(text)")
                instance.alive = false
                instance.finishAll(but: runner)
                instance.clients.crash()
                startInstance()
            } else {
                problems.append("step \(steps): instance \(instance.number) \(name) stopped on \(error)")
                instance.alive = false
                instance.clients.crash()
            }
        }
    }

    private func fault() {
        let families: [RunnerFamily] =
            switch family {
            case .mixed: RunnerFamily.allCases.filter { $0 != .mixed && $0 != .purges }
            case .purges: [.rebalances, .refusedCommits, .outages, .cutPolls]
            default: [family]
            }
        if family == .purges || family == .mixed, purging.chance(0.4) { refusePurges() }
        switch random.pick(families) {
        case .rebalances, .mixed, .purges:
            let live = instances.filter(\.alive)
            switch random.below(3) {
            case 0 where live.count < 3: startInstance()
            case 1 where live.count > 1: crash(random.pick(live))
            case 2 where live.count > 1: stop(random.pick(live))
            default: startInstance()
            }
        case .refusedCommits:
            let group = random.chance(0.5) ? Self.group : "\(Self.group)-aggregate"
            cluster.refusedCommits[group, default: 0] += random.int(1...3)
        case .cutPolls:
            let group = random.chance(0.5) ? Self.group : "\(Self.group)-aggregate"
            cluster.cutPolls[group] = random.int(1...20)
        case .outages:
            cluster.unreachableUntil = cluster.now + random.int(Int64(500)...Int64(20_000))
        case .refusedTopics:
            let topic = random.pick(["\(Self.group)-repartition", outputTopics[0], "\(Self.group)-state", Self.deadLetterTopic])
            cluster.refusedTopics[topic] = cluster.now + random.int(Int64(500)...Int64(8_000))
        case .oversizedDeadLetters:
            if random.chance(0.5) {
                cluster.brokerLimits[Self.deadLetterTopic] = random.pick([100_000, 300_000, 700_000])
            } else {
                cluster.brokerLimits[Self.deadLetterTopic] = nil
            }
        }
    }

    /// The cluster refuses purges for a while: no DeleteRecords, no Delete grant, or no answer in time.
    private func refusePurges() {
        let refusal = purging.pick([KafkaError.Named.unsupportedFeature, .topicAuthorizationFailed, .timedOut])
        cluster.recordDeletions.refusal = (refusal, cluster.now + purging.int(Int64(500)...Int64(20_000)))
    }

    private func produce(_ count: Int) {
        let log = kafka.topic(Self.inputTopic)
        for _ in 0..<count where producedHits < corpus.count {
            let hit = corpus[producedHits]
            producedHits += 1
            let partition = SimulatedProducer.partition(of: hit.key, count: inputPartitions)
            log.append(partition: partition, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp, stamp: WriteStamp(time: cluster.now, writer: -1, outputCrashes: 0))
        }
    }

    /// Whether `error` is a record refused by a topic that refused records: the one reason a
    /// runner may stop here.
    private func refusedTopic(named error: any Error) -> Bool {
        let text = "\(error)"
        return cluster.topicsThatRefused.contains { text.contains("\($0)[") }
    }

    // MARK: Instances

    private func startInstance() {
        let number = nextInstance
        nextInstance += 1
        let clients = ProcessClients(cluster: cluster)
        let window = WindowConfig(
            sizes: windowSizes.map { WindowSize(size: $0, grace: 1_000) }, retention: 86_400_000, idleTimeout: 2_000)
        let limit = RecordLimit(bytes: cluster.producerLimit)
        let identity = GroupIdentity(
            group: Self.group, inputTopic: Self.inputTopic, windowSizes: window.lengths, repartitionTopic: "\(Self.group)-repartition",
            stateTopic: "\(Self.group)-state")
        let normalize = NormalizeStage(
            sourcePartitions: inputPartitions, repartitionPartitions: Int32(repartitionPartitions), identity: identity, limits: NormalizerLimits(), maxFutureSkew: 3_600_000, idleTimeout: window.idleTimeout,
            markInterval: 100, shards: 1, batchBytes: min(RepartitionRecord.batchBytes, limit.bytes / 4), maxOriginalBytes: limit.bytes / 2,
            originals: OriginalRule(window: window))
        let aggregate = AggregateStage(
            input: RepartitionInput(partitionCount: Int32(repartitionPartitions), identity: identity), window: window, shards: 1,
            identity: identity)
        func settings(topic: String, group: String, destinations: [Destination: String]) -> RunnerSettings {
            var settings = RunnerSettings(
                topic: topic, assignment: .group, bound: .unbounded,
                consumer: KafkaConfig(["group.id": group, "enable.partition.eof": "true", "client.id": "instance-\(number)"]),
                producer: KafkaConfig([:]), destinations: destinations, commitInterval: 500)
            settings.clients = clients
            settings.recordLimit = limit
            settings.progressInterval = 0
            settings.unhealthyAfter = 60_000
            settings.maxBatch = 64
            return settings
        }
        // As `Pipeline` sets them up: the aggregate stage purges the repartition topic.
        var aggregateSettings = settings(
            topic: "\(Self.group)-repartition", group: "\(Self.group)-aggregate",
            destinations: [.output: Self.outputTopic, .deadLetter: Self.deadLetterTopic])
        aggregateSettings.output(to: outputTopics, sizes: window.lengths)
        aggregateSettings.purge = PurgeSettings(interval: purgeInterval)
        let normalizer = StageRunner(
            stage: normalize,
            settings: settings(
                topic: Self.inputTopic, group: Self.group,
                destinations: [.repartition: "\(Self.group)-repartition", .deadLetter: Self.deadLetterTopic]),
            logger: logger, clock: cluster.clock)
        let aggregator = StageRunner(
            stage: aggregate, stateTopic: "\(Self.group)-state", settings: aggregateSettings, logger: logger, clock: cluster.clock)
        let instance = Instance(number: number, clients: clients, normalizer: normalizer, aggregator: aggregator)
        do {
            try normalizer.begin()
            try aggregator.begin()
        } catch {
            problems.append("instance \(number) could not start: \(error)")
            return
        }
        cluster.note("instance \(number) started")
        instances.append(instance)
    }

    /// SIGKILL: nothing more is sent, committed or given up; the group moves on.
    private func crash(_ instance: Instance) {
        cluster.note("instance \(instance.number) crashed")
        instance.alive = false
        instance.clients.crash()
    }

    /// SIGTERM: both stages finish (their last commit) and leave the group.
    private func stop(_ instance: Instance) {
        cluster.note("instance \(instance.number) stopping")
        instance.alive = false
        instance.normalizer.requestStop()
        instance.aggregator.requestStop()
        // Each runner finishes on its own thread; one failing does not keep the other from its
        // last commit.
        var failures: [any Error] = []
        do { _ = try instance.normalizer.finish() } catch { failures.append(error) }
        do { _ = try instance.aggregator.finish() } catch { failures.append(error) }
        for error in failures {
            // A stop while a topic refuses records ends with that error (the worker exits 1).
            if refusedTopic(named: error) {
                exits += 1
            } else {
                problems.append("step \(steps): instance \(instance.number) failed to stop: \(error)")
            }
        }
        if !failures.isEmpty { instance.clients.crash() }
    }

    // MARK: The end

    /// Faults stop, every hit is produced, and every runner turns until the output holds the
    /// reference and the groups' commits cover their input, or the step budget runs out.
    private func drain() -> Bool {
        cluster.unreachableUntil = .min
        cluster.refusedCommits = [:]
        cluster.cutPolls = [:]
        cluster.brokerLimits = [:]
        cluster.refusedTopics = [:]
        produce(corpus.count)
        if instances.filter(\.alive).isEmpty { startInstance() }
        for round in 0..<4_000 {
            cluster.now += 250
            for instance in instances where instance.alive {
                turn(instance, instance.normalizer, "normalize")
                turn(instance, instance.aggregator, "aggregate")
            }
            // As the input goes quiet, handovers: new instances take partitions whose windows
            // their predecessors had not closed yet, with no hit left to come (a new owner that
            // hears only idle marks must still close what it reads back).
            if [8, 16, 24, 32].contains(round), let oldest = instances.first(where: \.alive) {
                startInstance()
                stop(oldest)
            }
            // Refused purges cannot keep the output from settling: they go on through the
            // handovers, where most purges of a schedule happen.
            if family == .purges, round % 10 == 3, purging.chance(0.5) { refusePurges() }
            if round > 40 && round % 20 == 19 && settled() { return true }
            if instances.filter(\.alive).isEmpty { startInstance() }
        }
        return false
    }

    private func settled() -> Bool {
        let committed = { (group: String, topic: String) -> Bool in
            let log = self.kafka.topic(topic)
            return (0..<Int32(log.partitionCount)).allSatisfy { partition in
                (self.kafka.committed(group: group, topic: topic, partition: partition)?.offset ?? 0) >= log.end(of: partition)
            }
        }
        // The aggregate group never reaches the end of the repartition topic: the normalize
        // stages keep sending watermark marks there. Its output is what counts.
        return committed(Self.group, Self.inputTopic) && outputMismatches().isEmpty
    }

    /// Each size's output against its own reference count.
    private func outputMismatches() -> [String] {
        let counted = corpus.compactMap { if case .counted(let expected) = $0.truth { expected } else { nil } }
        return zip(windowSizes, outputTopics).flatMap { size, topic in
            let log = kafka.topic(topic)
            let records = (0..<Int32(log.partitionCount)).flatMap { partition in
                (0..<log.end(of: partition)).map { offset in
                    let entry = log.entry(partition: partition, offset: offset)
                    return (key: log.bytes(entry.key), value: log.bytes(entry.value))
                }
            }
            let tag = windowSizes.count > 1 ? "windows of \(size) ms: " : ""
            do {
                return try TopicContents(output: records).mismatches(against: ReferenceAggregates(counted, windowSize: size), highestRevision: true)
                    .map { tag + $0 }
            } catch {
                return ["\(tag)the output topic holds a record that is not a keyed JSON object: \(error)"]
            }
        }
    }

    private func check(settled: Bool) {
        if !settled {
            problems.append(
                "did not settle within the drain: \(cluster.rebalances) rebalances, \(cluster.refusals) refused commits; output: \(outputMismatches().prefix(3))")
        } else {
            problems += outputMismatches()
        }
        // Every rejected message has its dead letter, with its source position.
        var lettered: Set<String> = []
        let dlq = kafka.topic(Self.deadLetterTopic)
        for partition in 0..<Int32(dlq.partitionCount) {
            for offset in 0..<dlq.end(of: partition) {
                let entry = dlq.entry(partition: partition, offset: offset)
                if let letter = DeadLetter(headers: entry.headers) { lettered.insert("\(letter.sourcePartition)@\(letter.sourceOffset)") }
            }
        }
        let input = kafka.topic(Self.inputTopic)
        var missing = 0
        for partition in 0..<Int32(input.partitionCount) {
            for offset in 0..<input.end(of: partition) {
                let entry = input.entry(partition: partition, offset: offset)
                guard let hit = corpus.first(where: { $0.kafkaTimestamp == entry.timestamp && $0.value.count == (entry.value?.count ?? -1) && $0.key == input.bytes(entry.key) }),
                    case .rejected = hit.truth
                else { continue }
                if !lettered.contains("\(partition)@\(offset)") { missing += 1 }
            }
        }
        if missing > 0 { problems.append("\(missing) rejected messages have no dead letter") }
        // What no runner may do, as the cluster saw it (a purge past a commit among them), and
        // the repartition topic's log starts against the aggregate group's commits at the end.
        problems += cluster.violations
        let repartition = kafka.topic("\(Self.group)-repartition")
        for partition in 0..<Int32(repartition.partitionCount) {
            let committed = kafka.committed(group: "\(Self.group)-aggregate", topic: repartition.name, partition: partition)?.offset ?? 0
            if repartition.start(of: partition) > committed {
                problems.append("\(repartition.name)[\(partition)] starts at \(repartition.start(of: partition)), past the aggregate group's commit \(committed)")
            }
        }
    }
}
