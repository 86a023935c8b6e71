import ArgumentParser
import Foundation
import Kafka
import Logging
import Pipeline
import Runner
import TrackingDomain
import Windowing

/// `trackpipe replay`: a backfill of an event-time range, with progress, never touching a
/// live worker's consumer group.
struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Recount the windows of an event-time range from the input topic, without a consumer group.",
        discussion: """
            Emits exactly the windows whose start lies in [--from, --to), with the same lateness rules as a live run: reading starts --retention before --from (where the broker can search offsets by time; otherwise at the beginning) and stops at the end offsets seen at the start. One process reads every partition, so the counts are exact whatever the input's keys. No consumer group is joined and nothing is committed.

            Dead letters are sent only when --dlq-topic (or TRACKPIPE_DLQ_TOPIC) is given; the summary counts them either way. --output-file PATH (or - for standard output) writes the aggregate records as JSON Lines instead of producing them.

            Over a range, the summary's accepted, filtered, dead-lettered and emitted counts are what is about a window of the range, which is what is written (dead letters: a rejected message whose Kafka timestamp falls in the range, a too_late hit of a window in it); what was read for event time and lies outside the range is counted on its own line, outside range, and balanced with the rest.

            Progress and the summary always go to standard error (standard output carries only the records, with --output-file -): progress as a bar redrawn in place on a terminal, a plain line every 5 s otherwise. The summary has no committed line: a replay commits nothing. Every flag but --from, --to and --output-file also reads TRACKPIPE_<FLAG>, as for run, and a value there is checked even where the command line overrides it; any other TRACKPIPE_* variable is refused.

            Exit codes: 0 when the range is written; 1 when the replay stops on a failure; 64 for a configuration error, an output topic that holds windows of another size included (or whose size cannot be told, without --allow-unchecked-output), found before anything is written.
            """)

    @Option(parsing: .unconditional, help: "First window start to emit: RFC 3339 on a window boundary, or 'beginning'.") var from = "beginning"
    @Option(parsing: .unconditional, help: "End of the range (exclusive): RFC 3339 on a window boundary, or 'end'.") var to = "end"
    @Option(help: "Kafka bootstrap servers. (env TRACKPIPE_BROKERS, default localhost:9092)") var brokers: String?
    @Option(help: "Topic of raw tracking hits. (env TRACKPIPE_INPUT_TOPIC, default tracking-hits)") var inputTopic: String?
    @Option(help: "Topic for aggregate records; with several window sizes, one per size in the order of --window. (env TRACKPIPE_OUTPUT_TOPIC, default tracking-aggregates)") var outputTopic: String?
    @Option(help: "Write aggregate records as JSON Lines to this file ('-' for standard output) instead of a topic.") var outputFile: String?
    @Option(help: "Topic for dead letters; without it they are only counted. (env TRACKPIPE_DLQ_TOPIC)") var dlqTopic: String?
    @Option(parsing: .unconditional, help: "Tumbling window size, or several (1m,1h,1d); an output topic holding windows of another size is refused. (env TRACKPIPE_WINDOW, default 1m)") var window: String?
    @Option(parsing: .unconditional, help: "Wait this long after a window's end before emitting it; one value, or one per size of --window. (env TRACKPIPE_GRACE, default 10s)") var grace: String?
    @Option(parsing: .unconditional, help: "Keep emitted windows this long for late corrections. (env TRACKPIPE_RETENTION, default 1h)") var retention: String?
    @Option(parsing: .unconditional, help: "A partition quiet this long stops holding event time back. (env TRACKPIPE_IDLE_TIMEOUT, default 30s)") var idleTimeout: String?
    @Option(help: "\(RunCommand.emitHelp) One value, or one per size of --window. (env TRACKPIPE_EMIT, default changes)") var emit: String?
    @Option(parsing: .unconditional, help: "Dead-letter hits stamped more than this after their Kafka timestamp. (env TRACKPIPE_MAX_FUTURE_SKEW, default 1h)") var maxFutureSkew: String?
    @Option(parsing: .unconditional, help: "Dead-letter input records with more Kafka headers than this, as too_many_headers. (env TRACKPIPE_MAX_HEADERS, default 64)")
    var maxHeaders: Int?
    @Option(help: "\(RunCommand.shardsHelp) (env TRACKPIPE_SHARDS, default: number of cores)") var shards: Int?
    @Flag(help: "\(RunCommand.allowUncheckedOutputHelp) (env TRACKPIPE_ALLOW_UNCHECKED_OUTPUT)")
    var allowUncheckedOutput = false
    @Option(name: .customShort("X"), help: ArgumentHelp("A librdkafka property key=value (repeatable).", valueName: "key=value"))
    var kafkaProperties: [String] = []
    @Option(help: "trace, debug, info, notice, warning, error, critical. (env TRACKPIPE_LOG_LEVEL, default warning)") var logLevel: String?
    @Option(help: "text or json. (env TRACKPIPE_LOG_FORMAT, default text)") var logFormat: String?

    /// The flags that read `TRACKPIPE_<FLAG>` (`-X`'s `TRACKPIPE_X` too).
    static let environmentFlags = [
        "brokers", "input-topic", "output-topic", "dlq-topic", "window", "grace", "retention", "idle-timeout", "emit", "max-future-skew", "max-headers", "shards",
        "allow-unchecked-output",
        "log-level", "log-format", "x",
    ]

    /// The settings as given, checked; `validated`: see `Environment.checkOverriddenValues`.
    func resolve(_ environment: Environment = Environment(), validated: Bool = false) throws -> (config: Replay.Config, outputFile: String?, logLevel: Logger.Level, logFormat: LogFormat) {
        try environment.refuseUnknownVariables()
        var config = Replay.Config()
        config.brokers = try environment.brokers(brokers)
        config.inputTopic = try environment.topic("input-topic", inputTopic, default: "tracking-hits")
        let output = environment.setting("output-topic", outputTopic, default: "tracking-aggregates")
        if outputFile != nil, output.source == .commandLine {
            throw ValidationError("--output-topic and --output-file: choose one place for the aggregate records")
        }
        config.deadLetterTopic = try environment.optionalTopic("dlq-topic", dlqTopic)
        let windows = try environment.windowConfig(window: window, grace: grace, emit: emit, retention: retention, idleTimeout: idleTimeout)
        config.window = windows.config
        config.output = .topics(try environment.outputTopics(outputTopic, givenOrder: windows.givenOrder))
        // Windows of every size that start in the range go out: its ends lie on the smallest's boundaries.
        let size = config.window.lengths[0]
        config.given[.window] = environment.setting("window", window, default: "1m")
        config.allowUncheckedOutput = try environment.switch("allow-unchecked-output", allowUncheckedOutput)
        config.maxFutureSkew = try environment.duration("max-future-skew", maxFutureSkew, default: "1h")
        config.limits.maxHeaders = try environment.maxHeaders(maxHeaders)
        config.shards = try environment.shards(shards)
        let pairs = environment.kafkaPropertyPairs() + kafkaProperties.map { KafkaPropertyArguments.Pair($0) }
        config.kafkaProperties = try KafkaPropertyArguments.parse(pairs: pairs)
        if !validated {
            try KafkaPropertyArguments.check(pairs) { () throws(KafkaConfigProblem) in try config.checkKafkaProperties() }
        }
        config.from = try Self.boundary("--from", from, keyword: "beginning", size: size)
        config.to = try Self.boundary("--to", to, keyword: "end", size: size)
        if let start = config.from, let end = config.to, end <= start {
            throw ValidationError(
                "--to \(to) is not after --from \(from): the range [from, to) would be empty; for one window write --to \(RFC3339.format(epochMillis: start + size))")
        }
        do {
            try config.validate()
        } catch {
            throw ValidationError("\(error)")
        }
        let (level, format) = try environment.logSettings(level: logLevel, format: logFormat, defaultLevel: "warning")
        if !validated { try environment.checkOverriddenValues { _ = try resolve($0, validated: true) } }
        return (config, outputFile, level, format)
    }

    /// An RFC 3339 time on a window boundary, or the keyword for an open end (nil).
    static func boundary(_ flag: String, _ text: String, keyword: String, size: Int64) throws -> Int64? {
        if text.lowercased() == keyword { return nil }
        guard let millis = RFC3339.parse(Array(text.utf8)) else {
            throw ValidationError(
                "\(flag) \(text): not a time; write an RFC 3339 time with a zone, like 2026-11-22T10:00:00Z, or '\(keyword)'")
        }
        let start = EventTimeMath.windowStart(of: millis, size: size)
        guard start == millis else {
            throw ValidationError(
                "\(flag) \(text) is not on a window boundary (windows of \(size / 1000) s start at multiples of the window size since the Unix epoch): use \(RFC3339.format(epochMillis: start)) or \(RFC3339.format(epochMillis: start + size))")
        }
        return millis
    }

    func validate() throws {
        _ = try resolve()
    }

    func run() throws {
        // `validate()` has checked these settings in this process.
        var resolved = try resolve(validated: true)
        let (redactor, logger) = LogSetup.bootstrap(
            level: resolved.logLevel, format: resolved.logFormat, properties: resolved.config.kafkaProperties, commandLine: kafkaProperties)
        do {
            if let path = resolved.outputFile { resolved.config.output = .lines(try LineWriter(path: path)) }
            let display = ProgressDisplay()
            let replay = Replay(config: resolved.config, logger: logger) { display.show($0) }
            let signals = ShutdownSignal.install { name in
                logger.notice("\(name) received: stopping the replay; the range is incomplete")
                replay.requestStop()
            }
            defer { withExtendedLifetime(signals) {} }
            let summary = try replay.run()
            display.finishLine()
            // The records may be on standard output: the summary goes with the progress.
            FileHandle.standardError.write(Data((summary.text + "\n").utf8))
        } catch {
            FileHandle.standardError.write(Data("trackpipe replay: \(redactor.redact("\(error)"))\n".utf8))
            throw ExitCode(PipelineError.exitCode(for: error))
        }
    }
}
