import RecordFormats
import Runner
import Foundation
import Kafka
import Logging
import Synchronization
import TrackingDomain
import Windowing

/// The worker `trackpipe run` starts: by default two stages in one process, each a
/// `StageRunner` on its own thread with its own consumer group:
///
/// 1. **normalize** (group `<group>`) reads the input topic, normalizes, filters and
///    dead-letters, and routes each accepted event to the repartition topic by `deliveryId`;
/// 2. **aggregate** (group `<group>-aggregate`) reads the repartition topic and counts the
///    events in event-time windows, one task per partition.
///
/// Any instance may own any partitions of either topic, so adding instances adds capacity and
/// every delivery is still counted in one place. With `inputKeyedByDelivery` the input topic is
/// windowed directly, as one stage.
public final class Pipeline: Sendable {
    public let config: PipelineConfig
    private let logger: Logger
    private let metrics: PipelineMetrics?
    private let runners = RunnerRegistry()
    private let watch = Mutex<BrokerWatch?>(nil)
    /// Set while the start-up waits for the cluster to answer.
    private let startup = Mutex<StartupWait?>(nil)

    public init(config: PipelineConfig, logger: Logger = Logger(label: "trackpipe"), metrics: PipelineMetrics? = nil) {
        self.config = config
        self.logger = logger
        self.metrics = metrics
    }

    /// Asks every stage to stop after its batch in flight; each commits and returns. Any thread.
    public func requestStop() { runners.requestStop() }

    /// What `/health/live` and `/health/ready` answer: nil when the check passes, else why not.
    public func problem(_ check: HealthCheck) -> String? {
        switch check {
        case .live:
            return runners.livenessProblem
        case .ready:
            if let problem = runners.livenessProblem { return problem }
            if let waiting = startup.withLock({ $0 }) { return waiting.problem(now: wallClockMillis()) }
            if let problem = watch.withLock({ $0 })?.problem(limit: config.unhealthyAfter) { return problem }
            return runners.readinessProblem
        }
    }

    /// Runs until `requestStop`, or (with `untilEnd`) until the input is read to the end offsets
    /// noted at assignment and everything is emitted. An unreachable cluster is waited out, at
    /// start-up and later; throws for what waiting cannot fix. Offsets are never committed past
    /// an unacknowledged record.
    public func run() throws -> PipelineSummary {
        try config.validate()
        let started = wallClockMillis()
        // The one client for the cluster questions of the run: the broker watch's, and every
        // question and topic creation of the start-up.
        let admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        let brokerWatch = BrokerWatch(
            admin: admin, brokers: config.brokers, logger: logger, interval: min(5_000, max(250, config.unhealthyAfter / 4)), onChange: { [metrics] up in
            metrics?.brokerReachable.set(Double(up ? 1 : 0))
        })
        metrics?.brokerReachable.set(Double(1))
        brokerWatch.start()
        watch.withLock { $0 = brokerWatch }
        defer { brokerWatch.stop() }
        guard let composition = try untilTheClusterAnswers(admin: admin, { try config.inputKeyedByDelivery ? prepareSingleStage(admin: admin) : prepareTwoStages(admin: admin) })
        else {
            logger.notice("stopped before a Kafka broker answered: nothing was read, nothing committed")
            return PipelineSummary(stages: [], elapsedMilliseconds: wallClockMillis() - started)
        }
        let stages = try composition()
        return PipelineSummary(stages: stages, elapsedMilliseconds: wallClockMillis() - started)
    }

    // MARK: Waiting for the cluster

    /// The start-up's wait for a cluster that does not answer, for readiness.
    struct StartupWait: Sendable {
        var since: Int64
        var brokers: String
        var cause: String

        func problem(now: Int64) -> String {
            "waiting \((now - since) / 1000) s for a Kafka broker at \(brokers) to answer (\(cause))"
        }
    }

    /// How often the start-up asks an unreachable cluster again, and logs that it still waits.
    static let clusterRetryMillis: Int64 = 2_000
    static let clusterLogMillis: Int64 = 30_000

