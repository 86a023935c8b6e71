#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
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

    /// The dead-letter reason for hits stamped too far ahead of their arrival.
    public static let futureTimestamp = HitIntake.futureTimestamp

    /// Every reason the worker can put in `trackpipe.error.reason`: the normalizer's, and the
    /// worker's own (documented together, and registered in the metrics at zero).
    public static let deadLetterReasons =
        RejectReason.allCases.map(\.rawValue) + [HitIntake.tooManyHeaders, HitIntake.futureTimestamp, RepartitionInput.unreadableRecord]

    /// The dead-letter reason for input records with more Kafka headers than `--max-headers`.
    public static let tooManyHeaders = HitIntake.tooManyHeaders

    public init(config: PipelineConfig, logger: Logger = Logger(label: "trackpipe"), metrics: PipelineMetrics? = nil) {
        self.config = config
        self.logger = logger
        self.metrics = metrics
    }

    /// Asks every stage to stop after its batch in flight; each commits and returns. Any thread.
    public func requestStop() { runners.requestStop() }

    /// nil while the worker is healthy; else why not (for `/health`).
    public var healthProblem: String? {
        if let problem = watch.withLock({ $0 })?.problem(limit: config.unhealthyAfter) { return problem }
        return runners.healthProblem
    }

    /// Runs until `requestStop`, or (with `untilEnd`) until the input is read to the end offsets
    /// noted at assignment and everything is emitted. Throws for what a restart may fix;
    /// offsets are never committed past an unacknowledged record.
    public func run() throws -> PipelineSummary {
        try config.validate()
        let started = wallClockMillis()
        let admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        let brokerWatch = BrokerWatch(
            admin: admin, brokers: config.brokers, logger: logger, interval: min(5_000, max(250, config.unhealthyAfter / 4)), onChange: { [metrics] up in
            metrics?.brokerReachable.set(Double(up ? 1 : 0))
        })
        metrics?.brokerReachable.set(Double(1))
        brokerWatch.start()
        watch.withLock { $0 = brokerWatch }
        defer { brokerWatch.stop() }
        let stages = config.inputKeyedByDelivery ? try runSingleStage() : try runTwoStages()
        return PipelineSummary(stages: stages, elapsedMilliseconds: wallClockMillis() - started)
    }

    // MARK: Compositions

    private func runSingleStage() throws -> [StageSummary] {
        let partitions = try inputPartitions()
        // A group last run with two stages (or by another tool) is refused before it is joined.
        for start in try GroupCommits.starts(group: config.group, topic: config.inputTopic, partitions: partitions, config: config, logger: logger) {
            if let refusal = AggregateTask.refusal(of: start, topic: config.inputTopic) { throw refusal }
        }
        try ensureStateTopic(partitions: partitions)
        let stage = AggregateStage(
            sourceTopic: config.inputTopic, input: RawHitInput(limits: config.limits, maxFutureSkew: config.maxFutureSkew),
            window: taskWindow(partitions: partitions), parallelism: config.shards, keepsChangelog: true)
        var settings = runnerSettings(
            topic: config.inputTopic, group: config.group, member: stage.name, destinations: [.output, .deadLetter, .changelog])
        settings.bound = config.untilEnd ? .endAtAssignment : .unbounded
        let runner = StageRunner(stage: stage, settings: settings, logger: logger, metrics: metrics?.stage(stage.name))
        runners.register(runner)
        logger.info(
            "trackpipe running (one stage: the input is keyed by delivery)",
            metadata: ["brokers": "\(config.brokers)", "input": "\(config.inputTopic)", "output": "\(config.outputTopic)",
                "dlq": "\(config.deadLetterTopic)", "group": "\(config.group)", "shards": "\(config.shards)",
                "kafka": "\(config.kafkaPropertiesText)"])
        return [try runner.run()]
    }

    private func runTwoStages() throws -> [StageSummary] {
        let sources = try inputPartitions()
        guard sources <= Checkpoint.maxSourcePartitions else {
            throw PipelineError.configuration(
                "the input topic \(config.inputTopic) has \(sources) partitions; the aggregate stage's checkpoint (one offset per input partition, in Kafka's commit metadata) fits at most \(Checkpoint.maxSourcePartitions). Use fewer input partitions, or --input-keyed-by-delivery for input keyed by deliveryId")
        }
        let repartitionTopic = config.effectiveRepartitionTopic
        // A group last run with one stage is refused before it is joined, as is an aggregate
        // group whose commits another tool made.
        for start in try GroupCommits.starts(group: config.group, topic: config.inputTopic, partitions: sources, config: config, logger: logger) {
            _ = try NormalizeStage.resume(from: start, topic: config.inputTopic, now: 0)
        }
        let repartitions = try ensureRepartitionTopic(repartitionTopic, partitions: sources)
        for start in try GroupCommits.starts(
            group: config.aggregateGroup, topic: repartitionTopic, partitions: repartitions, config: config, logger: logger)
        {
            if let refusal = AggregateTask.refusal(of: start, topic: repartitionTopic) { throw refusal }
        }
        try ensureStateTopic(partitions: repartitions)
        let normalize = NormalizeStage(
            inputTopic: config.inputTopic, sourcePartitions: sources, repartitionPartitions: Int32(repartitions),
            limits: config.limits, maxFutureSkew: config.maxFutureSkew, idleTimeout: config.window.idleTimeout,
            markInterval: min(500, max(50, config.window.idleTimeout / 4)), parallelism: config.shards,
            // A record larger than the producer's queue could never be queued.
            batchBytes: min(RepartitionRecord.batchBytes, config.outputBacklogLimit / 4),
            carrying: OriginalCarrying(windowSize: config.window.size, retention: config.window.retention))
        let aggregate = AggregateStage(
            sourceTopic: config.inputTopic, input: RepartitionInput(partitionCount: Int32(repartitions), inputTopic: config.inputTopic), window: taskWindow(partitions: repartitions),
            parallelism: config.shards, keepsChangelog: true,
            originals: InputTopicLookup(
                config: config.consumerConfig(group: config.aggregateGroup), logger: logger.with(label: "trackpipe.kafka.lookup")))
        let upstream = UpstreamSignal()
        var first = runnerSettings(
            topic: config.inputTopic, group: config.group, member: normalize.name, destinations: [.repartition, .deadLetter])
        first.bound = config.untilEnd ? .endAtAssignment : .unbounded
        var second = runnerSettings(
            topic: repartitionTopic, group: config.aggregateGroup, member: aggregate.name, destinations: [.output, .deadLetter, .changelog])
        second.bound = config.untilEnd ? .endWhenUpstreamFinishes(upstream) : .unbounded
        let normalizer = StageRunner(stage: normalize, settings: first, logger: logger, metrics: metrics?.stage(normalize.name))
        let aggregator = StageRunner(stage: aggregate, settings: second, logger: logger, metrics: metrics?.stage(aggregate.name))
        runners.register(normalizer)
        runners.register(aggregator)
        logger.info(
            "trackpipe running (two stages: normalize, then aggregate behind the repartition topic)",
            metadata: ["brokers": "\(config.brokers)", "input": "\(config.inputTopic)", "repartition": "\(repartitionTopic)",
                "output": "\(config.outputTopic)", "dlq": "\(config.deadLetterTopic)", "group": "\(config.group)",
                "shards": "\(config.shards)", "kafka": "\(config.kafkaPropertiesText)"])

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
        let secondResult = aggregated.withLock { $0 }!
        return [try firstResult.get(), try secondResult.get()]
    }

    // MARK: Pieces

    private func runnerSettings(topic: String, group: String, member: String, destinations: Set<Destination>) -> RunnerSettings {
        var topics: [Destination: String] = [:]
        for destination in destinations {
            switch destination {
            case .output: topics[.output] = config.outputTopic
            case .deadLetter: topics[.deadLetter] = config.deadLetterTopic
            case .repartition: topics[.repartition] = config.effectiveRepartitionTopic
            case .changelog: topics[.changelog] = config.effectiveStateTopic
            }
        }
        var settings = RunnerSettings(
            topic: topic, source: .group, bound: .unbounded, commits: true, consumer: config.consumerConfig(group: group, member: member),
            producer: config.producerConfig, destinations: topics, commitInterval: config.commitInterval)
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

    private func inputPartitions() throws -> Int {
        try Self.partitionCount(of: config.inputTopic, config: config, logger: logger)
    }

    /// The partition count of an input topic, with errors that say what to check.
    static func partitionCount(of topic: String, config: PipelineConfig, logger: Logger) throws -> Int {
        let admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        let count: Int?
        do {
            count = try admin.partitionCount(of: topic)
        } catch let error as KafkaError where error.isUnknownTopic {
            count = nil
        } catch {
            throw PipelineError.kafka(
                "cannot read the metadata of \(topic) from \(config.brokers): \(error). Check --brokers (and -X security settings): no broker answered, or it refused this client")
        }
        guard let count else { throw PipelineError.inputTopicMissing(topic) }
        return count
    }

    /// Makes sure the state topic exists, compacted, with one partition per window task; creates
    /// it where the cluster allows.
    private func ensureStateTopic(partitions: Int) throws {
        let topic = config.effectiveStateTopic
        let admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        if let count = try? admin.partitionCount(of: topic) {
            guard count == partitions else { throw PipelineError.stateTopicMismatch(topic: topic, has: count, needs: partitions) }
            return
        }
        do {
            try admin.createTopic(topic, partitions: partitions, config: ["cleanup.policy": "compact"])
            for _ in 0..<50 {
                if let count = try? admin.partitionCount(of: topic) {
                    guard count == partitions else { throw PipelineError.stateTopicMismatch(topic: topic, has: count, needs: partitions) }
                    logger.notice("created the state topic \(topic) with \(count) partitions")
                    return
                }
                usleep(200_000)
            }
            throw KafkaError(.librdkafka(code: -1), "created, but it did not appear in the cluster's metadata within 10 s")
        } catch let error as PipelineError {
            throw error
        } catch {
            throw PipelineError.stateTopicMissing(topic: topic, partitions: partitions, brokers: config.brokers, reason: "\(error)")
        }
    }

    /// The repartition topic's partition count, creating the topic (as many partitions as the
    /// input, a week's retention) where the cluster allows.
    private func ensureRepartitionTopic(_ topic: String, partitions: Int) throws -> Int {
        let admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        if let count = try? admin.partitionCount(of: topic) {
            if count != partitions {
                logger.notice(
                    "the repartition topic \(topic) has \(count) partitions and the input \(partitions): counts stay exact; aggregate parallelism is bounded by \(count)")
            }
            return count
        }
        do {
            try admin.createTopic(topic, partitions: partitions, config: ["cleanup.policy": "delete", "retention.ms": "604800000"])
            for _ in 0..<50 {
                if let count = try? admin.partitionCount(of: topic) {
                    logger.notice("created the repartition topic \(topic) with \(count) partitions")
                    return count
                }
                usleep(200_000)
            }
            throw KafkaError(.librdkafka(code: -1), "created, but it did not appear in the cluster's metadata within 10 s")
        } catch {
            throw PipelineError.repartitionTopicMissing(topic: topic, partitions: partitions, brokers: config.brokers, reason: "\(error)")
        }
    }
}

public func wallClockMillis() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

extension Logger {
    func with(label: String) -> Logger {
        var copy = Logger(label: label)
        copy.logLevel = logLevel
        return copy
    }
}
