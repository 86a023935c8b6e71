import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import TrackingDomain
import Windowing

/// An input message as produced, with what must become of it.
struct ProducedMessage {
    var fate: Fate
    var kafkaTimestamp: Int64
    /// Simulated wall-clock ms at which it was written to the input topic.
    var producedAt: Int64
    var kind: HitSource.Kind
}

/// What a run of the workers is called, as `PipelineConfig` derives its names from `--group`.
struct Deployment: Equatable {
    /// `--group`: the normalize stage's group, or the one stage's.
    var group: String
    var mode: Mode
    /// `--state-topic` (by default `<group>-state`).
    var stateTopic: String
    /// Which run of the workers this is, for the checks: a new group, or a group whose offsets
    /// were reset to the earliest, counts the input again from its beginning.
    var generation: Int

    init(group: String, mode: Mode, generation: Int) {
        self.group = group
        self.mode = mode
        self.stateTopic = "\(group)-state"
        self.generation = generation
    }

    var aggregateGroup: String { "\(group)-aggregate" }
    var repartitionTopic: String { "\(group)-repartition" }
    /// What the deployment's group is fixed to, as `PipelineConfig.identity` derives it.
    func identity(windowSizes: [Int64], inputTopic: String) -> GroupIdentity {
        GroupIdentity(
            group: group, inputTopic: inputTopic, windowSizes: windowSizes, repartitionTopic: mode == .twoStage ? repartitionTopic : nil,
            stateTopic: stateTopic)
    }

    /// The group and topic the window tasks commit on.
    func windowGroup(inputTopic: String) -> (group: String, topic: String) {
        mode == .twoStage ? (aggregateGroup, repartitionTopic) : (group, inputTopic)
    }
}

/// One run of the workers as the checks see it: which input it is answerable for, and how it
/// began.
struct Generation {
    var number: Int
    var mode: Mode
    var group: String
    /// How it began ("first run", "new group after the refusal", ...), for reports.
    var origin: String
    /// The input topics it read, each from its first offset.
    var topics: [String]
    /// Per input topic and partition, the messages it read before it was stopped for good; nil
    /// while it runs (to the end).
    var ends: [String: [Int]]?
    /// It went on in the other mode under the same group (the switch was not refused, since
    /// nothing was committed yet): its stages' totals cover parts of the input.
    var switchedInPlace = false

    /// How many messages of `topic`'s `partition` it is answerable for, of `available`.
    func scope(_ topic: String, partition: Int, available: Int) -> Int {
        guard topics.contains(topic) else { return 0 }
        guard let ends else { return available }
        return min(available, ends[topic]?[partition] ?? 0)
    }
}

/// Everything one schedule runs in: the simulated clock, the in-memory cluster, the hit
/// source, and per instance a real `StageRunner` per stage on the simulated cluster's clients
/// (`StageInstance`). The schedule decides who owns which partition (the groups are directed),
/// how each poll is cut, when a runner commits and when a process dies. It applies operations
/// one at a time and, at the end, drains: every hit produced, every record read by its stage,
/// and everything emitted.
final class World {
    static let outputTopic = "aggregates"
    static let deadLetterTopic = "dlq"

    /// The output topic of each size, in the window's order: `aggregates` for one size, as
    /// `--output-topic` takes one topic per size for several.
    static func outputTopics(_ window: WindowConfig) -> [String] {
        window.sizes.count == 1 ? [outputTopic] : window.lengths.map { "\(outputTopic)-\($0)" }
    }

    let scenario: Scenario
    let options: SimulationOptions
    let kafka = InMemoryKafka()
    let cluster: SimulatedCluster
    /// The simulated clock, the cluster's: the runners read it too.
    private(set) var now: Int64 {
        get { cluster.now }
        set { cluster.now = newValue }
    }
    /// What the runners log at the error level: each is a problem.
    private let errors = ErrorLog()
    private let logger: Logger
    /// The ends of a bounded run's inputs (`--until-end`): the hits' end once they all are
    /// produced, the repartition topic's once every normalize stage has finished.
    private var inputEnded = UpstreamSignal()
    private var repartitionEnded = UpstreamSignal()
    private var source: HitSource
    private(set) var deployment: Deployment
    var mode: Mode { deployment.mode }
    private(set) var generations: [Generation] = []
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
    /// Where transaction markers and compaction holes go (`Feature.markers`), drawn apart from
    /// the hits.
    private var markerDraws: SplitMix
    /// Records retention deleted, per topic (`Feature.retention`).
    private(set) var deleted: [String: Int64] = [:]
    private var writerIndex: [String: Int] = [:]
    private(set) var writers: [String] = []
    /// Crashes of stages that write the output (aggregate, or the one stage).
    private(set) var outputCrashes = 0
    private(set) var crashes = 0
    /// Deaths in the middle of a state write, and of those, how many cut a merge (a window's
    /// segments folded into new ones) between its first record and its last.
    private(set) var stateWriteCuts = 0
    private(set) var mergeCuts = 0
    /// Starts refused for the settings of the internal topics (each followed by the command the
    /// refusal names), and warnings of them.
    private(set) var topicRefusals = 0
    private(set) var topicWarnings = 0
    private(set) var rebalances = 0
    /// What the workers refused to start on, in order (mode switches under the same group).
    private(set) var refusals: [String] = []
    /// Until when no source can have been idle, as far as operations tell (lockstep schedules;
    /// the checks narrow it further by the gaps between hits).
    private(set) var idleFreeUntil: Int64
    /// Until when every runner was served as lockstep promises (polled and ticked within half an
    /// idle timeout, nothing left unread that long), quiet pauses aside: the quiet bound is
    /// checked on hits produced before it (a shrunk schedule may break the promise).
    private(set) var servedUntil: Int64 = .max
    /// Where each input topic's life began (its partitions were assigned then).
    private(set) var topicStarts: [String: Int64] = [:]
    /// Problems found while running (the simulation refusing something a stage did).
    private var noted: [String] = []
    /// Problems found: the simulation refusing something a runner did, what the clients saw a
    /// runner do that none may, and what the runners logged as errors.
    var problems: [String] { noted + cluster.violations + errors.lines.map { "logged: \($0)" } }
    private(set) var trace: [String]?
    /// Operations applied, including the drain's.
    private(set) var steps = 0
    /// What the operation being traced read, refused or compacted.
    private var batchNote: String?
    /// When each runner last polled or ticked: a runner left alone for half the idle timeout may
    /// let its stage (or the stages it feeds) find a source idle.
    private var lastServed: [ObjectIdentifier: Int64] = [:]
    /// When each runner last polled.
    private var lastPolled: [ObjectIdentifier: Int64] = [:]