    /// Runs `prepare` (the start-up's questions to the cluster) until it gets through. No broker
    /// answering, now or between two of its calls, is waited out (a Kafka outage or a worker
    /// started before its cluster is no reason to exit, and a crash loop would only delay the
    /// recovery); any other error is thrown. nil: a stop was requested while waiting. A bounded
    /// run (`connectTimeout`) gives up after that long instead.
    private func untilTheClusterAnswers<R>(admin: TopicAdmin, _ prepare: () throws -> R) throws -> R? {
        defer { startup.withLock { $0 = nil } }
        let since = wallClockMillis()
        var lastLog = Int64.min / 2
        while true {
            if runners.isStopRequested { return nil }
            do {
                // A short question first: the preparation's own requests wait up to 10 s each
                // for an answer, and a stop must not wait that long.
                guard admin.ping(timeoutMilliseconds: Int32(Self.clusterRetryMillis)) else {
                    throw PipelineError.clusterUnreachable("no broker answered a metadata request within \(Self.clusterRetryMillis / 1000) s")
                }
                return try prepare()
            } catch let error where PipelineError.isUnanswered(error) {
                let now = wallClockMillis()
                let wait = startup.withLock { wait in
                    var current = wait ?? StartupWait(since: since, brokers: config.brokers, cause: "")
                    current.cause = "\(error)"
                    wait = current
                    return current
                }
                if let limit = config.connectTimeout, now - since >= limit {
                    throw PipelineError.noBrokerAnswered(
                        "no Kafka broker answered within the --connect-timeout of a bounded run (\(limit % 1000 == 0 ? "\(limit / 1000) s" : "\(limit) ms"); the last attempt: \(error))",
                        config: config)
                }
                if now - lastLog >= Self.clusterLogMillis {
                    lastLog = now
                    logger.warning(
                        "no Kafka broker at \(config.brokers) answers (waiting \((now - wait.since) / 1000) s; \(error)). Check --brokers and the security settings (\(config.securitySummary)); trackpipe keeps asking every \(Self.clusterRetryMillis / 1000) s and starts as soon as one answers\(config.connectTimeout.map { ", for at most \($0 / 1000) s (--connect-timeout)" } ?? "")")
                }
                // In slices, so that a stop is noticed at once.
                let until = min(wallClockMillis() + Self.clusterRetryMillis, config.connectTimeout.map { since + $0 } ?? .max)
                while wallClockMillis() < until && !runners.isStopRequested { usleep(50_000) }
            }
        }
    }

    // MARK: Compositions

    /// What the start-up asks of the cluster, then the run itself (as the closure returned).
    private func prepareSingleStage(admin: TopicAdmin) throws -> () throws -> [StageSummary] {
        let topicSettings = TopicSettingsQuestion(admin: admin, config: config, repartitionTopic: nil)
        let partitions = try Self.partitionCount(of: config.inputTopic, config: config, admin: admin)
        let checkFirstOutput = try withStartupReader { reader in
            // What the group is fixed to, and who writes its state topic, before it is joined; a
            // group last run with two stages (or by another tool) is refused too.
            try GroupIdentityCheck.check(
                config: config, inputPartitions: partitions, repartitionPartitions: nil,
                statePartitions: try Self.existingPartitionCount(of: config.effectiveStateTopic, admin: admin), reader: reader)
            return try checkOutputWindows(admin: admin, reader: reader)
        }
        let created = try ensureStateTopic(partitions: partitions, admin: admin) ? [config.effectiveStateTopic] : []
        try topicSettings.check(created: created, logger: logger)
        let stage = AggregateStage(
            input: RawHitInput(limits: config.limits, maxFutureSkew: config.maxFutureSkew), window: taskWindow(partitions: partitions),
            shards: config.shards, identity: config.identity)
        var settings = runnerSettings(
            topic: config.inputTopic, partitions: partitions, group: config.group, member: stage.name, destinations: [.output, .deadLetter],
            bound: .endAtAssignment, recordLimit: learnRecordLimit(of: config.outputTopics + [config.deadLetterTopic], admin: admin))
        settings.checkFirstOutput = checkFirstOutput
        let runner = StageRunner(
            stage: stage, stateTopic: config.effectiveStateTopic, settings: settings, logger: logger, metrics: metrics?.stage(stage.name))
        runners.register(runner)
        logger.info(
            "trackpipe running (one stage: the input is keyed by delivery)",
            metadata: ["brokers": "\(config.brokers)", "input": "\(config.inputTopic)", "output": "\(config.outputsText)",
                "dlq": "\(config.deadLetterTopic)", "group": "\(config.group)", "shards": "\(config.shards)",
                "kafka": "\(config.kafkaPropertiesText)"])
        return { [try runner.run()] }
    }

