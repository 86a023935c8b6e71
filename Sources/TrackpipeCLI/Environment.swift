import ArgumentParser
import Windowing
import Foundation
import Logging
import TrackingDomain

/// Flags fall back to `TRACKPIPE_<FLAG>` environment variables (a container's natural way to
/// be configured), then to their defaults. Precedence: command line, environment, default.
///
/// The typed readers (`duration`, `integer`, `switch`) name where a bad value came from: the flag
/// for a value typed on the command line, the variable for one set by a deployment. A message
/// about `--grace` would send an operator looking for a flag that their manifest never passes.
struct Environment: Sendable {
    var variables: [String: String]

    init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    /// `--input-topic` -> `TRACKPIPE_INPUT_TOPIC`.
    static func variableName(forFlag flag: String) -> String {
        "TRACKPIPE_" + flag.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    // MARK: Variables nobody reads

    /// Every `TRACKPIPE_<FLAG>` some command reads. A deployment gives every command one
    /// environment (the worker's ConfigMap is also what `kubectl exec … trackpipe status`
    /// sees), so a variable is known if any command reads it, not only the one running.
    static var knownVariables: Set<String> {
        Set((RunCommand.environmentFlags + ReplayCommand.environmentFlags + StatusCommand.environmentFlags).map(variableName(forFlag:)))
    }

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
        let closest = known.sorted().min { Self.editDistance(name, $0) < Self.editDistance(name, $1) }!
        return
            "unknown environment variable \(name): did you mean \(closest)? Every TRACKPIPE_<FLAG> variable sets a flag (trackpipe run --help lists them); a librdkafka property goes in TRACKPIPE_X or TRACKPIPE_X_<ANY> (\"key=value\"). Rename or remove \(name)"
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

    func value(forFlag flag: String) -> String? {
        variables[Self.variableName(forFlag: flag)].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A setting's text and where it came from.
    struct Setting: Sendable, Equatable {
        enum Origin: Sendable, Equatable {
            case commandLine, environment, defaultValue
        }

        var flag: String
        var text: String
        var origin: Origin

        /// How an error message names the value: `--grace -5s`, `TRACKPIPE_GRACE=-5s`, or
        /// `--grace (default 10s)`.
        var label: String {
            switch origin {
            case .commandLine: "--\(flag) \(text)"
            case .environment: "\(Environment.variableName(forFlag: flag))=\(text)"
            case .defaultValue: "--\(flag) (default \(text))"
            }
        }
    }

    /// The command line wins over `TRACKPIPE_<FLAG>`, which wins over `fallback`.
    func setting(_ flag: String, _ commandLine: String?, default fallback: String) -> Setting {
        if let commandLine { return Setting(flag: flag, text: commandLine, origin: .commandLine) }
        if let text = value(forFlag: flag) { return Setting(flag: flag, text: text, origin: .environment) }
        return Setting(flag: flag, text: fallback, origin: .defaultValue)
    }

    /// `--emit` (`TRACKPIPE_EMIT`): when window records go out.
    func emission(_ commandLine: String?) throws -> WindowEmission {
        let setting = setting("emit", commandLine, default: "changes")
        guard let emission = WindowEmission(rawValue: setting.text) else {
            throw ValidationError("\(setting.label): say changes (every change of a window, the default) or final (one record per window, once nothing can change it)")
        }
        return emission
    }

    /// A duration setting in milliseconds. Errors read `TRACKPIPE_GRACE=-5s: durations cannot
    /// be negative; …` or `--grace -5s: …`.
    func duration(_ flag: String, _ commandLine: String?, default fallback: String) throws -> Int64 {
        let setting = setting(flag, commandLine, default: fallback)
        do {
            return try DurationText.milliseconds(setting.text)
        } catch {
            throw ValidationError("\(setting.label): \(error.reason)")
        }
    }

    /// A whole-number setting. Errors read `TRACKPIPE_SHARDS=many: expected a whole number`.
    func integer(_ flag: String, _ commandLine: Int?, default fallback: Int) throws -> Int {
        if let commandLine { return commandLine }
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
        if commandLine { return true }
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
    /// each secret (a SASL password) can come from its own Kubernetes Secret key.
    func kafkaProperties() -> [String] {
        kafkaPropertyPairs().map(\.text)
    }

    /// The same pairs with the variable each came from, so that an error names the variable
    /// (and never echoes its value, which may be a secret).
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
            throw ValidationError("\(levelSetting.label): use trace, debug, info, notice, warning, error or critical")
        }
        let formatSetting = setting("log-format", format, default: "text")
        guard let parsedFormat = LogFormat(rawValue: formatSetting.text.lowercased()) else {
            throw ValidationError("\(formatSetting.label): use text or json")
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
                "\(setting("max-headers", commandLine.map(String.init), default: "\(fallback)").label): must be 0 or more, the number of Kafka headers an input record may carry (default \(fallback))")
        }
        return value
    }

    /// The bootstrap servers: every comma-separated address must be non-empty.
    func brokers(_ commandLine: String?) throws -> String {
        let brokers = setting("brokers", commandLine, default: "localhost:9092")
        let addresses = brokers.text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !addresses.isEmpty, addresses.allSatisfy({ !$0.isEmpty }) else {
            throw ValidationError("\(brokers.label): give at least one bootstrap address, like kafka-1:9092,kafka-2:9092")
        }
        return brokers.text
    }
}