    init(scenario: Scenario, options: SimulationOptions) {
        self.scenario = scenario
        self.options = options
        cluster = SimulatedCluster(kafka: kafka, now: scenario.start)
        cluster.assignor = .directed
        cluster.recordDeletions.delay = scenario.purgeDelay
        cluster.recordDeletions.deletesToTheEnd = options.fault == .purgePastCommit
        logger = errors.logger()
        source = HitSource(scenario.hitSettings)
        deployment = Deployment(group: "trackpipe", mode: scenario.mode, generation: 1)
        inputTopic = "hits"
        inputPartitions = scenario.inputPartitions
        routing = SplitMix(scenario.hitSeed ^ 0x0A5B_17E0)
        markerDraws = SplitMix(scenario.hitSeed ^ 0x4D41_524B)
        if let fault = options.fault {
            switch fault {
            case .hiddenRetention: cluster.logStartFault = .hidden
            case .phantomRetention: cluster.logStartFault = .phantom
            default: break
            }
        }
        idleFreeUntil = scenario.lockstep ? .max : scenario.start
        if options.trace {
            trace = []
            kafka.commitTrace = []
        }
        kafka.create(inputTopic, partitions: inputPartitions)
        if let settings = scenario.internalTopics {
            // Set up by an operator before the first start.
            cluster.describesConfigs = settings.described
            if mode == .twoStage {
                kafka.create(deployment.repartitionTopic, partitions: scenario.repartitionPartitions, configs: settings.repartition)
            }
            kafka.create(deployment.stateTopic, partitions: taskPartitions, configs: settings.state)
        }
        for topic in Self.outputTopics(scenario.window) { kafka.create(topic, partitions: 1) }
        kafka.create(Self.deadLetterTopic, partitions: 1)
        produced[inputTopic] = Array(repeating: [], count: inputPartitions)
        topicStarts[inputTopic] = now
        generations = [Generation(number: 1, mode: scenario.mode, group: deployment.group, origin: "first run", topics: [inputTopic])]
        startWorkers()
    }

    // MARK: Workers

    private var activeRoles: [Role] { mode == .twoStage ? [.normalize, .aggregate] : [.aggregate] }

    private func runner(_ role: Role, _ instance: Int) -> (any DrivenStage)? {
        guard let members = runners[role], members.indices.contains(instance) else { return nil }
        return members[instance]
    }

    /// The partitions the window tasks' state topic needs: one per task.
    private var taskPartitions: Int { mode == .twoStage ? scenario.repartitionPartitions : inputPartitions }

    /// The topics `Pipeline` makes sure of before the runners start (created where missing).
    private func ensureTopics() {
        if mode == .twoStage, kafka.topics[deployment.repartitionTopic] == nil {
            kafka.create(deployment.repartitionTopic, partitions: scenario.repartitionPartitions, configs: InternalTopicSettings.shuffle)
        }
        if kafka.topics[deployment.stateTopic] == nil {
            kafka.create(deployment.stateTopic, partitions: taskPartitions, configs: InternalTopicSettings.created)
        }
        checkInternalTopics()
    }

    /// What `Pipeline` checks of the internal topics before the runners start, through the
    /// cluster's DescribeConfigs. A refusal is followed by the command it names, applied to the
    /// cluster as an operator would, and the check again, which must pass. At the first start
    /// of a schedule whose topics an operator set up, the verdict must be the one expected.
    private func checkInternalTopics() {
        let repartition = mode == .twoStage ? deployment.repartitionTopic : nil
        let topics = [deployment.stateTopic] + (repartition.map { [$0] } ?? [])
        func check() -> InternalTopicCheck.Verdict {
            InternalTopicCheck.verdict(
                cluster.topicConfigs(topics, timeoutMilliseconds: 0), stateTopic: deployment.stateTopic, repartitionTopic: repartition,
                brokers: "kafka:9092")
        }
        let verdict = check()
        topicWarnings += verdict.warnings.count
        let found: InternalTopicSettings.Expected =
            verdict.refusal != nil ? .refused : !verdict.warnings.isEmpty ? .warned : !verdict.unchecked.isEmpty ? .unchecked : .passes
        if runners.isEmpty, let settings = scenario.internalTopics, found != settings.expected {
            noted.append("the internal topics (\(settings)) were found \(found.rawValue): \(verdict)")
        }
        guard let refusal = verdict.refusal else { return }
        topicRefusals += 1
        // The operator runs the command the refusal ends with.
        let words = "\(refusal)".split(separator: " ").map(String.init)
        guard let named = words.firstIndex(of: "--entity-name").map({ words[$0 + 1] }), let topic = kafka.topics[named] else {
            noted.append("the refusal names no topic to alter: \(refusal)")
            return
        }
        if let added = words.firstIndex(of: "--add-config").map({ words[$0 + 1].split(separator: "=", maxSplits: 1).map(String.init) }), added.count == 2 {
            topic.configs[added[0]] = added[1]
        }
        if let deleted = words.firstIndex(of: "--delete-config").map({ words[$0 + 1] }) { topic.configs[deleted] = nil }
        batchNote = "refused to start (\(refusal)); the operator ran its command"
        if let again = check().refusal { noted.append("the command of the refusal did not fix the topic: \(again)") }
    }