    private func prepareTwoStages(admin: TopicAdmin) throws -> () throws -> [StageSummary] {
        let topicSettings = TopicSettingsQuestion(admin: admin, config: config, repartitionTopic: config.effectiveRepartitionTopic)
        let sources = try Self.partitionCount(of: config.inputTopic, config: config, admin: admin)
        guard Checkpoint.fits(sourcePartitions: sources, identity: config.identity) else {
            throw PipelineError.configuration(
                "the input topic \(config.inputTopic) has \(sources) partitions; the aggregate stage's checkpoint (one offset per input partition, and the names of the repartition and state topics, in Kafka's commit metadata of at most \(Checkpoint.maxEncodedBytes) bytes) fits at most \(Checkpoint.maxSourcePartitions), fewer with long topic names. Use fewer input partitions (or shorter --repartition-topic and --state-topic names), or --input-keyed-by-delivery for input keyed by deliveryId")
        }
        let repartitionTopic = config.effectiveRepartitionTopic
        let checkFirstOutput = try withStartupReader { reader in
            // What the group is fixed to, and who writes its internal topics, before either group
            // is joined or anything is created or written; a group last run with one stage is
            // refused too, as is an aggregate group whose commits another tool made.
            try GroupIdentityCheck.check(
                config: config, inputPartitions: sources, repartitionPartitions: try Self.existingPartitionCount(of: repartitionTopic, admin: admin),
                statePartitions: try Self.existingPartitionCount(of: config.effectiveStateTopic, admin: admin), reader: reader)
            return try checkOutputWindows(admin: admin, reader: reader)
        }
        let (repartitions, repartitionCreated) = try ensureRepartitionTopic(repartitionTopic, partitions: sources, admin: admin)
        let stateCreated = try ensureStateTopic(partitions: repartitions, admin: admin)
        try topicSettings.check(
            created: (repartitionCreated ? [repartitionTopic] : []) + (stateCreated ? [config.effectiveStateTopic] : []), logger: logger)
        let recordLimit = learnRecordLimit(of: [repartitionTopic, config.deadLetterTopic] + config.outputTopics, admin: admin)
        let (normalize, aggregate) = twoStages(sources: sources, repartitions: repartitions, recordLimit: recordLimit)
        let upstream = UpstreamSignal()
        var first = runnerSettings(
            topic: config.inputTopic, partitions: sources, group: config.group, member: normalize.name, destinations: [.repartition, .deadLetter],
            bound: .endAtAssignment, recordLimit: recordLimit)
        first.maxBatch = normalize.maxBatch
        var second = runnerSettings(
            topic: repartitionTopic, partitions: repartitions, group: config.aggregateGroup, member: aggregate.name,
            destinations: [.output, .deadLetter], bound: .endWhenUpstreamFinishes(upstream), recordLimit: recordLimit)
        second.checkFirstOutput = checkFirstOutput
        // The repartition topic is this worker's own: what the aggregate group has committed is
        // read by no one again, and goes (the user's input, read by the one stage, never does).
        if config.purgeInterval > 0 { second.purge = PurgeSettings(interval: config.purgeInterval) }
        let normalizer = StageRunner(stage: normalize, settings: first, logger: logger, metrics: metrics?.stage(normalize.name))
        let aggregator = StageRunner(
            stage: aggregate, stateTopic: config.effectiveStateTopic, settings: second, logger: logger, metrics: metrics?.stage(aggregate.name))
        runners.register(normalizer)
        runners.register(aggregator)
        logger.info(
            "trackpipe running (two stages: normalize, then aggregate behind the repartition topic)",
            metadata: ["brokers": "\(config.brokers)", "input": "\(config.inputTopic)", "repartition": "\(repartitionTopic)",
                "output": "\(config.outputsText)", "dlq": "\(config.deadLetterTopic)", "group": "\(config.group)",
                "shards": "\(config.shards)", "kafka": "\(config.kafkaPropertiesText)"])

        return { try Self.runTogether(normalizer, aggregator, upstream: upstream) }
    }

