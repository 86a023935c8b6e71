import ArgumentParser
import Foundation
import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner

/// `trackpipe status`: where a worker's consumer groups stand, checkpoints decoded, without
/// joining the groups.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a worker's consumer groups per partition: committed and end offsets, lag, and the decoded checkpoints.",
        discussion: """
            For the normalize group (<group>, on the input topic) and the aggregate group (<group>-aggregate, on the repartition topic): per partition the committed offset, the end offset and the lag between them, and the window sizes the group counts as its commits record them; for the aggregate group also the checkpoint stored with each commit: its format, the evicted horizon (RFC 3339), the processed mark (an offset), the messages after it, and the number of duplicate floors (source partitions whose re-sent events are dropped).

            Both groups commit what they processed, every --commit-interval: their lag is the real backlog, plus up to one interval. The aggregate stage keeps its windows in the state topic (<group>-state), from which a restarted worker reads them back, so it commits at its processed mark ("processed" equals "committed"); "unprocessed" is its backlog as of the last commit.

            Nothing is joined or committed: safe against a live worker. Flags take TRACKPIPE_<FLAG> like run's (TRACKPIPE_BROKERS, TRACKPIPE_GROUP, TRACKPIPE_INPUT_TOPIC, TRACKPIPE_REPARTITION_TOPIC, TRACKPIPE_X...), so the worker's own environment can be used as it is: its other TRACKPIPE_* variables are ignored, and one that no command reads is refused, naming the closest known one. A value of these flags' variables is checked even where the command line overrides it; --json has no variable.

            Exit codes: 0 with the status; 1 for an unknown group, a group that is not trackpipe's, or Kafka out of reach (the message says which); 64 for a usage error.
            """)

    @Option(help: "Kafka bootstrap servers. (env TRACKPIPE_BROKERS, default localhost:9092)") var brokers: String?
    @Option(help: "The worker's --group; the aggregate stage's is <group>-aggregate. (env TRACKPIPE_GROUP, default trackpipe)") var group: String?
    @Option(help: "The worker's input topic. (env TRACKPIPE_INPUT_TOPIC, default tracking-hits)") var inputTopic: String?
    @Option(help: "The worker's repartition topic. (env TRACKPIPE_REPARTITION_TOPIC, default <group>-repartition)") var repartitionTopic: String?
    @Option(name: .customShort("X"), help: ArgumentHelp("A librdkafka property key=value (repeatable), for security settings.", valueName: "key=value"))
    var kafkaProperties: [String] = []
    @Flag(help: "Print one JSON document instead of tables, for scripts.") var json = false
    @Option(help: "trace, debug, info, notice, warning, error, critical. (env TRACKPIPE_LOG_LEVEL, default warning)") var logLevel: String?

    /// The flags that read `TRACKPIPE_<FLAG>` (`-X`'s `TRACKPIPE_X` too; the log format has no
    /// flag here, but follows `TRACKPIPE_LOG_FORMAT` like the worker's logs).
    static let environmentFlags = ["brokers", "group", "input-topic", "repartition-topic", "log-level", "log-format", "x"]

    /// The settings as given, checked; `validated`: see `Environment.checkOverriddenValues`.
    func resolve(_ environment: Environment = Environment(), validated: Bool = false) throws -> (config: PipelineConfig, logLevel: Logger.Level, logFormat: LogFormat) {
        try environment.refuseUnknownVariables()
        var config = PipelineConfig()
        config.brokers = try environment.brokers(brokers)
        let groupSetting = environment.setting("group", group, default: "trackpipe")
        config.group = groupSetting.text
        config.inputTopic = try environment.topic("input-topic", inputTopic, default: "tracking-hits")
        config.repartitionTopic = try environment.optionalTopic("repartition-topic", repartitionTopic)
        if config.repartitionTopic == nil, let problem = Environment.topicNameProblem(config.effectiveRepartitionTopic) {
            throw ValidationError(
                "\(groupSetting.valueLabel): the --repartition-topic it names, \(config.effectiveRepartitionTopic), is \(problem); change the group or give --repartition-topic")
        }
        let pairs = environment.kafkaPropertyPairs() + kafkaProperties.map { KafkaPropertyArguments.Pair($0) }
        config.kafkaProperties = try KafkaPropertyArguments.parse(pairs: pairs)
        if !validated {
            try KafkaPropertyArguments.check(pairs) { () throws(KafkaConfigProblem) in try config.checkKafkaProperties() }
        }
        let (level, format) = try environment.logSettings(level: logLevel, format: nil, defaultLevel: "warning")
        if !validated { try environment.checkOverriddenValues { _ = try resolve($0, validated: true) } }
        return (config, level, format)
    }

    func validate() throws {
        _ = try resolve()
    }

    func run() throws {
        // `validate()` has checked these settings in this process.
        let (config, level, format) = try resolve(validated: true)
        let (redactor, logger) = LogSetup.bootstrap(level: level, format: format, properties: config.kafkaProperties)
        let status: WorkerStatus
        do {
            status = try WorkerStatus.read(config: config, logger: logger)
        } catch {
            FileHandle.standardError.write(Data("trackpipe status: \(redactor.redact("\(error)"))\n".utf8))
            throw ExitCode(1)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(status), as: UTF8.self))
        } else {
            print(Self.text(status), terminator: "")
        }
    }

    // MARK: The tables

    /// One column of a group's table.
    struct Column: Sendable {
        var header: String
        var value: @Sendable (PartitionStatus) -> String
    }

    static let offsetColumns: [Column] = [
        Column(header: "partition") { "\($0.partition)" },
        Column(header: "committed") { $0.committed.map(String.init) ?? "-" },
        Column(header: "end") { "\($0.end)" },
        Column(header: "lag") { "\($0.lag)" },
    ]

    /// The decoded checkpoint, shown for a group whose commits carry one. A new field of the
    /// checkpoint is one more entry here (and one more property of `CheckpointStatus`).
    static let checkpointColumns: [Column] = [
        Column(header: "checkpoint") { $0.checkpoint?.format ?? ($0.foreignMetadata == nil ? "-" : "foreign") },
        Column(header: "evicted before") { $0.checkpoint.map { $0.evictedBefore ?? "none" } ?? "-" },
        Column(header: "processed") { $0.checkpoint.map { "\($0.processedMark)" } ?? "-" },
        Column(header: "unprocessed") { $0.checkpoint.map { "\($0.unprocessed)" } ?? "-" },
        Column(header: "duplicate floors") { $0.checkpoint.map { "\($0.duplicateFloors)" } ?? "-" },
        Column(header: "inputs") { $0.checkpoint.map { "\($0.inputIncarnations)" } ?? "-" },
        Column(header: "changelog") { $0.checkpoint.map { String($0.changelog) } ?? "-" },
    ]

    /// What the normalize stage committed with each input partition.
    static let sourceColumns: [Column] = [
        Column(header: "epoch") { $0.source.map { "\($0.epoch)" } ?? "-" },
        Column(header: "event time") { $0.source.map { $0.progress ?? "none" } ?? "-" },
    ]

    static func text(_ status: WorkerStatus) -> String {
        var out = "trackpipe status of \(status.brokers) at \(status.readAt)\n"
        for group in status.groups {
            let withCheckpoints = group.partitions.contains { $0.checkpoint != nil }
            var title = "\ngroup \(group.group) (\(group.stage) stage) on \(group.topic): lag \(group.lag) over \(group.partitions.count) partitions"
            if withCheckpoints {
                let unprocessed = group.partitions.reduce(Int64(0)) { $0 + ($1.checkpoint?.unprocessed ?? $1.lag) }
                title += ", \(unprocessed) unprocessed"
            }
            if let windows = group.windows { title += ", windows \(windows.joined(separator: ","))" }
            out += title + "\n"
            let withSources = group.partitions.contains { $0.source != nil }
            out += table(
                group.partitions,
                columns: offsetColumns + (withCheckpoints ? checkpointColumns : []) + (withSources ? sourceColumns : []))
        }
        return out
    }

    /// Columns separated by two spaces; numbers (and dashes) right-aligned, text left-aligned.
    static func table(_ rows: [PartitionStatus], columns: [Column]) -> String {
        let cells = rows.map { row in columns.map { $0.value(row) } }
        let widths = columns.indices.map { index in
            ([columns[index].header] + cells.map { $0[index] }).map(\.count).max() ?? 0
        }
        let numeric = columns.indices.map { index in
            cells.allSatisfy { Int64($0[index]) != nil || $0[index] == "-" }
        }
        func line(_ values: [String]) -> String {
            values.indices.map { index in
                let pad = String(repeating: " ", count: widths[index] - values[index].count)
                return numeric[index] ? pad + values[index] : values[index] + pad
            }.joined(separator: "  ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression) + "\n"
        }
        return ([line(columns.map(\.header))] + cells.map(line)).joined()
    }
}