    private func normalizeStage(for deployment: Deployment) -> NormalizeStage {
        NormalizeStage(
            sourcePartitions: inputPartitions, repartitionPartitions: Int32(scenario.repartitionPartitions),
            identity: deployment.identity(windowSizes: scenario.window.lengths, inputTopic: inputTopic), limits: NormalizerLimits(),
            maxFutureSkew: scenario.maxFutureSkew, idleTimeout: scenario.window.idleTimeout, markInterval: scenario.markInterval,
            shards: scenario.shards, batchBytes: scenario.batchBytes,
            originals: OriginalRule(
                windowSizes: scenario.window.lengths, retention: scenario.window.retention, delayAllowance: scenario.delayAllowance))
    }

    /// The window stage as `Pipeline` makes it: with a changelog, in both modes.
    private func shuffledAggregateStage(for deployment: Deployment) -> AggregateStage<RepartitionInput> {
        let identity = deployment.identity(windowSizes: scenario.window.lengths, inputTopic: inputTopic)
        return AggregateStage(
            input: RepartitionInput(partitionCount: Int32(scenario.repartitionPartitions), identity: identity), window: scenario.window,
            shards: scenario.shards, identity: identity)
    }

    private func directAggregateStage(for deployment: Deployment) -> AggregateStage<RawHitInput> {
        AggregateStage(
            input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: scenario.maxFutureSkew), window: scenario.window,
            shards: scenario.shards, identity: deployment.identity(windowSizes: scenario.window.lengths, inputTopic: inputTopic))
    }

    /// Starts one runner per stage and instance for the current deployment and input topic, and
    /// hands out every partition of their topics at random.
    private func startWorkers() {
        ensureTopics()
        let deployment = self.deployment
        inputEnded = UpstreamSignal()
        repartitionEnded = UpstreamSignal()
        runners = [:]
        let sinks: [Destination: String] = [.output: Self.outputTopic, .deadLetter: Self.deadLetterTopic]
        let (logger, clock, stateTopic) = (self.logger, cluster.clock, deployment.stateTopic)
        switch mode {
        case .twoStage:
            let normalize = normalizeStage(for: deployment)
            runners[.normalize] = (0..<scenario.instances).map { instance in
                member(
                    .normalize, instance, group: deployment.group, topic: inputTopic,
                    destinations: [.repartition: deployment.repartitionTopic, .deadLetter: Self.deadLetterTopic], upstream: inputEnded
                ) { settings in StageRunner(stage: normalize, settings: settings, logger: logger, clock: clock) }
            }
            runners[.aggregate] = (0..<scenario.instances).map { instance in
                member(
                    .aggregate, instance, group: deployment.aggregateGroup, topic: deployment.repartitionTopic, destinations: sinks,
                    upstream: repartitionEnded
                ) { [unowned self] settings in
                    StageRunner(
                        stage: self.shuffledAggregateStage(for: deployment), stateTopic: stateTopic, settings: settings, logger: logger, clock: clock)
                }
            }
        case .oneStage:
            // `--input-keyed-by-delivery` runs the aggregate stage in `--group` itself
            // (`Pipeline.runSingleStage`).
            let aggregate = directAggregateStage(for: deployment)
            runners[.aggregate] = (0..<scenario.instances).map { instance in
                member(.aggregate, instance, group: deployment.group, topic: inputTopic, destinations: sinks, upstream: inputEnded) { settings in
                    StageRunner(stage: aggregate, stateTopic: stateTopic, settings: settings, logger: logger, clock: clock)
                }
            }
        }
        for member in runners.values.joined() {
            served(member)
            lastPolled[ObjectIdentifier(member)] = now
        }
        for role in activeRoles {
            let members = runners[role]!
            let count = kafka.topic(members[0].topic).partitionCount
            var shares = Array(repeating: [Int32](), count: members.count)
            for partition in 0..<Int32(count) { shares[Int(routing.below(UInt64(members.count)))].append(partition) }
            give(Array(zip(members, shares)))
        }
    }

    /// One stage of one instance: a real runner, configured as `Pipeline` configures it, on
    /// the simulated cluster. Commits happen when the schedule says (`RunnerControl.requestCommit`),
    /// before a revoke, and at the end; a schedule ending as a bounded run reads to the ends its
    /// upstream sets.
    private func member<S: Stage>(
        _ role: Role, _ instance: Int, group: String, topic: String, destinations: [Destination: String], upstream: UpstreamSignal,
        runner: @escaping (RunnerSettings) -> StageRunner<S>
    ) -> StageInstance<S> {
        let deployment = self.deployment
        let bound: RunnerSettings.Bound = scenario.drainByFinish ? .endWhenUpstreamFinishes(upstream) : .unbounded
        let skipsInput = options.fault == .skipOneRecord && topic == inputTopic
        let delaysRecords = options.fault == .overtakenRecords && role == .normalize && instance == 0
        let delay = 2 * scenario.window.idleTimeout
        let (inputTopic, window) = (self.inputTopic, scenario.window)
        // As `Pipeline` sets it up: the aggregate stage of two stages purges its input, the
        // repartition topic (the one stage reads the user's topic, never purged).
        let purge =
            role == .aggregate && topic == deployment.repartitionTopic && scenario.purgeInterval > 0
            ? PurgeSettings(interval: scenario.purgeInterval) : nil
        return StageInstance<S>(
            role: role, instance: instance, generation: deployment.generation, group: group, topic: topic, cluster: cluster,
            stamp: { [unowned self] member in self.stamp(member) },
            prepare: { [unowned self] life in
                life.stateTopic = deployment.stateTopic
                if delaysRecords { life.repartitionDelay = delay }
                life.onStateWriteCut = { [unowned self] written, lost in self.noteStateWriteCut(written: written, lost: lost) }
                life.keepsDeletionsOfACutWrite = options.fault == .unorderedStateWrite
                if skipsInput {
                    life.skip = { [unowned self] topic, partition, offset in
                        topic == inputTopic && self.isSkipped(topic: topic, partition: partition, offset: offset)
                    }
                }
            },
            makeRunner: { clients in
                var settings = RunnerSettings(
                    topic: topic, assignment: .group, bound: bound,
                    consumer: KafkaConfig(["group.id": group, "enable.partition.eof": "true"]), producer: KafkaConfig([:]),
                    destinations: destinations, commitInterval: .max / 4)
                settings.clients = clients
                if destinations[.output] != nil { settings.output(to: Self.outputTopics(window), sizes: window.lengths) }
                settings.progressInterval = 0
                settings.maxBatch = .max
                settings.purge = purge
                return runner(settings)
            })
    }

    /// The group hands each member its share (directed), and the members serve the move in a
    /// poll: owners give the partitions up first (their revoke callbacks commit), then the new
    /// owners take them.
    private func give(_ shares: [(any DrivenStage, [Int32])]) {
        let moving = shares.filter { !$0.1.isEmpty }
        guard let first = moving.first?.0 else { return }
        let partitions = Set(moving.flatMap(\.1))
        for (member, share) in moving {
            guard let id = member.memberId else { continue }
            cluster.group(member.group).move(Set(share), to: id)
        }
        for member in runners[first.role]! where !partitions.isDisjoint(with: member.owned) { serve(member) }
        for (member, _) in moving { serve(member) }
    }

    /// A poll that brings nothing: the group's moves are served, and time passes in the stage.
    private func serve(_ member: any DrivenStage) {
        served(member)
        lastPolled[ObjectIdentifier(member)] = now
        member.tick()
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
        return WriteStamp(time: now, writer: index, outputCrashes: outputCrashes, generation: runner.generation)
    }

    // MARK: What the workers check before they join

    /// What a group has committed on a topic, as `GroupCommits.starts` reads it without joining.
    private func commitStarts(group: String, topic: String) -> [PartitionStart] {
        guard let log = kafka.topics[topic] else { return [] }
        return (0..<Int32(log.partitionCount)).compactMap { partition in
            kafka.committed(group: group, topic: topic, partition: partition).map {
                PartitionStart(
                    partition: partition, committedOffset: $0.offset, metadata: $0.metadata, logStart: log.start(of: partition),
                    logEnd: log.end(of: partition))
            }
        }
    }

    /// Why `Pipeline.run` would refuse to start `deployment`, if it would: its identity check,
    /// run through this cluster's clients as a worker runs it (another mode's commits, state
    /// another input counted into), or a state topic with another partition count.
    private func refusal(of deployment: Deployment) -> String? {
        var config = PipelineConfig()
        (config.group, config.inputTopic, config.window) = (deployment.group, inputTopic, scenario.window)
        (config.inputKeyedByDelivery, config.repartitionTopic, config.stateTopic) = (deployment.mode == .oneStage, deployment.repartitionTopic, deployment.stateTopic)
        do {
            try GroupIdentityCheck.check(
                config: config, inputPartitions: inputPartitions, repartitionPartitions: kafka.topics[deployment.repartitionTopic]?.partitionCount,
                statePartitions: kafka.topics[deployment.stateTopic]?.partitionCount,
                reader: TopicReader(config: config.consumerConfig(group: config.group), clients: ProcessClients(cluster: cluster), logger: logger))
        } catch {
            return "\(error)"
        }
        let needs = deployment.mode == .oneStage ? inputPartitions : scenario.repartitionPartitions
        if let state = kafka.topics[deployment.stateTopic], state.partitionCount != needs {
            return "\(PipelineError.stateTopicMismatch(topic: state.name, has: state.partitionCount, needs: needs))"
        }
        return nil
    }

    // MARK: Operations

    /// Ends the idle-free span where a runner went without a tick, or left a record unread, for
    /// half the idle timeout: its stage, or the stages it sends marks to, may then have found a
    /// source idle.
    private func noteUnserved() {
        guard idleFreeUntil > scenario.start || servedUntil > scenario.start else { return }
        let limit = scenario.window.idleTimeout / 2
        for member in activeRoles.flatMap({ runners[$0]! }) {
            let served = lastServed[ObjectIdentifier(member)] ?? scenario.start
            if now - served >= limit {
                idleFreeUntil = min(idleFreeUntil, served)
                servedUntil = min(servedUntil, served)
            }
            let polled = lastPolled[ObjectIdentifier(member)] ?? scenario.start
            if now - polled >= limit { servedUntil = min(servedUntil, polled) }
            if let waiting = member.oldestUnread(), now - waiting >= limit {
                idleFreeUntil = min(idleFreeUntil, waiting)
                servedUntil = min(servedUntil, waiting)
            }
        }
    }

    private func served(_ runner: any DrivenStage) { lastServed[ObjectIdentifier(runner)] = now }

    /// Polls `runner` (a `process` of the schedule or of the drain).
    private func poll(_ runner: any DrivenStage, budget: Int, cut: UInt64) {
        lastPolled[ObjectIdentifier(runner)] = now
        runner.process(budget: budget, cut: cut)
    }

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
            noteUnserved()
            source.quiet(until: now + length)
            now += length
            // Nothing new flows during a pause: runners left alone then miss nothing, unless
            // records were waiting for them all along.
            for member in activeRoles.flatMap({ runners[$0]! }) {
                if let waiting = member.oldestUnread() { servedUntil = min(servedUntil, waiting) }
                served(member)
                lastPolled[ObjectIdentifier(member)] = now
            }
        case .stall(let partition, let length):
            guard partition < inputPartitions else { break }
            stalls[partition] = max(stalls[partition] ?? now, now + length)
        case .silence(let partition, let length):
            guard partition < inputPartitions else { break }
            silences[partition] = max(silences[partition] ?? now, now + length)
        case .process(let role, let instance, let budget, let cut):
            guard let runner = runner(role, instance) else { break }
            poll(runner, budget: budget, cut: cut)
            if trace != nil, !runner.lastBatch.isEmpty { batchNote = "read \(runner.lastBatch)\(watermarkNote(runner))" }
        case .tick(let role, let instance):
            guard let runner = runner(role, instance) else { break }
            served(runner)
            runner.tick()
        case .commit(let role, let instance):
            guard let runner = runner(role, instance) else { break }
            commit(runner)
        case .rebalance(let role, let from, let to, let pick):
            guard let giver = runner(role, from), let taker = runner(role, to), !giver.owned.isEmpty else { break }
            var random = SplitMix(pick)
            var moving = giver.owned.filter { _ in random.chance(0.5) }
            if moving.isEmpty { moving = [random.pick(giver.owned)] }
            hand(moving, from: giver, to: taker)
        case .crash(let role, let instance, let phase):
            for role in role.map({ [$0] }) ?? activeRoles {
                guard let runner = runner(role, instance) else { continue }
                if let phase { runner.commit(stoppingAfter: phase) }
                crash(runner)
            }
        case .adopt(let role, let pick):
            adopt(role, pick: pick)
        case .resend(let instance, let budget, let cut):
            guard mode == .twoStage, let runner = runner(.normalize, instance) else { break }
            runner.process(budget: budget, cut: cut)
            crash(runner)
        case .compact(let pick):
            compactState(pick: pick)
        case .retain(let pick):
            retain(pick: pick)
        case .switchTopic(let partitions):
            guard mode == .twoStage else { break }
            stopEveryWorker()
            topicGeneration += 1
            inputTopic = "hits-\(topicGeneration)"
            inputPartitions = max(1, partitions)
            kafka.create(inputTopic, partitions: inputPartitions)
            produced[inputTopic] = Array(repeating: [], count: inputPartitions)
            topicStarts[inputTopic] = now
            generations[generations.count - 1].topics.append(inputTopic)
            stalls = [:]
            silences = [:]
            startWorkers()
        case .switchMode(let target, let remedy):
            guard mode != target else { break }
            switchMode(to: target, remedy: remedy)
        case .refusePurges(let refusal, let length):
            let error: KafkaError.Named =
                switch refusal {
                case .unsupported: .unsupportedFeature
                case .notAuthorized: .topicAuthorizationFailed
                case .timedOut: .timedOut
                }
            cluster.recordDeletions.refusal = (error, now + length)
        }
        if let before { record(batchNote.map { "\(operation) \($0)" } ?? "\(operation)", since: before) }
        batchNote = nil
    }

    private func commit(_ runner: any DrivenStage) { runner.commit(stoppingAfter: nil) }

    /// A cooperative rebalance moves `partitions` from `giver` (which commits them first) to
    /// `taker`.
    private func hand(_ partitions: [Int32], from giver: any DrivenStage, to taker: any DrivenStage) {
        give([(taker, partitions)])
        rebalances += 1
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
        orphans[role] = []
        give(Array(zip(members, shares)))
    }

    /// A state write cut short by a death: whether the cut fell inside a merge, which deletes
    /// segments of a window whose head the same write carries.
    private func noteStateWriteCut(written: [StateWriteRecord], lost: [StateWriteRecord]) {
        stateWriteCuts += 1
        let write = written + lost
        func window(_ record: StateWriteRecord) -> WindowKey? {
            switch ChangelogRecord.decodeKey(record.key) {
            case .head(let window)?, .segment(let window, _)?: window
            default: nil
            }
        }
        var heads: Set<WindowKey> = []
        var deleted: Set<WindowKey> = []
        for record in write {
            switch ChangelogRecord.decodeKey(record.key) {
            case .head(let window)? where !record.tombstone: heads.insert(window)
            case .segment(let window, _)? where record.tombstone: deleted.insert(window)
            default: break
            }
        }
        let merged = heads.intersection(deleted)
        let touched = write.indices.filter { window(write[$0]).map(merged.contains) ?? false }
        if let first = touched.first, let last = touched.last, written.count > first, written.count <= last {
            mergeCuts += 1
            batchNote = "cut a merge after \(written.count) of \(write.count) state records"
        } else if trace != nil {
            batchNote = "cut the state write after \(written.count) of \(write.count) records"
        }
    }

    /// Kafka's log cleaner runs over some partitions of the state topic, up to a random point
    /// of each. A partition being read back is left alone: tombstones stay for
    /// `delete.retention.ms` (a day by default), far longer than any restore.
    private func compactState(pick: UInt64) {
        guard let state = kafka.topics[deployment.stateTopic] else { return }
        var random = SplitMix(pick)
        let busy = Set(activeRoles.flatMap { runners[$0]!.flatMap(\.restoring) })
        var notes: [String] = []
        for partition in 0..<Int32(state.partitionCount) {
            let chosen = random.chance(0.6), cut = random.int(0...state.end(of: partition))
            guard chosen, !busy.contains(partition) else { continue }
            var removed = state.compact(partition: partition, cleanedBefore: cut)
            // The planted defect: a cleaner that also loses the latest state of a window.
            if options.fault == .lossyCompaction, state.dropLatest(partition: partition, keyTag: UInt8(ascii: "W")) { removed += 1 }
            if removed > 0 { notes.append("\(partition):-\(removed) below \(cut)") }
        }
        if !notes.isEmpty { batchNote = "compacted \(notes.joined(separator: " "))" }
    }

    /// Retention deletes the oldest records of some partitions, up to a random point of each, read
    /// or not: of the repartition topic at any time, and of the input only where the group has
    /// committed (a group that has no commit yet begins wherever the input then begins; where a
    /// new group begins is not a loss, and the checks count the input from offset 0).
    private func retain(pick: UInt64) {
        var random = SplitMix(pick)
        var notes: [String] = []
        func cut(_ topic: String, where allowed: (Int32) -> Bool) {
            guard let log = kafka.topics[topic] else { return }
            for partition in 0..<Int32(log.partitionCount) {
                let chosen = random.chance(0.5), point = random.int(log.start(of: partition)...log.end(of: partition))
                guard chosen, allowed(partition) else { continue }
                let before = log.start(of: partition)
                let removed = log.deleteRecords(partition: partition, below: point) - before
                guard removed > 0 else { continue }
                deleted[topic, default: 0] += removed
                notes.append("\(topic)[\(partition)] below \(point)")
            }
        }
        let group = deployment.group
        let input = inputTopic
        cut(input) { [kafka] in kafka.committed(group: group, topic: input, partition: $0) != nil }
        if mode == .twoStage { cut(deployment.repartitionTopic) { _ in true } }
        if !notes.isEmpty { batchNote = "deleted \(notes.joined(separator: ", "))" }
    }

    /// Every runner reads its input to the end (its restores first).
    private func readToTheEnd(_ role: Role) {
        for member in runners[role]! {
            for _ in 0..<8 where !member.restoring.isEmpty || member.unread() > 0 {
                poll(member, budget: .max, cut: UInt64(bitPattern: now))
            }
        }
    }

    /// The operator's stop before a switch: what the stages owe is caught up, every member
    /// commits and leaves.
    private func stopEveryWorker() {
        idleFreeUntil = min(idleFreeUntil, now)
        releaseStalls(all: true)
        for role in activeRoles {
            adopt(role, pick: UInt64(bitPattern: now))
            readToTheEnd(role)
        }
        for role in activeRoles {
            for member in runners[role]! {
                // The stop: the last commit, then the group left (the revoke commits nothing new).
                member.finish()
                retired.append(member)
            }
        }
    }

    /// The switch between modes: every worker stopped, then started in the other mode under
    /// the same group. `Pipeline.run` refuses another mode's commits before it joins; the
    /// operator then does what the refusal says (`remedy`), and the run that follows counts
    /// the input again from its beginning, as a generation of its own.
    private func switchMode(to target: Mode, remedy drawn: SwitchRemedy) {
        let remedy = options.remedy ?? drawn
        stopEveryWorker()
        var next = deployment
        next.mode = target
        let committedBefore = commitStarts(group: next.group, topic: inputTopic).contains { ($0.committedOffset ?? 0) > 0 }
        guard let refused = refusal(of: next) else {
            if committedBefore {
                noted.append(
                    "the switch to \(target.rawValue) under group \(next.group) was not refused, though the group holds the other mode's commits on \(inputTopic)")
            }
            deployment = next
            generations[generations.count - 1].mode = target
            generations[generations.count - 1].switchedInPlace = true
            startWorkers()
            return
        }
        refusals.append("\(target.rawValue) under \(next.group): \(refused)")
        var notes = ["refused: \(refused)"]
        next.generation += 1
        switch remedy {
        case .newGroup:
            next = Deployment(group: "trackpipe-\(next.generation)", mode: target, generation: next.generation)
            notes.append("started under the new group \(next.group)")
        case .resetOffsets:
            // kafka-consumer-groups.sh --reset-offsets --to-earliest: the log start, no metadata.
            let log = kafka.topic(inputTopic)
            for partition in 0..<Int32(log.partitionCount) {
                kafka.commit(group: next.group, topic: inputTopic, partition: partition, InMemoryKafka.Committed(offset: log.start(of: partition)))
            }
            notes.append("offsets of \(next.group) on \(inputTopic) reset to the earliest")
            if let again = refusal(of: next) {
                // The state topic holds the other mode's state (another input counted into it), or
                // has another partition count: another state topic.
                next.stateTopic = "\(next.group)-state-\(next.generation)"
                notes.append("refused again (\(again)); --state-topic \(next.stateTopic)")
                if let still = refusal(of: next) {
                    noted.append("the switch to \(target.rawValue) was still refused after its remedy: \(still)")
                    next = Deployment(group: "trackpipe-\(next.generation)", mode: target, generation: next.generation)
                }
            }
        }
        batchNote = notes.joined(separator: "; ")
        var ended = generations[generations.count - 1]
        ended.ends = ended.topics.reduce(into: [:]) { ends, topic in ends[topic] = produced[topic]!.map(\.count) }
        generations[generations.count - 1] = ended
        generations.append(
            Generation(
                number: next.generation, mode: target, group: next.group,
                origin: remedy == .newGroup ? "a new group after the refusal" : "the group's offsets reset after the refusal",
                topics: [inputTopic]))
        deployment = next
        startWorkers()
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
        // A transactional producer's commit marker, or records a compaction removed, after it.
        let marks = (markerDraws.chance(0.1), markerDraws.int(1...3))
        guard scenario.has(.markers), marks.0 else { return }
        for _ in 0..<marks.1 {
            kafka.topic(inputTopic).appendUndelivered(partition: partition, stamp: WriteStamp(time: now, writer: -1, outputCrashes: outputCrashes))
            produced[inputTopic]![Int(partition)].append(
                ProducedMessage(fate: .neverDelivered, kafkaTimestamp: timestamp, producedAt: now, kind: .ordinary))
        }
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
                noted.append("the drain did not end")
                return
            }
        }
        var before = trace == nil ? nil : snapshot()
        if quietTakeover {
            // The input goes quiet before the last takeovers: the new owners hear nothing but
            // their sources saying they are idle.
            for _ in 0..<4 { catchUp(tick: true) }
            idleFreeUntil = min(idleFreeUntil, now)
            now += scenario.window.idleTimeout + 2 * scenario.markInterval
            catchUp(tick: true)
            if scenario.has(.rebalances) { handOnePartitionOn() }
            if let mark = before { record("drain: quiet for \(scenario.window.idleTimeout + 2 * scenario.markInterval), then takeovers", since: mark) }
            before = trace == nil ? nil : snapshot()
        }
        for role in activeRoles { adopt(role, pick: UInt64(bitPattern: now)) }
        if let mark = before { record("drain: adopt orphans", since: mark) }
        for _ in 0..<4 { catchUp(tick: true) }
        before = trace == nil ? nil : snapshot()
        // When every source is idle, event time goes on from the slowest source that was still
        // delivering (a stale hit as its last input makes it slow): far enough covers that lag.
        let far = scenario.window.lengths.last! + scenario.window.sizes.last!.grace + scenario.window.retention + 2 * scenario.window.idleTimeout + 1_000 + spread
        if !scenario.drainByFinish { now += far }
        // Every hit is produced: a bounded run's input ends here.
        inputEnded.finish()
        for role in activeRoles {
            readToTheEnd(role)
            for member in runners[role]! where member.unread() > 0 || !member.restoring.isEmpty {
                noted.append(
                    "\(member.label) left \(member.unread()) records unread at the end\(member.restoring.isEmpty ? "" : ", still restoring \(member.restoring)")")
            }
            for member in runners[role]! {
                if scenario.drainByFinish {
                    // A bounded run's end: `finish` (the stage emits everything), the last commit.
                    member.finish()
                } else {
                    // A live run: time passes, and the next commit sends what it released.
                    member.tick()
                    member.commit(stoppingAfter: nil)
                }
            }
            // Every normalize stage has finished: the repartition topic ends here.
            if role == .normalize { repartitionEnded.finish() }
        }
        if let mark = before { record(scenario.drainByFinish ? "drain: read all, finish" : "drain: +\(far), read all, tick, commit", since: mark) }
        if scenario.purgeInterval > 0 {
            // Purges still on their way reach the brokers (past their delay, and past the
            // runners' request timeout, 30 s, for those refused as timed out): the checks see
            // the logs as they end up.
            now += max(scenario.purgeDelay, 60_000)
            cluster.settleDeletions()
        }
        if options.fault == .reemitStaleRecord { reemitStaleRecord() }
    }

    /// Half the live schedules with takeovers end with the last of them after the input went
    /// quiet (chosen by the hit seed, so that the rest of the schedule stays as drawn).
    private var quietTakeover: Bool {
        !scenario.drainByFinish && (scenario.has(.crashes) || scenario.has(.rebalances)) && (scenario.hitSeed >> 7) & 1 == 1
    }

    /// Each member of the aggregate group hands one of its partitions to the next member (a
    /// lone member gets it back), as a rebalance does (with a commit first). The normalize
    /// group stays as it is: a source's new reader would report it active for a while, which
    /// is not what a new aggregate owner hears from a quiet input.
    private func handOnePartitionOn() {
        let members = runners[.aggregate]!
        let moves = members.indices.compactMap { index in members[index].owned.first.map { (index, $0) } }
        for (index, moving) in moves { hand([moving], from: members[index], to: members[(index + 1) % members.count]) }
    }

    /// How far apart in event time the hits are: from the lowest progress one reported (its
    /// time, no later than its arrival) to the latest event time.
    private var spread: Int64 {
        var lowest = Int64.max, highest = Int64.min
        for partitions in produced.values {
            for messages in partitions {
                for message in messages {
                    guard case .counted(let hit) = message.fate else { continue }
                    lowest = min(lowest, min(hit.eventTime, message.kafkaTimestamp))
                    highest = max(highest, hit.eventTime)
                }
            }
        }
        return highest >= lowest ? highest - lowest : 0
    }

    /// Every stage reads what it has, in stage order, and lets time pass.
    private func catchUp(tick: Bool) {
        for role in activeRoles {
            for member in runners[role]! {
                let before = trace == nil ? nil : snapshot()
                poll(member, budget: .max, cut: UInt64(bitPattern: now) ^ UInt64(member.instance))
                if let before, !member.lastBatch.isEmpty { record("  \(member.label) read \(member.lastBatch)\(watermarkNote(member))", since: before) }
                if tick {
                    let before = trace == nil ? nil : snapshot()
                    member.tick()
                    if let before, snapshot().ends != before.ends { record("  \(member.label) tick", since: before) }
                }
            }
        }
    }

    /// The planted `reemitStaleRecord` fault: the first record of a key that has several comes
    /// again at the end of the output (of the smallest size, when there are several).
    private func reemitStaleRecord() {
        let output = kafka.topic(Self.outputTopics(scenario.window)[0])
        let records = output.partitions[0]
        var seen: [[UInt8]: Int] = [:]
        for (index, entry) in records.enumerated() {
            guard let key = output.bytes(entry.key) else { continue }
            if let first = seen[key] {
                let stale = records[first]
                output.append(
                    partition: 0, key: output.bytes(stale.key), value: output.bytes(stale.value) ?? [], timestamp: nil,
                    stamp: WriteStamp(time: now, writer: -1, outputCrashes: outputCrashes, generation: deployment.generation))
                return
            }
            seen[key] = index
        }
    }

    var allRunners: [any DrivenStage] { retired + activeRoles.flatMap { runners[$0]! } }

    // MARK: Trace

    private struct Snapshot {
        var ends: [String: [Int64]]
        var starts: [String: [Int64]]
        var commits: Int
    }

    private func snapshot() -> Snapshot {
        var ends: [String: [Int64]] = [:]
        var starts: [String: [Int64]] = [:]
        for (name, log) in kafka.topics {
            ends[name] = (0..<Int32(log.partitionCount)).map { log.end(of: $0) }
            starts[name] = (0..<Int32(log.partitionCount)).map { log.start(of: $0) }
        }
        return Snapshot(ends: ends, starts: starts, commits: kafka.commitTrace?.count ?? 0)
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
                case _ where Self.outputTopics(scenario.window).contains(name):
                    for offset in from..<to {
                        let entry = log.entry(partition: partition, offset: offset)
                        let key = log.bytes(entry.key).map { String(decoding: $0, as: UTF8.self) } ?? "?"
                        let revision = log.bytes(entry.value).flatMap(OutputRecord.revision(in:)) ?? -1
                        line += "\n    out\(name == Self.outputTopic ? "" : name.dropFirst(Self.outputTopic.count)) \(key) rev \(revision) by \(writerName(entry.stamp.writer))"
                    }
                case Self.deadLetterTopic:
                    for offset in from..<to {
                        let entry = log.entry(partition: partition, offset: offset)
                        if let letter = DeadLetter(headers: entry.headers) {
                            line +=
                                "\n    dlq \(letter.reason) \(letter.sourceTopic)[\(letter.sourcePartition)]@\(letter.sourceOffset) by \(writerName(entry.stamp.writer))"
                        }
                    }
                case _ where name.contains("-state"):
                    line += "\n    \(name)[\(partition)] +\(to - from) (now \(to)):"
                    for offset in from..<to {
                        let entry = log.entry(partition: partition, offset: offset)
                        line += " " + Self.describeState(key: log.bytes(entry.key) ?? [], tombstone: entry.value == nil, start: scenario.start)
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
        for name in kafka.topics.keys.sorted() {
            let log = kafka.topic(name)
            for partition in 0..<Int32(log.partitionCount) where log.start(of: partition) > before.starts[name]?[Int(partition)] ?? 0 {
                line += "\n    purged \(name)[\(partition)] below \(log.start(of: partition))"
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

    /// A state record's key, short: `T` (the task), `W+1000/d12ab3` (a window's head, its start
    /// since the schedule's), `S…/3` (its segment 3); `✝` marks a tombstone.
    static func describeState(key: [UInt8], tombstone: Bool, start: Int64) -> String {
        let mark = tombstone ? "✝" : ""
        switch ChangelogRecord.decodeKey(key) {
        case .task?: return "T" + mark
        case .head(let window)?: return "W+\(window.windowStart - start)/\(window.deliveryId)" + mark
        case .segment(let window, let number)?: return "S+\(window.windowStart - start)/\(window.deliveryId)/\(number)" + mark
        case nil: return "?" + mark
        }
    }

    /// A window stage's watermark after an operation, for the trace.
    private func watermarkNote(_ runner: any DrivenStage) -> String {
        guard runner.role == .aggregate, let watermark = runner.watermark else { return "" }
        return " (watermark +\(watermark - scenario.start))"
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
