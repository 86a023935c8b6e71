import ArgumentParser
import Foundation
import Kafka
import Logging
import Pipeline
import Runner
import Windowing

/// `trackpipe run`: the worker users deploy.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Consume raw hits, count them per delivery in event-time windows, produce aggregates and dead letters.",
        discussion: """
            Two stages run in every process: normalize reads the input topic (group <group>) and sends each accepted hit, keyed by its delivery, to the repartition topic; aggregate reads that topic (group <group>-aggregate) and counts hits in event-time windows. Start more instances with the same flags to scale out: counts stay exact whatever the input's keys. With --input-keyed-by-delivery one stage reads the input directly.

            Every flag but --timings can also come from an environment variable TRACKPIPE_<FLAG> (for example TRACKPIPE_BROKERS, TRACKPIPE_INPUT_TOPIC, TRACKPIPE_UNTIL_END=true); the command line wins, but a value in the environment is checked even where the command line overrides it (TRACKPIPE_WINDOW=banana with --window 1m is refused, naming the variable). librdkafka properties come from -X key=value, TRACKPIPE_X ("k=v;k=v") and TRACKPIPE_X_<ANY> ("k=v"). Any other TRACKPIPE_* variable is refused: one named after a flag without a variable (TRACKPIPE_TIMINGS) says so, any other names the closest known one. Topic names are checked as Kafka checks them, the repartition and state topics' names made from --group included.

            Durations: 500ms, 10s, 1m, 1h, 1h30m.

            A Kafka outage is waited out, at start-up and later: the worker stays live (/health/live) and reports itself not ready (/health/ready) until a broker answers. Only a bounded run (--until-end) gives up at start-up, after --connect-timeout. A record larger than the dead-letter topic takes is dead-lettered cut to fit.

            The input topic must exist: a missing one exits 1 at start-up, before any group is joined (the repartition and state topics are created where the cluster allows). A restart reads each window task's state back from the state topic and goes on from the committed offsets; both groups commit what they processed.

            With --emit final, a live worker holds every window until event time passes its end plus --retention: its aggregate progress lines, its summary and the gauges trackpipe_windows_pending and trackpipe_first_window_due_seconds say how many windows it holds and when the first is due.

            SIGTERM or SIGINT: stop consuming, finish the batch in flight, commit the safe offsets, exit 0 (during an outage, after at most 10 s without that last commit). Exit codes: 0 after a clean stop or the end of an --until-end run; 1 when the worker stops on what waiting cannot fix, or a bounded run found no broker within --connect-timeout (the message says which); 64 for a configuration error, checked before any broker is contacted (-X and TRACKPIPE_X* properties, an unknown TRACKPIPE_* variable, a --metrics-port already in use included) or at start-up against the cluster, before any group is joined or anything written (a setting the group is fixed to given otherwise than its commits say: --window, --input-keyed-by-delivery, --repartition-topic, --state-topic; an internal topic that another group writes; an output topic that holds windows of another size, or whose size cannot be told without --allow-unchecked-output; more input partitions than a checkpoint holds; a state topic that deletes by time or size or a compacted repartition topic, where the cluster says their settings); 65 when an --until-end run lost input: retention (or the broker's size limit) deleted records of a stage's input before the group read them (it writes what it read and names them first), unless --allow-lost-input. Offsets never delivered that the log still holds (transaction markers, records compaction removed) are not loss.
            """)

    @Option(help: "Kafka bootstrap servers. (env TRACKPIPE_BROKERS, default localhost:9092)") var brokers: String?
    @Option(help: "Topic of raw tracking hits. (env TRACKPIPE_INPUT_TOPIC, default tracking-hits)") var inputTopic: String?
    @Option(help: "Topic for aggregate records; with several window sizes, one per size in the order of --window (1m,1h: aggregates-1m,aggregates-1h). (env TRACKPIPE_OUTPUT_TOPIC, default tracking-aggregates)") var outputTopic: String?
    @Option(help: "Topic for dead letters. (env TRACKPIPE_DLQ_TOPIC, default tracking-hits-dlq)") var dlqTopic: String?
    @Option(help: "Consumer group of the input topic; the aggregate stage uses <group>-aggregate. (env TRACKPIPE_GROUP, default trackpipe)")
    var group: String?
    @Option(help: "Internal topic between the normalize and aggregate stages, keyed by delivery; fixed for the group once it has committed. (env TRACKPIPE_REPARTITION_TOPIC, default <group>-repartition)")
    var repartitionTopic: String?
    @Option(help: "Compacted topic the window tasks keep their state in, one partition per task; created if missing; fixed for the group once it has committed. Where the cluster says its settings, one that deletes by time or size is refused at start with the command that fixes it. (env TRACKPIPE_STATE_TOPIC, default <group>-state)")
    var stateTopic: String?
    @Flag(help: "The input is already keyed by deliveryId: skip the repartition stage and window the input directly; fixed for the group once it has committed. (env TRACKPIPE_INPUT_KEYED_BY_DELIVERY)")
    var inputKeyedByDelivery = false
    @Option(parsing: .unconditional, help: "Tumbling window size, or several (1m,1h,1d), counted from one read of the input; fixed for the group once it has committed, and for the output topic. (env TRACKPIPE_WINDOW, default 1m)") var window: String?
    @Option(parsing: .unconditional, help: "Wait this long after a window's end before emitting it; one value, or one per size of --window. (env TRACKPIPE_GRACE, default 10s)") var grace: String?
    @Option(parsing: .unconditional, help: "Keep emitted windows this long for late corrections. (env TRACKPIPE_RETENTION, default 1h)") var retention: String?
    @Option(parsing: .unconditional, help: "Advance time by the wall clock when a partition is quiet this long. (env TRACKPIPE_IDLE_TIMEOUT, default 30s)")
    var idleTimeout: String?
    @Option(help: "\(emitHelp) One value, or one per size of --window. (env TRACKPIPE_EMIT, default changes)") var emit: String?
    @Option(help: "\(shardsHelp) (env TRACKPIPE_SHARDS, default: number of cores)") var shards: Int?
    @Flag(help: "Read to the end offsets noted at assignment, emit every window, commit, exit. (env TRACKPIPE_UNTIL_END)")
    var untilEnd = false
    @Option(
        parsing: .unconditional,
        help:
            "With --until-end: give up after this long without a Kafka broker answering at start-up, and exit 1. The live worker waits as long as it takes. (env TRACKPIPE_CONNECT_TIMEOUT, default 5m)"
    )
    var connectTimeout: String?
    @Flag(
        help:
            "With --until-end: exit 0 even if input was lost (retention or the broker's size limit deleted records of a stage's input before the group read them); without it such a run writes what it read, names the lost offsets and exits 65. Transaction markers and compaction are not loss and need no flag. (env TRACKPIPE_ALLOW_LOST_INPUT)"
    )
    var allowLostInput = false
    @Flag(help: "\(allowUncheckedOutputHelp) (env TRACKPIPE_ALLOW_UNCHECKED_OUTPUT)")
    var allowUncheckedOutput = false
    @Option(
        name: .customShort("X"),
        help: ArgumentHelp(
            "A librdkafka property key=value (repeatable); it overrides trackpipe's own, but group.id (use --group), group.instance.id (use --instance-id), enable.auto.commit, enable.auto.offset.store, enable.idempotence, auto.offset.reset and enable.partition.eof are trackpipe's and refused unless set to its own values.",
            valueName: "key=value"))
    var kafkaProperties: [String] = []
    @Option(
        help:
            "Static group membership: each stage's consumer joins with group.instance.id <id>-normalize or <id>-aggregate, so a restart within session.timeout.ms moves no partition. Unique per instance, stable across its restarts (a StatefulSet pod name). (env TRACKPIPE_INSTANCE_ID, default: none)"
    )
    var instanceId: String?
    @Option(help: "Port for /metrics and the health checks (/health/live, /health/ready, /health = ready); 0 turns them off. (env TRACKPIPE_METRICS_PORT, default 0)") var metricsPort: Int?
    @Option(help: "Cap on retained window entries before windows are finalized early. (env TRACKPIPE_MAX_ENTRIES, default 20000000)")
    var maxEntries: Int?
    @Option(parsing: .unconditional, help: "How often safe offsets are committed. (env TRACKPIPE_COMMIT_INTERVAL, default 5s)") var commitInterval: String?
    @Option(
        parsing: .unconditional,
        help:
            "Two stages: after a commit, delete the repartition topic's records the aggregate group has committed (DeleteRecords), at most this often; 0s never does. A cluster that refuses (no DeleteRecords, no Delete grant) is said once and counted; the topic's retention.ms then bounds it. (env TRACKPIPE_PURGE_INTERVAL, default 30s)"
    )
    var purgeInterval: String?
    @Option(
        parsing: .unconditional,
        help:
            "Dead-letter hits stamped more than this after their Kafka timestamp, as future_timestamp. (env TRACKPIPE_MAX_FUTURE_SKEW, default 1h)"
    )
    var maxFutureSkew: String?
    @Option(parsing: .unconditional, help: "Dead-letter input records with more Kafka headers than this, as too_many_headers. (env TRACKPIPE_MAX_HEADERS, default 64)")
    var maxHeaders: Int?
    @Option(parsing: .unconditional, help: "How often each stage logs a progress line; 0s turns it off. (env TRACKPIPE_PROGRESS_INTERVAL, default 30s)")
    var progressInterval: String?
    @Option(parsing: .unconditional, help: "/health/live fails after a consume loop has not turned this long; /health/ready also after this long without a reachable broker or with a commit waiting on the cluster. (env TRACKPIPE_UNHEALTHY_AFTER, default 60s)")
    var unhealthyAfter: String?
    @Flag(help: "After the summary, print where each stage's wall time went (poll, process, produce, commit, ...). (no environment variable)")
    var timings = false
    @Option(help: "trace, debug, info, notice, warning, error, critical. (env TRACKPIPE_LOG_LEVEL, default info)") var logLevel: String?
    @Option(help: "text or json. (env TRACKPIPE_LOG_FORMAT, default text)") var logFormat: String?

    /// The flags that read `TRACKPIPE_<FLAG>`: the deploy files are checked against this list.
    static let environmentFlags = [
        "brokers", "input-topic", "output-topic", "dlq-topic", "group", "repartition-topic", "state-topic", "input-keyed-by-delivery", "window", "grace", "retention", "idle-timeout",
        "emit", "shards", "until-end", "connect-timeout", "allow-lost-input", "allow-unchecked-output", "instance-id", "metrics-port", "max-entries", "commit-interval", "purge-interval", "max-future-skew", "max-headers", "progress-interval", "unhealthy-after", "log-level", "log-format",
        "x",
    ]

    /// More lanes than this only add workers that wait: a batch is shared out over at most this
    /// many, and a partition's window task runs on one of them.
    static let maxShards = 1_024

    /// What `--shards` means, in every command that takes it (run, replay) and in the README
    /// and docs/glossary.md, word for word (HelpTextTests holds them to this).
    static let shardsHelp =
        "Lanes (Dispatch workers) working at once: the normalize stage judges a batch on them, the aggregate stage counts that many window tasks side by side (replay splits its one task into that many shards, by delivery); 1 to 1024, results do not depend on it."

    /// What `--allow-unchecked-output` means, in run and replay alike.
    static let allowUncheckedOutputHelp =
        "Write into an output topic whose window size cannot be told (the newest 100 offsets of a partition hold no aggregate record, only tombstones or other records, and older ones remain); without it such a run exits 64 before writing. An aggregate record of another size is refused either way."

    /// What `--emit` means, in run and replay alike.
    static let emitHelp = "When window records go out: changes (at the window's end plus grace, then with every correction until its end plus retention) or final (one record per window, once nothing can change it: event time past its end plus retention, or the end of a bounded run; a backfill then writes the same records for the same input)."

    /// `--connect-timeout`'s default: long enough for a broker restart or a rolling upgrade, short
    /// enough that a backfill Job pointed at the wrong address fails within minutes.
    static let defaultConnectTimeout = "5m"

    /// The settings as given, checked; `validated`: see `Environment.checkOverriddenValues`.
    func resolve(_ environment: Environment = Environment(), validated: Bool = false) throws -> ResolvedRun {
        try environment.refuseUnknownVariables()
        func text(_ flag: String, _ value: String?, _ fallback: String) -> GivenSetting {
            environment.setting(flag, value, default: fallback)
        }
        var config = PipelineConfig()
        config.brokers = try environment.brokers(brokers)
        config.inputTopic = try environment.topic("input-topic", inputTopic, default: "tracking-hits")
        config.deadLetterTopic = try environment.topic("dlq-topic", dlqTopic, default: "tracking-hits-dlq")
        config.group = text("group", group, "trackpipe").text
        config.repartitionTopic = try environment.optionalTopic("repartition-topic", repartitionTopic)
        config.stateTopic = try environment.optionalTopic("state-topic", stateTopic)
        config.inputKeyedByDelivery = try environment.switch("input-keyed-by-delivery", inputKeyedByDelivery)
        // The internal topics are named after the group unless given.
        for (flag, given, name) in [
            ("repartition-topic", config.repartitionTopic != nil || config.inputKeyedByDelivery, config.effectiveRepartitionTopic),
            ("state-topic", config.stateTopic != nil, config.effectiveStateTopic),
        ] where !given {
            if let problem = Environment.topicNameProblem(name) {
                throw ValidationError("\(text("group", group, "trackpipe").valueLabel): the --\(flag) it names, \(name), is \(problem); change the group or give --\(flag)")
            }
        }
        // How each setting the group is fixed to was given, for the refusals that name it.
        config.given = [
            .window: text("window", window, "1m"),
            .repartitionTopic: text("repartition-topic", repartitionTopic, "\(config.group)-repartition"),
            .stateTopic: text("state-topic", stateTopic, "\(config.group)-state"),
            .inputKeyedByDelivery: text("input-keyed-by-delivery", inputKeyedByDelivery ? "" : nil, "false"),
        ]
        config.allowUncheckedOutput = try environment.switch("allow-unchecked-output", allowUncheckedOutput)
        let windows = try environment.windowConfig(
            window: window, grace: grace, emit: emit, retention: retention, idleTimeout: idleTimeout,
            maxEntries: (try environment.integer("max-entries", maxEntries, default: 20_000_000), maxEntries))
        config.window = windows.config
        config.outputTopics = try environment.outputTopics(outputTopic, givenOrder: windows.givenOrder)
        config.shards = try environment.shards(shards)
        config.untilEnd = try environment.switch("until-end", untilEnd)
        let connectLimit = try environment.duration("connect-timeout", connectTimeout, default: Self.defaultConnectTimeout)
        guard connectLimit > 0 else {
            throw ValidationError("\(text("connect-timeout", connectTimeout, Self.defaultConnectTimeout).valueLabel): must be longer than 0, like 30s or 5m")
        }
        // Only a bounded run gives up: the live worker waits out any outage (docs/reliability.md).
        config.connectTimeout = config.untilEnd ? connectLimit : nil
        let allowsLostInput = try environment.switch("allow-lost-input", allowLostInput)
        config.timings = timings
        config.commitInterval = try environment.duration("commit-interval", commitInterval, default: "5s")
        guard config.commitInterval > 0 else {
            throw ValidationError("\(text("commit-interval", commitInterval, "5s").valueLabel): must be longer than 0, like 1s or 5s")
        }
        config.purgeInterval = try environment.duration("purge-interval", purgeInterval, default: "30s")
        config.maxFutureSkew = try environment.duration("max-future-skew", maxFutureSkew, default: "1h")
        config.limits.maxHeaders = try environment.maxHeaders(maxHeaders)
        config.progressInterval = try environment.duration("progress-interval", progressInterval, default: "30s")
        config.unhealthyAfter = try environment.duration("unhealthy-after", unhealthyAfter, default: "60s")
        guard config.unhealthyAfter > 0 else {
            throw ValidationError("\(text("unhealthy-after", unhealthyAfter, "60s").valueLabel): must be longer than 0, like 60s")
        }
        let pairs = environment.kafkaPropertyPairs() + kafkaProperties.map { KafkaPropertyArguments.Pair($0) }
        config.kafkaProperties = try KafkaPropertyArguments.parse(pairs: pairs)
        config.instanceId = environment.optional("instance-id", instanceId)
        if let id = config.instanceId, let problem = PipelineConfig.instanceIdProblem(id) {
            throw ValidationError("\(text("instance-id", instanceId, "").valueLabel): \(problem)")
        }
        let (level, format) = try environment.logSettings(level: logLevel, format: logFormat, defaultLevel: "info")
        let port = try environment.integer("metrics-port", metricsPort, default: 0)
        guard (0...65535).contains(port) else {
            throw ValidationError("\(text("metrics-port", metricsPort.map(String.init), "0").valueLabel): use 0 (off) or a port number")
        }
        // First, so that a refused property is named where it was set (-X or TRACKPIPE_X*).
        if !validated {
            try KafkaPropertyArguments.check(pairs) { () throws(KafkaConfigProblem) in try config.checkKafkaProperties() }
        }
        do {
            try config.validate()
        } catch {
            throw ValidationError("\(error)")
        }
        config.clientId = PipelineConfig.defaultClientId(host: Self.hostName())
        if !validated { try environment.checkOverriddenValues { _ = try resolve($0, validated: true) } }
        return ResolvedRun(config: config, metricsPort: port, logLevel: level, logFormat: format, allowsLostInput: allowsLostInput)
    }

    /// Configuration errors are found before anything starts, and shown with `run`'s usage
    /// and exit code 64.
    func validate() throws {
        _ = try resolve()
    }

    func run() throws {
        // `validate()` has checked these settings in this process.
        let resolved = try resolve(validated: true)
        let (redactor, logger) = LogSetup.bootstrap(
            level: resolved.logLevel, format: resolved.logFormat, properties: resolved.config.kafkaProperties, commandLine: kafkaProperties)
        let summary = WorkerRun.execute(resolved, logger: logger) { error in
            FileHandle.standardError.write(Data("trackpipe run: \(redactor.redact("\(error)"))\n".utf8))
        }
        print(summary.text)
        if resolved.config.timings { print(summary.timelineText) }
        if let refusal = Self.lostInputRefusal(summary, resolved: resolved) {
            FileHandle.standardError.write(Data("trackpipe run: \(refusal)\n".utf8))
            throw ExitCode(Self.lostInputExitCode)
        }
    }

    /// A bounded run that could not read all of its input: EX_DATAERR, distinct from a failure
    /// (1) and a configuration error (64), so that a Job can refuse to retry it (a retry would
    /// start from the commits past the loss and exit 0).
    static let lostInputExitCode: Int32 = 65

    /// Why a finished run must not exit 0: an `--until-end` run that lost input (records the log
    /// start passed before the group read them), unless `--allow-lost-input`. The live worker
    /// keeps running on lost input (it is logged, counted and alerted on). Offsets never
    /// delivered that the log still holds are no reason.
    static func lostInputRefusal(_ summary: PipelineSummary, resolved: ResolvedRun) -> String? {
        guard resolved.config.untilEnd, !resolved.allowsLostInput else { return nil }
        let lost = summary.stages.flatMap(\.lostInput)
        guard !lost.isEmpty else { return nil }
        let total = lost.reduce(Int64(0)) { $0 + $1.count }
        // Behind the shuffle the hits may still be in the input topic, which outlives the
        // repartition topic's retention; records lost from the input are gone from Kafka.
        let shuffled = summary.stages.count > 1 && summary.stages.contains { $0.stage == "aggregate" && !$0.lostInput.isEmpty }
        let fromInput =
            shuffled
            ? "; the repartition topic's may still be in the input topic: recount the windows they fall in from it while it holds them (trackpipe replay over their time range)"
            : ""
        return
            "\(total) offsets were lost: retention (or the broker's size limit) deleted them before this run read them: \(PipelineSummary.describe(lost)). Reading the same topic again cannot bring them back. The windows were written and committed without their hits. Recount those hits from wherever they are still kept (an archive, the collectors or the source system)\(fromInput); or pass --allow-lost-input (TRACKPIPE_ALLOW_LOST_INPUT=true) to accept the loss and exit 0"
    }

    /// This machine's name (a pod's name on Kubernetes), for the default `client.id`.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(cString: buffer)
    }
}

