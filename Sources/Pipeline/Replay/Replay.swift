import Runner
import Foundation
import Kafka
import Logging
import TrackingDomain
import Windowing

/// A backfill: recounts the windows that start in `[from, to)` from the input topic, in one
/// process, without a consumer group and without committing anything, so a live worker's
/// group is never disturbed.
///
/// One process reads every partition into one window task (`ReplayStage`, exact whatever the
/// input's keys), so no repartition stage is needed. It starts early enough for late hits and event time to
/// behave as they did live (`from` minus the retention, found with a time search where the
/// broker answers one) and stops at the end offsets seen at the start.
public final class Replay: Sendable {
    @dynamicMemberLookup
    public struct Config: Sendable {
        /// What a replay is told as `run` is (the brokers, the input topic, the window, the
        /// shards, the `-X` properties, the input's limits, how `--window` was given, whether
        /// the output may go unchecked), read and set through the config itself: `config.window`.
        public var pipeline = PipelineConfig()
        /// Where aggregates go: a topic per window size (in the order of `window.sizes`), or JSON
        /// Lines (every size, told apart by windowEnd - windowStart).
        public var output: Output = .topics(["tracking-aggregates"])
        /// Dead letters are sent only when a topic is given; they are counted either way.
        public var deadLetterTopic: String?
        /// First window start to emit (epoch ms); nil: from the beginning of the topic.
        public var from: Int64?
        /// End of the range, exclusive (epoch ms); nil: to the end of the topic.
        public var to: Int64?

        public init() {}

        public subscript<Value>(dynamicMember setting: WritableKeyPath<PipelineConfig, Value>) -> Value {
            get { pipeline[keyPath: setting] }
            set { pipeline[keyPath: setting] = newValue }
        }

        /// Topics the replay may not write, refused before anything starts: a topic per size, none
        /// of them the input or the dead-letter topic.
        public func validate() throws {
            let outputs: [String] = if case .topics(let topics) = output { topics } else { [] }
            try pipeline.checkWrittenTopics(outputs: outputs, deadLetter: deadLetterTopic)
        }

        /// The librdkafka configurations the replay builds, checked before any client exists
        /// (see `PipelineConfig.checkKafkaProperties`).
        public func checkKafkaProperties() throws(KafkaConfigProblem) { try pipeline.checkKafkaProperties(readingAhead: true) }
    }

    public enum Output: Sendable {
        case topics([String])
        case lines(LineWriter)
    }

    public let config: Config
    private let logger: Logger
    private let onProgress: (@Sendable (RunnerProgress) -> Void)?
    private let runners = RunnerRegistry()

    public init(config: Config, logger: Logger, onProgress: (@Sendable (RunnerProgress) -> Void)? = nil) {
        self.config = config
        self.logger = logger
        self.onProgress = onProgress
    }

    public func requestStop() { runners.requestStop() }

    public func run() throws -> PipelineSummary {
        try config.validate()
        let started = wallClockMillis()
        let pipeline = config.pipeline
        // One client for the questions before the replay: the input's and the output's partitions.
        let admin = try TopicAdmin(config: pipeline.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        let count: Int
        do {
            count = try Pipeline.partitionCount(of: config.inputTopic, config: pipeline, admin: admin)
        } catch PipelineError.clusterUnreachable(let text) {
            // A replay is a bounded command, not a worker: it does not wait for the cluster.
            throw PipelineError.noBrokerAnswered(text, config: pipeline)
        }
        let partitions = (0..<Int32(count)).map { TopicPartition(topic: config.inputTopic, partition: $0) }

        // No group is joined and nothing is committed: the id only satisfies librdkafka.
        var consumerConfig = pipeline.consumerConfig(group: "trackpipe-replay-\(UUID().uuidString.prefix(8))", readingAhead: true)
        consumerConfig["enable.auto.commit"] = "false"
        let starts = try startOffsets(partitions, consumer: KafkaConsumer(config: consumerConfig, logger: logger))

        // A fixed assignment: no group joined, so nothing committed.
        var settings = RunnerSettings(
            topic: config.inputTopic, assignment: .fixed(starts), bound: .endAtAssignment, consumer: consumerConfig, producer: pipeline.producerConfig, destinations: [:], commitInterval: .max)
        switch config.output {
        case .topics(let topics):
            settings.output(to: topics, sizes: config.window.lengths)
            settings.checkFirstOutput = try TopicReader.using(config: consumerConfig, clients: LibrdkafkaClients(), logger: logger) { reader in
                try WindowSizeCheck.checkOutputs(
                    Array(zip(topics, config.window.lengths)), given: pipeline.givenSetting(.window), allowUnchecked: config.allowUncheckedOutput,
                    admin: admin, reader: reader, logger: logger)
            }
        case .lines(let writer): settings.lineOutputs[.output] = writer
        }
        let range: Range<Int64> = (config.from ?? .min)..<(config.to ?? .max)
        let stage = ReplayStage(
            sourceTopic: config.inputTopic, input: RawHitInput(limits: config.limits, maxFutureSkew: config.maxFutureSkew),
            window: config.window, shards: config.shards, range: range)
        if let dlq = config.deadLetterTopic { settings.destinations[.deadLetter] = dlq } else { settings.discarded.insert(.deadLetter) }
        let stageRunner = StageRunner(stage: stage, settings: settings, logger: logger, onProgress: onProgress)
        runners.register(stageRunner)
        var summary = try stageRunner.run()
        // A replay joins no group and commits nothing: the runner's notion of "committed" (where
        // its fixed assignment started) is no commit, and the summary does not show it as one.
        summary.committed = []
        let backfill = config.from != nil || config.to != nil ? range : nil
        return PipelineSummary(stages: [summary], elapsedMilliseconds: wallClockMillis() - started, range: backfill)
    }

    /// Where each partition starts: the first record stamped at or after `from` minus the
    /// retention (hits for the range can arrive that late), or the beginning of the partition
    /// where the broker cannot search by time.
    private func startOffsets(_ partitions: [TopicPartition], consumer: KafkaConsumer) throws -> [TopicPartitionOffset] {
        let beginnings = try consumer.beginningOffsets(partitions)
        guard let from = config.from else { return beginnings }
        let lead = max(config.window.retention, config.maxFutureSkew) + config.window.lengths.last!
        // A broker that really searches answers "timestamp 0" with the first offset of every
        // partition; one that does not (librdkafka's mock cluster) answers something else.
        let probe = try consumer.offsets(forTimestamp: 0, partitions: partitions)
        let searches = zip(probe.sorted { $0.partition < $1.partition }, beginnings.sorted { $0.partition < $1.partition })
            .allSatisfy { $0.offset == $1.offset }
        guard searches else {
            logger.warning("the broker does not search offsets by time (librdkafka's embedded broker does not): reading \(config.inputTopic) from the beginning")
            return beginnings
        }
        let found = try consumer.offsets(forTimestamp: EventTimeMath.add(from, -lead), partitions: partitions)
        let ends = try consumer.endOffsets(partitions)
        return found.map { position in
            // No record at or after the time: nothing to read in that partition.
            if position.offset < 0 { return ends.first { $0.topicPartition == position.topicPartition } ?? position }
            return position
        }
    }
}
