import ArgumentParser
import Windowing
import Foundation
import Logging
import Pipeline
import Runner
import TrackingDomain

/// Flags fall back to `TRACKPIPE_<FLAG>` environment variables (a container's natural way to
/// be configured), then to their defaults. Precedence: command line, environment, default.
///
/// The typed readers (`duration`, `integer`, `switch`) name where a bad value came from: the flag
/// for a value typed on the command line, the variable for one set by a deployment. A message
/// about `--grace` would send an operator looking for a flag that their manifest never passes.
struct Environment: Sendable {
    var variables: [String: String]
    /// While `checkOverriddenValues` reads the settings a second time, as the environment gives
    /// them: the flags whose variable the command line overrides, noted as they are read.
    private var overridden: LockedValue<[String]>? = nil

    init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    /// `--input-topic` -> `TRACKPIPE_INPUT_TOPIC`. Without Foundation's `replacingOccurrences`,
    /// which cost 3.2 M instructions of an empty `run --until-end`'s 80 M (callgrind): every
    /// setting is looked up by its variable's name, in each pass of `resolve`.
    static func variableName(forFlag flag: String) -> String {
        "TRACKPIPE_" + String(flag.uppercased().map { $0 == "-" ? "_" : $0 })
    }

    // MARK: Variables nobody reads

    /// Every `TRACKPIPE_<FLAG>` some command reads. A deployment gives every command one
    /// environment (the worker's ConfigMap is also what `kubectl exec … trackpipe status`
    /// sees), so a variable is known if any command reads it, not only the one running.
    /// Made once: every `resolve` pass asks (1.4 M instructions each, callgrind).
    static let knownVariables: Set<String> =
        Set((RunCommand.environmentFlags + ReplayCommand.environmentFlags + StatusCommand.environmentFlags).map(variableName(forFlag:)))

    /// Read by the test suite and the scripts, never by a command; a test passes its own
    /// environment on to the binaries it starts, so these must not stop them.
    static let toolVariables: Set<String> = [
        "TRACKPIPE_BINARY", "TRACKPIPE_EXPECTED_LIBRDKAFKA", "TRACKPIPE_UPDATE_GOLDEN", "TRACKPIPE_DEBUG_CGRP",
    ]

    /// The first `TRACKPIPE_*` variable (by name) that no command reads, with the known one
    /// closest to it by edit distance: a misspelt `TRACKPIPE_BROKER` would otherwise be
    /// ignored, and the worker would quietly run against localhost:9092. `TRACKPIPE_X_<ANY>`
    /// stays free-form (its name only orders the librdkafka properties). The value is never
    /// quoted: it may be a secret.
    func unknownVariableProblem() -> String? {
        let known = Self.knownVariables
        let unknown = variables.keys.filter {
            $0.hasPrefix("TRACKPIPE_") && !$0.hasPrefix("TRACKPIPE_X_") && !known.contains($0) && !Self.toolVariables.contains($0)
        }
        guard let name = unknown.min() else { return nil }
        if let problem = Self.commandLineOnlyProblem(name) { return problem }
        let closest = known.sorted().min { Self.editDistance(name, $0) < Self.editDistance(name, $1) }
        return
            "unknown environment variable \(name):\(closest.map { " did you mean \($0)?" } ?? "") Every TRACKPIPE_<FLAG> variable sets a flag (trackpipe run --help lists them); a librdkafka property goes in TRACKPIPE_X or TRACKPIPE_X_<ANY> (\"key=value\"). Rename or remove \(name)"
    }

    /// Levenshtein distance: the fewest single-character insertions, deletions and
    /// substitutions that turn one name into the other.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    /// Throws the configuration error for a variable no command reads (exit 64, with usage).
    func refuseUnknownVariables() throws {
        if let problem = unknownVariableProblem() { throw ValidationError(problem) }
    }