    /// Runs the two stages, the aggregate stage on a thread of its own; either failing stops the other.
    private static func runTogether<Aggregate: StatefulStage>(
        _ normalizer: StageRunner<NormalizeStage>, _ aggregator: StageRunner<Aggregate>, upstream: UpstreamSignal
    ) throws -> [StageSummary] {
        let aggregated = Mutex<Result<StageSummary, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let result = Result { try aggregator.run() }
            if case .failure = result { normalizer.requestStop() }
            aggregated.withLock { $0 = result }
            done.signal()
        }
        thread.name = "trackpipe.aggregate"
        thread.stackSize = 8 << 20
        thread.start()
        let firstResult = Result { try normalizer.run() }
        switch firstResult {
        case .success: upstream.finish()
        case .failure: aggregator.requestStop()
        }
        done.wait()
        // Safe: the thread stores its result before it signals `done`, waited for just above.
        let secondResult = aggregated.withLock { $0 }!
        return [try firstResult.get(), try secondResult.get()]
    }

    // MARK: Pieces

    /// The two stages of a pipeline behind a repartition topic of `repartitions` partitions.
    private func twoStages(sources: Int, repartitions: Int, recordLimit: RecordLimit) -> (NormalizeStage, AggregateStage<RepartitionInput>) {
        // Marks every 100 ms (one per tick, every 200 ms, while records flow): a window task
        // hears a source's event time through the events routed to it, which for a task of few
        // deliveries come a few a second, and through marks; at 500 ms the marks held a closed
        // window back by about half a second (trackpipe-bench freshness).
        let normalize = NormalizeStage(
            sourcePartitions: sources, repartitionPartitions: Int32(repartitions), identity: config.identity, limits: config.limits, maxFutureSkew: config.maxFutureSkew, idleTimeout: config.window.idleTimeout,
            markInterval: min(100, max(50, config.window.idleTimeout / 4)), shards: config.shards,
            // A record larger than the producer's queue could never be queued, nor one larger
            // than the topic takes: a batch is sent once it holds this much, and an event adds
            // at most half the limit to it, its original cut to fit if need be (its dead letter,
            // on a topic of the same limit, then fits too).
            batchBytes: min(RepartitionRecord.batchBytes, config.outputBacklogLimit / 4, recordLimit.bytes / 4),
            maxOriginalBytes: recordLimit.bytes / 2, originals: OriginalRule(window: config.window))
        let aggregate = AggregateStage(
            input: RepartitionInput(partitionCount: Int32(repartitions), identity: config.identity), window: taskWindow(partitions: repartitions),
            shards: config.shards, identity: config.identity)
        return (normalize, aggregate)
    }

    /// A stage's runner settings; `bound` is the end of a bounded run (`untilEnd`), the live worker's unbounded.
    private func runnerSettings(
        topic: String, partitions: Int, group: String, member: String, destinations: Set<Destination>, bound: RunnerSettings.Bound,
        recordLimit: RecordLimit
    ) -> RunnerSettings {
        // The state topic is not among them: the runner of the stage that keeps state is made
        // with it (`StageRunner.init(stage:stateTopic:…)`).
        let topics: [Destination: String] = [.deadLetter: config.deadLetterTopic, .repartition: config.effectiveRepartitionTopic]
            .filter { destinations.contains($0.key) }
        var settings = RunnerSettings(
            topic: topic, assignment: .group, bound: config.untilEnd ? bound : .unbounded, consumer: config.consumerConfig(group: group, member: member),
            producer: config.producerConfig, destinations: topics, commitInterval: config.commitInterval)
        settings.partitionCount = partitions
        if destinations.contains(.output) { settings.output(to: config.outputTopics, sizes: config.window.lengths) }
        settings.recordLimit = recordLimit
        settings.maxBatch = config.maxBatch
        settings.progressInterval = config.progressInterval
        settings.unhealthyAfter = config.unhealthyAfter
        settings.timings = config.timings
        settings.outputBacklogLimit = config.outputBacklogLimit
        return settings
    }

    /// Each partition's engine gets an equal share of the entry cap, so the whole worker stays
    /// within `--max-entries` whatever it owns.
    private func taskWindow(partitions: Int) -> WindowConfig {
        var window = config.window
        window.maxEntries = max(1_000, config.window.maxEntries / max(1, partitions))
        return window
    }

    /// The partition count of an input topic, with errors that say what to check.
    static func partitionCount(of topic: String, config: PipelineConfig, admin: TopicAdmin) throws -> Int {
        let count: Int?
        do {
            count = try admin.partitionCount(of: topic)
        } catch let error as KafkaError where error.isUnknownTopic {
            count = nil
        } catch let error as KafkaError where error.severity == .transient {
            throw PipelineError.clusterUnreachable("cannot read the metadata of \(topic): \(error)")
        } catch {
            throw PipelineError.kafka(
                "cannot read the metadata of \(topic) from \(config.brokers): \(error). Check --brokers (and -X security settings): the broker refused this client")
        }
        guard let count else { throw PipelineError.inputTopicMissing(topic) }
        return count
    }

    /// An output topic that holds windows of another size is refused before anything is written;
    /// returned, the check of the window stage's first records (`WindowSizeCheck`).
    private func checkOutputWindows(admin: TopicAdmin, reader: TopicReader) throws -> @Sendable ([String: AcknowledgedRecords]) throws -> Void {
        try WindowSizeCheck.checkOutputs(
            Array(zip(config.outputTopics, config.window.lengths)), given: config.givenSetting(.window),
            allowUnchecked: config.allowUncheckedOutput, group: config.group, admin: admin, reader: reader, logger: logger)
    }

    /// `body` with the consumer the start-up's checks ask their questions through (the groups'
    /// commits, the internal and output topics' logs), closed once they are done, before the
    /// stages start.
    private func withStartupReader<R>(_ body: (TopicReader) throws -> R) throws -> R {
        try TopicReader.using(groupOf: config, logger: logger, body)
    }

    /// A topic's partition count, nil if it does not exist; no broker answering is
    /// `clusterUnreachable` (waited out), not a missing topic.
    static func existingPartitionCount(of topic: String, admin: TopicAdmin) throws -> Int? {
        do {
            return try admin.partitionCount(of: topic)
        } catch let error as KafkaError where error.severity == .transient {
            throw PipelineError.clusterUnreachable("reading the metadata of \(topic): \(error)")
        } catch {
            return nil
        }
    }

    /// The most bytes one record to these topics may take: the producer's `message.max.bytes`
    /// from the start, lowered to a topic's `max.message.bytes` once the cluster has told it, on
    /// a thread of its own (a cluster that cannot answer keeps the question waiting for its
    /// timeout). The normalize stage sizes its repartition records by the first; a repartition
    /// topic that takes less than the producer is told of by the broker's refusal, with what to
    /// change. Dead letters follow the limit as it is learned, and the broker's refusal of one
    /// cuts it smaller still (see `OutputChannel`). The thread asks through the run's client,
    /// which it holds until it is done.
    private func learnRecordLimit(of topics: [String], admin: TopicAdmin) -> RecordLimit {
        let limit = RecordLimit(bytes: config.kafkaProperties["message.max.bytes"].flatMap { Int($0) } ?? RecordLimit.librdkafkaDefault)
        let logger = logger
        let thread = Thread {
            for (topic, bytes) in admin.maxMessageBytes(of: topics).sorted(by: { $0.key < $1.key }) where limit.lower(to: bytes) {
                logger.notice("\(topic) takes records of at most \(bytes) bytes (max.message.bytes): dead letters are cut to fit it")
            }
        }
        thread.name = "trackpipe.record-limit"
        thread.start()
        return limit
    }

    /// Makes sure the state topic exists, compacted, with one partition per window task; creates
    /// it where the cluster allows. Returns whether it created it.
    private func ensureStateTopic(partitions: Int, admin: TopicAdmin) throws -> Bool {
        let topic = config.effectiveStateTopic
        let (count, created) = try ensureTopic(topic, partitions: partitions, config: ["cleanup.policy": "compact"], admin: admin) {
            .stateTopicMissing(topic: topic, partitions: partitions, brokers: config.brokers, reason: $0)
        }
        guard count == partitions else { throw PipelineError.stateTopicMismatch(topic: topic, has: count, needs: partitions) }
        if created { logger.notice("created the state topic \(topic) with \(count) partitions") }
        return created
    }

    /// How trackpipe creates the repartition topic (docs/deploy.md, "The repartition topic's
    /// retention"): deleted, never compacted (its keys are deliveries: compaction would drop
    /// events). The aggregate stage purges what its group has committed (`--purge-interval`), so
    /// the retention is only the backstop for where purges are refused or the stage is stopped:
    /// a week, longer than any stop to recover from (a record retention deletes before it is
    /// counted is lost input, reported as such), and bounded where the cluster refuses purges
    /// (an infinite retention, as Kafka Streams sets with its purges, would grow without end
    /// there). A purge frees whole segments only, and the active segment never: segments of 50
    /// MiB (as Kafka Streams' repartition topics) or an hour, whichever fills first, so that a
    /// quiet topic's purged records leave the disk within about an hour.
    public static let repartitionTopicConfig = [
        "cleanup.policy": "delete", "retention.ms": "604800000", "segment.bytes": "52428800", "segment.ms": "3600000",
    ]

    /// The repartition topic's partition count, creating the topic (as many partitions as the
    /// input, `repartitionTopicConfig`) where the cluster allows; and whether it created it.
    private func ensureRepartitionTopic(_ topic: String, partitions: Int, admin: TopicAdmin) throws -> (count: Int, created: Bool) {
        let (count, created) = try ensureTopic(topic, partitions: partitions, config: Self.repartitionTopicConfig, admin: admin) {
            .repartitionTopicMissing(topic: topic, partitions: partitions, brokers: config.brokers, reason: $0)
        }
        if created {
            logger.notice("created the repartition topic \(topic) with \(count) partitions")
        } else if count != partitions {
            logger.notice(
                "the repartition topic \(topic) has \(count) partitions and the input \(partitions): counts stay exact; aggregate shards is bounded by \(count)")
        }
        return (count, created)
    }

    /// An internal topic's partition count, and whether this run created it: the topic as it
    /// exists, or else created where the cluster allows (CreateTopics with these settings) and
    /// waited for until the cluster's metadata shows it (10 s at most). No broker answering is
    /// `clusterUnreachable` (waited out); any other failure to create it is `missing`, with why.
    private func ensureTopic(
        _ topic: String, partitions: Int, config topicConfig: [String: String], admin: TopicAdmin, missing: (String) -> PipelineError
    ) throws -> (count: Int, created: Bool) {
        if let count = try Self.existingPartitionCount(of: topic, admin: admin) { return (count, false) }
        do {
            try admin.createTopic(topic, partitions: partitions, config: topicConfig)
            for _ in 0..<50 {
                if let count = try? admin.partitionCount(of: topic) { return (count, true) }
                usleep(200_000)
            }
            throw KafkaError(.librdkafka(code: -1), "created, but it did not appear in the cluster's metadata within 10 s")
        } catch let error as KafkaError where error.severity == .transient {
            throw PipelineError.clusterUnreachable("creating \(topic): \(error)")
        } catch {
            throw missing("\(error)")
        }
    }
}