struct ResolvedRun: Sendable {
    var config: PipelineConfig
    var metricsPort: Int
    var logLevel: Logger.Level
    var logFormat: LogFormat
    /// `--allow-lost-input`: a bounded run exits 0 even with lost input.
    var allowsLostInput = false
}

/// Wires a pipeline to signals and the metrics endpoint; shared by `run` and `demo`.
enum WorkerRun {
    /// Returns the summary of a run that ended well; on failure, `report`s the error and exits
    /// with its code (`PipelineError.exitCode`).
    static func execute(_ resolved: ResolvedRun, logger: Logger, report: (any Error) -> Void) -> PipelineSummary {
        // Made only where the endpoint serves them: the registry and each stage's counters
        // cost about a millisecond of start-up per stage (callgrind), for nobody to read.
        let metrics = resolved.metricsPort > 0 ? PipelineMetrics() : nil
        let pipeline = Pipeline(config: resolved.config, logger: logger, metrics: metrics)
        // The health checks and the failure text quote errors; scrubbed like a log line.
        let redactor = SecretRedactor(properties: resolved.config.kafkaProperties)
        var endpoint: MetricsEndpoint?
        // SIGTERM or SIGINT also ends the wait for a last scrape after a failure.
        let signalled = LockedValue(false)
        let signals = ShutdownSignal.install { name in
            logger.notice("\(name) received: finishing the batch in flight, committing safe offsets")
            signalled.set(true)
            pipeline.requestStop()
        }
        defer { withExtendedLifetime(signals) {} }
        if let metrics {
            do {
                endpoint = try MetricsEndpoint(
                    port: resolved.metricsPort, metrics: metrics, pipeline: pipeline, redactor: redactor, logger: logger)
            } catch {
                // A port that cannot be had is a start-up configuration error like any other
                // (exit 64), found before any broker is contacted.
                report(error)
                exit(64)
            }
            logger.info("metrics on :\(resolved.metricsPort)/metrics, health checks on :\(resolved.metricsPort)/health/live and /health/ready")
        }
        do {
            let summary = try pipeline.run()
            endpoint?.stop()
            return summary
        } catch {
            // Exit here, with the Kafka clients still alive: after some fatal errors (a topic
            // deleted under a consumer, measured with librdkafka 2.0.2) destroying a client
            // waits forever for one of its threads. Nothing is pending: a failed run commits
            // nothing further, and what was sent has been flushed or is abandoned on purpose.
            report(error)
            // A setting to change (one that would mix results with what the group or the output
            // holds, among others) is found at start-up, before anything is written: it exits
            // at once, with nothing for a last scrape to show.
            let code = PipelineError.exitCode(for: error)
            if code != 1 { exit(code) }
            endpoint?.lingerAfterFailure(redactor.redact("\(error)"), logger: logger) { signalled.get() }
            exit(code)
        }
    }
}