    /// The flags no variable sets, by command: a `TRACKPIPE_<FLAG>` named after one of them is
    /// told that the flag has none, instead of being pointed at the variable it looks most like
    /// (`TRACKPIPE_TIMINGS` is not a misspelt `TRACKPIPE_EMIT`). HelpTextTests holds the table,
    /// with the `environmentFlags` lists, to every flag of every command.
    static let commandLineOnlyFlags: KeyValuePairs<String, [String]> = [
        "run": ["timings"],
        "replay": ["from", "to", "output-file"],
        "status": ["json"],
        "generate": ["count", "seed", "deliveries", "start", "span", "rate", "stale", "brokers", "topic"],
        "demo": ["count", "deliveries", "window", "seed", "partitions"],
        "embedded-broker": ["broker-count", "topic", "partitions", "log-level"],
    ]

    /// For a variable named after flags that no variable sets: which flags, of which commands.
    static func commandLineOnlyProblem(_ name: String) -> String? {
        let flag = name.dropFirst("TRACKPIPE_".count).lowercased().replacingOccurrences(of: "_", with: "-")
        let commands = commandLineOnlyFlags.filter { $0.value.contains(flag) }.map { "trackpipe \($0.key)" }
        guard !commands.isEmpty else { return nil }
        return
            "environment variable \(name): --\(flag) (\(commands.joined(separator: ", "))) has no environment variable; it is set only on the command line, as \(commands[0]) --\(flag)\(flag == "timings" || flag == "json" ? "" : " …"). Remove \(name)"
    }

