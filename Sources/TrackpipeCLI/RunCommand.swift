import ArgumentParser
import Foundation
import Kafka
import Logging
import Pipeline
import Windowing

/// `trackpipe run`: the worker users deploy.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Consume raw hits, count them per delivery in event-time windows, produce aggregates and dead letters.",
        discussion: """
            Every flag can also come from an environment variable TRACKPIPE_<FLAG> (for example
            TRACKPIPE_BROKERS, TRACKPIPE_INPUT_TOPIC, TRACKPIPE_UNTIL_END=true); the command line wins.
            librdkafka properties come from -X key=value, TRACKPIPE_X ("k=v;k=v") and TRACKPIPE_X_<ANY> ("k=v").
            Durations: 500ms, 10s, 1m, 1h, 1h30m.
            SIGTERM or SIGINT: stop consuming, finish the batch in flight, commit the safe offsets, exit 0.
            """)

    @Option(help: "Kafka bootstrap servers. (env TRACKPIPE_BROKERS, default localhost:9092)") var brokers: String?
    @Option(help: "Topic of raw tracking hits. (env TRACKPIPE_INPUT_TOPIC, default tracking-hits)") var inputTopic: String?
    @Option(help: "Topic for aggregate records. (env TRACKPIPE_OUTPUT_TOPIC, default tracking-aggregates)") var outputTopic: String?
    @Option(help: "Topic for dead letters. (env TRACKPIPE_DLQ_TOPIC, default tracking-hits-dlq)") var dlqTopic: String?
    @Option(help: "Consumer group of the input topic; the aggregate stage uses <group>-aggregate. (env TRACKPIPE_GROUP, default trackpipe)")
    var group: String?
    @Option(help: "Internal topic between the normalize and aggregate stages, keyed by delivery. (env TRACKPIPE_REPARTITION_TOPIC, default <group>-repartition)")
    var repartitionTopic: String?
    @Flag(help: "The input is already keyed by deliveryId: skip the repartition stage and window the input directly. (env TRACKPIPE_INPUT_KEYED_BY_DELIVERY)")
    var inputKeyedByDelivery = false
    @Option(help: "Tumbling window size. (env TRACKPIPE_WINDOW, default 1m)") var window: String?
    @Option(help: "Wait this long after a window's end before emitting it. (env TRACKPIPE_GRACE, default 10s)") var grace: String?
    @Option(help: "Keep emitted windows this long for late corrections. (env TRACKPIPE_RETENTION, default 1h)") var retention: String?
    @Option(help: "Advance time by the wall clock when a partition is quiet this long. (env TRACKPIPE_IDLE_TIMEOUT, default 30s)")
    var idleTimeout: String?
    @Option(help: "Windowing shards (Dispatch queues). (env TRACKPIPE_SHARDS, default: number of cores)") var shards: Int?
    @Flag(help: "Read to the end offsets noted at assignment, emit every window, commit, exit. (env TRACKPIPE_UNTIL_END)")
    var untilEnd = false
    @Option(name: .customShort("X"), help: ArgumentHelp("A librdkafka property key=value (repeatable).", valueName: "key=value"))
    var kafkaProperties: [String] = []
    @Option(help: "Port for /metrics and /health; 0 turns them off. (env TRACKPIPE_METRICS_PORT, default 0)") var metricsPort: Int?
    @Option(help: "Cap on retained window entries before windows are finalized early. (env TRACKPIPE_MAX_ENTRIES, default 20000000)")
    var maxEntries: Int?
    @Option(help: "How often safe offsets are committed. (env TRACKPIPE_COMMIT_INTERVAL, default 5s)") var commitInterval: String?
    @Option(
        help:
            "Dead-letter hits stamped more than this after their Kafka timestamp, as future_timestamp. (env TRACKPIPE_MAX_FUTURE_SKEW, default 1h)"
    )
    var maxFutureSkew: String?
    @Option(help: "trace, debug, info, notice, warning, error, critical. (env TRACKPIPE_LOG_LEVEL, default info)") var logLevel: String?
    @Option(help: "text or json. (env TRACKPIPE_LOG_FORMAT, default text)") var logFormat: String?

    /// The flags that read `TRACKPIPE_<FLAG>`: the deploy files are checked against this list.
    static let environmentFlags = [
        "brokers", "input-topic", "output-topic", "dlq-topic", "group", "repartition-topic", "input-keyed-by-delivery", "window", "grace", "retention", "idle-timeout",
        "shards", "until-end", "metrics-port", "max-entries", "commit-interval", "max-future-skew", "log-level", "log-format",
        "x",
    ]

    func resolve(_ environment: Environment = Environment()) throws -> ResolvedRun {
        func pick(_ flag: String, _ value: String?, _ fallback: String) -> String {
            value ?? environment.value(forFlag: flag) ?? fallback
        }
        func duration(_ flag: String, _ value: String?, _ fallback: String) throws -> Int64 {
            do {
                return try DurationText.milliseconds(pick(flag, value, fallback))
            } catch {
                throw ValidationError("--\(flag): \(error)")
            }
        }
        func integer(_ flag: String, _ value: Int?, _ fallback: Int) throws -> Int {
            if let value { return value }
            guard let text = environment.value(forFlag: flag) else { return fallback }
            guard let number = Int(text) else {
                throw ValidationError("\(Environment.variableName(forFlag: flag))=\(text): expected a whole number")
            }
            return number
        }
        /// A switch from the environment: true or false in the usual spellings, anything else refused.
        func boolean(_ flag: String) throws -> Bool {
            guard let text = environment.value(forFlag: flag) else { return false }
            switch text.lowercased() {
            case "1", "true", "yes", "on": return true
            case "0", "false", "no", "off": return false
            default:
                throw ValidationError("\(Environment.variableName(forFlag: flag))=\(text): expected true or false")
            }
        }
        var config = PipelineConfig()
        config.brokers = pick("brokers", brokers, "localhost:9092")
        config.inputTopic = pick("input-topic", inputTopic, "tracking-hits")
        config.outputTopic = pick("output-topic", outputTopic, "tracking-aggregates")
        config.deadLetterTopic = pick("dlq-topic", dlqTopic, "tracking-hits-dlq")
        config.group = pick("group", group, "trackpipe")
        config.repartitionTopic = repartitionTopic ?? environment.value(forFlag: "repartition-topic")
        config.inputKeyedByDelivery = try inputKeyedByDelivery || boolean("input-keyed-by-delivery")
        let size = try duration("window", window, "1m")
        let graceMillis = try duration("grace", grace, "10s")
        let retentionMillis = try duration("retention", retention, "1h")
        let idle = try duration("idle-timeout", idleTimeout, "30s")
        let cap = try integer("max-entries", maxEntries, 20_000_000)
        if let problem = WindowConfig.problem(
            size: size, grace: graceMillis, retention: retentionMillis, idleTimeout: idle, maxEntries: cap)
        {
            throw ValidationError("\(problem) (--window, --grace, --retention, --idle-timeout, --max-entries)")
        }
        config.window = WindowConfig(size: size, grace: graceMillis, retention: retentionMillis, idleTimeout: idle, maxEntries: cap)
        config.shards = try integer("shards", shards, ProcessInfo.processInfo.activeProcessorCount)
        config.untilEnd = try untilEnd || boolean("until-end")
        config.commitInterval = try duration("commit-interval", commitInterval, "5s")
        config.maxFutureSkew = try duration("max-future-skew", maxFutureSkew, "1h")
        config.kafkaProperties = try KafkaPropertyArguments.parse(environment.kafkaProperties() + kafkaProperties)
        let levelText = pick("log-level", logLevel, "info")
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw ValidationError("--log-level \(levelText): use trace, debug, info, notice, warning, error or critical")
        }
        let formatText = pick("log-format", logFormat, "text")
        guard let format = LogFormat(rawValue: formatText.lowercased()) else {
            throw ValidationError("--log-format \(formatText): use text or json")
        }
        let port = try integer("metrics-port", metricsPort, 0)
        guard (0...65535).contains(port) else { throw ValidationError("--metrics-port \(port): use 0 (off) or a port number") }
        do {
            try config.validate()
        } catch {
            throw ValidationError("\(error)")
        }
        return ResolvedRun(config: config, metricsPort: port, logLevel: level, logFormat: format)
    }

    func run() throws {
        let resolved = try resolve()
        LogSetup.bootstrap(level: resolved.logLevel, format: resolved.logFormat)
        let logger = Logger(label: "trackpipe")
        do {
            let summary = try WorkerRun.execute(resolved, logger: logger)
            print(summary.text)
        } catch {
            FileHandle.standardError.write(Data("trackpipe run: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

struct ResolvedRun: Sendable {
    var config: PipelineConfig
    var metricsPort: Int
    var logLevel: Logger.Level
    var logFormat: LogFormat
}

/// Wires a pipeline to signals and the metrics endpoint; shared by `run` and `demo`.
enum WorkerRun {
    static func execute(_ resolved: ResolvedRun, logger: Logger) throws -> PipelineSummary {
        let metrics = PipelineMetrics()
        let pipeline = Pipeline(config: resolved.config, logger: logger, metrics: metrics)
        var server: MetricsServer?
        if resolved.metricsPort > 0 {
            server = try MetricsServer(
                port: resolved.metricsPort, logger: logger, metrics: { metrics.registry.emitToBuffer() },
                health: { pipeline.healthProblem })
            logger.info("metrics on :\(resolved.metricsPort)/metrics, health on :\(resolved.metricsPort)/health")
        }
        let signals = ShutdownSignal.install { name in
            logger.notice("\(name) received: finishing the batch in flight, committing safe offsets")
            pipeline.requestStop()
        }
        defer {
            server?.stop()
            withExtendedLifetime(signals) {}
        }
        return try pipeline.run()
    }
}