    func value(forFlag flag: String) -> String? {
        variables[Self.variableName(forFlag: flag)].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The command line wins over `TRACKPIPE_<FLAG>`, which wins over `fallback`.
    /// The setting's text and where it came from, which its `valueLabel` names in an error message.
    func setting(_ flag: String, _ commandLine: String?, default fallback: String) -> GivenSetting {
        if let commandLine, !readsOverriddenValue(flag) { return GivenSetting(flag: flag, text: commandLine, source: .commandLine) }
        if let text = value(forFlag: flag) { return GivenSetting(flag: flag, text: text, source: .environment) }
        return GivenSetting(flag: flag, text: fallback, source: .defaultValue)
    }

    /// A setting without a default: the command line's, else `TRACKPIPE_<FLAG>`'s, else nil.
    func optional(_ flag: String, _ commandLine: String?) -> String? {
        let setting = setting(flag, commandLine, default: "")
        return setting.source == .defaultValue ? nil : setting.text
    }

    // MARK: Values the command line overrides

    /// Checks the environment's values even where the command line overrides them: `resolve`
    /// (a command's own reading of its settings) runs again on the settings as the environment
    /// gives them, the command line filling in only what the environment leaves unset, and what
    /// it refuses there is refused. A `TRACKPIPE_WINDOW=banana` in a deployment's environment
    /// would otherwise pass unnoticed as long as every command line says `--window`, and take
    /// effect the day one does not. A refusal names the variable (every message names a
    /// setting as `valueLabel` gives it) and says that the command line overrides it.
    ///
    /// A command's `resolve(_:validated:)` passes `validated: true` here, and so does its `run()`
    /// (ArgumentParser has called `validate()`, the full check, on the same command in this
    /// process): neither checks the Kafka properties again, which are the same in every pass,
    /// nor this pass again. That check creates and destroys three librdkafka clients (threads
    /// and all); it ran four times a run (12 throw-away clients, 4 M instructions of 90 M).
    func checkOverriddenValues(_ resolve: (Environment) throws -> Void) throws {
        guard overridden == nil else { return }
        var asSet = self
        let noted = LockedValue<[String]>([])
        asSet.overridden = noted
        do {
            try resolve(asSet)
        } catch let error as ValidationError {
            let flags = Array(Set(noted.get())).sorted()
            guard !flags.isEmpty else { throw error }
            // The variables the message names, or, if it names none of them, all that were read.
            let named = flags.filter { error.message.contains(Self.variableName(forFlag: $0) + "=") }
            let involved = named.isEmpty ? flags : named
            let variables = involved.map(Self.variableName(forFlag:)).joined(separator: ", ")
            let one = involved.count == 1
            throw ValidationError(
                "\(error.message) (\(variables) in the environment: \(involved.map { "--" + $0 }.joined(separator: ", ")) on the command line \(one ? "overrides it" : "override them"), but a value in the environment is checked all the same; correct \(one ? "it" : "them") or unset \(one ? "it" : "them"))"
            )
        }
    }

    /// Whether this reading takes `flag` from the environment although the command line gives
    /// it too (noting it), as `checkOverriddenValues` reads the settings.
    private func readsOverriddenValue(_ flag: String) -> Bool {
        guard let overridden, value(forFlag: flag) != nil else { return false }
        overridden.update { $0.append(flag) }
        return true
    }

    /// `--emit` (`TRACKPIPE_EMIT`): when window records go out; one value for every size, or one
    /// per size in the order of `--window`.
    func emissions(_ commandLine: String?, sizes: Int) throws -> [WindowEmission] {
        let setting = setting("emit", commandLine, default: "changes")
        return try Self.list(setting, count: sizes).map { text in
            guard let emission = WindowEmission(rawValue: text) else {
                throw ValidationError("\(setting.valueLabel): say changes (every change of a window, the default) or final (one record per window, once nothing can change it), once for every size or once per size")
            }
            return emission
        }
    }

    /// A setting that takes one value for every window size or one per size (`--grace 10s,1m`):
    /// its values, one per size.
    static func list(_ setting: GivenSetting, count: Int) throws -> [String] {
        let values = items(setting)
        if values.count == 1 { return Array(repeating: values[0], count: count) }
        guard values.count == count else {
            throw ValidationError("\(setting.valueLabel): give one value for every window size, or one per size of --window (\(count))")
        }
        return values
    }

    /// A setting's comma-separated values (`--window 1m,1h`), each trimmed; an empty one stays,
    /// for its own check to refuse.
    static func items(_ setting: GivenSetting) -> [String] {
        setting.text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// A duration setting in milliseconds. Errors read `TRACKPIPE_GRACE=-5s: durations cannot
    /// be negative; …` or `--grace -5s: …`.
    func duration(_ flag: String, _ commandLine: String?, default fallback: String) throws -> Int64 {
        let setting = setting(flag, commandLine, default: fallback)
        return try Self.milliseconds(setting.text, of: setting)
    }

    /// `text`, one of `setting`'s values, in milliseconds; an error names the setting as given.
    static func milliseconds(_ text: String, of setting: GivenSetting) throws -> Int64 {
        do {
            return try DurationText.milliseconds(text)
        } catch {
            throw ValidationError("\(setting.valueLabel): \(error.reason)")
        }
    }

    /// A whole-number setting. Errors read `TRACKPIPE_SHARDS=many: expected a whole number`.
    func integer(_ flag: String, _ commandLine: Int?, default fallback: Int) throws -> Int {
        if let commandLine, !readsOverriddenValue(flag) { return commandLine }
        guard let text = value(forFlag: flag) else { return fallback }
        guard let number = Int(text.trimmingCharacters(in: .whitespaces)) else {
            throw ValidationError("\(Self.variableName(forFlag: flag))=\(text): expected a whole number")
        }
        return number
    }

    /// An on/off flag: set on the command line, or `TRACKPIPE_<FLAG>` = true/false, 1/0, yes/no,
    /// on/off (any case). Anything else is refused rather than read as false, because a typo in
    /// `TRACKPIPE_UNTIL_END=ture` would otherwise run an unbounded worker instead of a backfill.
    func `switch`(_ flag: String, _ commandLine: Bool) throws -> Bool {
        if commandLine, !readsOverriddenValue(flag) { return true }
        guard let text = value(forFlag: flag) else { return false }
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default:
            throw ValidationError("\(Self.variableName(forFlag: flag))=\(text): expected true or false (or 1/0, yes/no, on/off)")
        }
    }

    /// librdkafka properties from the environment: `TRACKPIPE_X` holds `key=value` pairs
    /// separated by `;` or newlines, and every `TRACKPIPE_X_<ANY>` holds one pair — so that
    /// each secret (a SASL password) can come from its own Kubernetes Secret key. Each pair
    /// comes with the variable it came from, so that an error names the variable (and never
    /// echoes its value, which may be a secret).
    func kafkaPropertyPairs() -> [KafkaPropertyArguments.Pair] {
        var pairs: [KafkaPropertyArguments.Pair] = []
        if let list = variables["TRACKPIPE_X"] {
            pairs += list.split(whereSeparator: { $0 == ";" || $0 == "\n" }).map {
                KafkaPropertyArguments.Pair(String($0), origin: .environment("TRACKPIPE_X"))
            }
        }
        for (name, value) in variables.sorted(by: { $0.key < $1.key }) where name.hasPrefix("TRACKPIPE_X_") {
            pairs.append(KafkaPropertyArguments.Pair(value, origin: .environment(name)))
        }
        return pairs.map { KafkaPropertyArguments.Pair($0.text.trimmingCharacters(in: .whitespaces), origin: $0.origin) }
            .filter { !$0.text.isEmpty }
    }

    /// The log level and format, each from its flag, `TRACKPIPE_LOG_LEVEL`/`_FORMAT` or the default.
    func logSettings(level: String?, format: String?, defaultLevel: String) throws -> (Logger.Level, LogFormat) {
        let levelSetting = setting("log-level", level, default: defaultLevel)
        guard let parsedLevel = Logger.Level(rawValue: levelSetting.text.lowercased()) else {
            throw ValidationError("\(levelSetting.valueLabel): use trace, debug, info, notice, warning, error or critical")
        }
        let formatSetting = setting("log-format", format, default: "text")
        guard let parsedFormat = LogFormat(rawValue: formatSetting.text.lowercased()) else {
            throw ValidationError("\(formatSetting.valueLabel): use text or json")
        }
        return (parsedLevel, parsedFormat)
    }

    /// `--max-headers`: how many Kafka headers an input record may carry before it is
    /// dead-lettered as `too_many_headers`; 0 or more (0 turns away every record with one).
    func maxHeaders(_ commandLine: Int?) throws -> Int {
        let fallback = NormalizerLimits().maxHeaders
        let value = try integer("max-headers", commandLine, default: fallback)
        guard value >= 0 else {
            throw ValidationError(
                "\(setting("max-headers", commandLine.map(String.init), default: "\(fallback)").valueLabel): must be 0 or more, the number of Kafka headers an input record may carry (default \(fallback))")
        }
        return value
    }

    /// The window settings of run and replay (`--window`, `--grace`, `--emit`, `--retention`,
    /// `--idle-timeout`), with run's `--max-entries` (as read, and as given on the command line);
    /// a combination `WindowConfig` refuses names every setting involved as it was given.
    /// `--window` may name several sizes (`1m,1h,1d`), and `--grace` and `--emit` take one value
    /// for all or one per size; returned with the sizes in the order `--window` gives them.
    func windowConfig(
        window: String?, grace: String?, emit: String?, retention: String?, idleTimeout: String?,
        maxEntries: (cap: Int, given: Int?) = (20_000_000, nil)
    ) throws -> (config: WindowConfig, givenOrder: [Int64]) {
        let windowSetting = setting("window", window, default: "1m")
        let sizes = try Self.items(windowSetting).map { try Self.milliseconds($0, of: windowSetting) }
        let graceSetting = setting("grace", grace, default: "10s")
        let graces = try Self.list(graceSetting, count: sizes.count).map { try Self.milliseconds($0, of: graceSetting) }
        let emissions = try emissions(emit, sizes: sizes.count)
        let windows = sizes.indices.map { WindowSize(size: sizes[$0], grace: graces[$0], emission: emissions[$0]) }
        let retentionMillis = try duration("retention", retention, default: "1h")
        let idle = try duration("idle-timeout", idleTimeout, default: "30s")
        if let problem = WindowConfig.problem(sizes: windows, retention: retentionMillis, idleTimeout: idle, maxEntries: maxEntries.cap) {
            let given = ["window": window, "grace": grace, "retention": retention, "idle-timeout": idleTimeout, "max-entries": maxEntries.given.map(String.init)]
            // The settings the problem is about, with their defaults.
            let involved: [(flag: String, fallback: String)] =
                switch problem {
                case _ where problem.contains("window size"): [("window", "1m")]
                case _ where problem.contains("named once"): [("window", "1m")]
                case _ where problem.contains("grace period must not"): [("grace", "10s")]
                case _ where problem.contains("retention"): [("retention", "1h"), ("grace", "10s")]
                case _ where problem.contains("idle timeout"): [("idle-timeout", "30s")]
                default: [("max-entries", "20000000")]
                }
            throw ValidationError("\(involved.map { setting($0.flag, given[$0.flag] ?? nil, default: $0.fallback).valueLabel }.joined(separator: ", ")): \(problem)")
        }
        return (WindowConfig(sizes: windows, retention: retentionMillis, idleTimeout: idle, maxEntries: maxEntries.cap), sizes)
    }

    /// `--shards`: 1 to `RunCommand.maxShards`, by default the number of cores.
    func shards(_ commandLine: Int?) throws -> Int {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let shards = try integer("shards", commandLine, default: cores)
        guard (1...RunCommand.maxShards).contains(shards) else {
            throw ValidationError(
                "\(setting("shards", commandLine.map(String.init), default: "").valueLabel): use 1 to \(RunCommand.maxShards); the number of cores (\(cores)) is usually best")
        }
        return shards
    }

    /// A topic setting, which must be a name Kafka accepts: a typo there would otherwise show
    /// only as a topic the cluster cannot find or create.
    func topic(_ flag: String, _ commandLine: String?, default fallback: String) throws -> String {
        let topic = setting(flag, commandLine, default: fallback)
        if let problem = Self.topicNameProblem(topic.text) { throw ValidationError("\(topic.valueLabel): \(problem)") }
        return topic.text
    }

    /// `--output-topic`: a topic per window size, in the order `--window` gives the sizes
    /// (`givenOrder`); returned in the order of the sizes, ascending, as `PipelineConfig` keeps them.
    func outputTopics(_ commandLine: String?, givenOrder: [Int64]) throws -> [String] {
        let topics = setting("output-topic", commandLine, default: "tracking-aggregates")
        let names = Self.items(topics)
        for name in names {
            if let problem = Self.topicNameProblem(name) { throw ValidationError("\(topics.valueLabel): \(names.count == 1 ? "" : "\(name) is ")\(problem)") }
        }
        if let problem = WindowSizeCheck.outputTopicsProblem(names, sizes: givenOrder) { throw ValidationError("\(topics.valueLabel): \(problem)") }
        return zip(givenOrder, names).sorted { $0.0 < $1.0 }.map(\.1)
    }

    /// A topic setting without a default (nil when neither the command line nor the
    /// environment gives one), checked like `topic`.
    func optionalTopic(_ flag: String, _ commandLine: String?) throws -> String? {
        guard let name = optional(flag, commandLine) else { return nil }
        return try topic(flag, commandLine, default: name)
    }

    /// What is wrong with a topic name, by Kafka's rule (`PipelineConfig.isTopicName`).
    static func topicNameProblem(_ name: String) -> String? {
        PipelineConfig.isTopicName(name) ? nil : PipelineConfig.topicNameProblem
    }

    /// The bootstrap servers: every comma-separated address must be non-empty.
    func brokers(_ commandLine: String?) throws -> String {
        let brokers = setting("brokers", commandLine, default: "localhost:9092")
        let addresses = brokers.text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !addresses.isEmpty, addresses.allSatisfy({ !$0.isEmpty }) else {
            throw ValidationError("\(brokers.valueLabel): give at least one bootstrap address, like kafka-1:9092,kafka-2:9092")
        }
        return brokers.text
    }
}

extension GivenSetting {
    /// How an error message about a value names it: `--grace -5s`, `TRACKPIPE_GRACE=-5s`, or
    /// `--grace (default 10s)`. Unlike `label`, whose empty text on the command line is a switch,
    /// an empty value typed there shows as one: `--brokers ''` reads `--brokers `.
    var valueLabel: String { source == .commandLine ? "--\(flag) \(text)" : label }
}
