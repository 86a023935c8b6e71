import ArgumentParser
import Foundation
import Kafka

/// `-X key=value`, the way librdkafka users write properties (kcat, kafkacat); one reading of
/// it for every command, so a pair that `run` accepts is accepted by `generate` too.
enum KafkaPropertyArguments {
    /// One `key=value` and where it was written.
    struct Pair: Sendable, Equatable {
        enum Origin: Sendable, Equatable {
            case commandLine
            /// The variable's name. Its value is never repeated in an error: it may be a secret.
            case environment(String)
        }

        var text: String
        var origin: Origin

        init(_ text: String, origin: Origin = .commandLine) {
            self.text = text
            self.origin = origin
        }
    }

    /// Later pairs win over earlier ones (environment first, then the command line).
    static func parse(_ pairs: [String]) throws -> [String: String] {
        try parse(pairs: pairs.map { Pair($0) })
    }

    static func parse(pairs: [Pair]) throws -> [String: String] {
        var properties: [String: String] = [:]
        for pair in pairs {
            let parts = pair.text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = parts[0].trimmingCharacters(in: .whitespaces)
            guard parts.count == 2, !key.isEmpty else {
                switch pair.origin {
                case .commandLine where KafkaConfig.isSecret(pair.text):
                    // `-X "sasl.password hunter2"`: a secret behind a typo is still a secret.
                    throw ValidationError(
                        "-X: expected key=value, for example -X security.protocol=SASL_SSL (the argument is not shown: it names a secret)")
                case .commandLine:
                    throw ValidationError("-X \(pair.text): expected key=value, for example -X security.protocol=SASL_SSL")
                case .environment(let variable):
                    throw ValidationError(
                        "\(variable): expected key=value, for example security.protocol=SASL_SSL (the value is not shown: it may be a secret)")
                }
            }
            guard !parts[1].isEmpty else {
                // librdkafka would take "" as the value, or fail with a message about the property
                // rather than the empty value; most likely a secret that was not filled in.
                switch pair.origin {
                case .commandLine:
                    throw ValidationError("-X \(pair.text): the value is empty; write -X \(key)=VALUE, or leave the property out to keep librdkafka's default")
                case .environment(let variable):
                    throw ValidationError("\(variable): the value of \(key) is empty; set \(key)=VALUE, or remove the variable to keep librdkafka's default")
                }
            }
            properties[key] = String(parts[1])
        }
        return properties
    }

    /// Runs `check` (librdkafka's checks of the configurations a command will build, see
    /// `KafkaConfig.check`) and turns its problem into a configuration error (exit 64) that says
    /// where each property involved was set: `-X linger.ms=abc`, or `TRACKPIPE_X_FOO (no.such)`,
    /// since an operator fixes a manifest's variable, not a property name. Values are shown only
    /// for command-line pairs whose key is neither secret nor unknown.
    static func check(_ pairs: [Pair], _ check: () throws(KafkaConfigProblem) -> Void) throws {
        do {
            try check()
        } catch {
            throw refusal(error, pairs: pairs)
        }
    }

    static func refusal(_ problem: KafkaConfigProblem, pairs: [Pair]) -> ValidationError {
        var last: [String: Pair] = [:]
        for pair in pairs {
            let parts = pair.text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            last[parts[0].trimmingCharacters(in: .whitespaces)] = pair
        }
        let sources = problem.properties.compactMap { key -> String? in
            guard let pair = last[key] else { return nil }
            switch pair.origin {
            case .commandLine:
                return problem.isUnknownProperty || KafkaConfig.isSecret(key) ? "-X \(key)=… (value not shown)" : "-X \(pair.text)"
            case .environment(let variable):
                return "\(variable) (\(key))"
            }
        }
        let prefix = sources.isEmpty ? "Kafka properties (trackpipe's own with -X, TRACKPIPE_X and TRACKPIPE_X_<ANY>)" : sources.joined(separator: ", ")
        return ValidationError("\(prefix): \(problem.reason)")
    }

    /// The keys of secret properties among the pairs typed on the command line: there, other
    /// users of the machine can read them (`ps`, `/proc/<pid>/cmdline`), so the commands warn.
    static func secretKeysOnCommandLine(_ pairs: [String]) -> [String] {
        pairs.compactMap { pair in
            let key = pair.split(separator: "=", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            return pair.contains("=") && KafkaConfig.isSecret(key) ? key : nil
        }
    }

    /// Every value that may be a secret, from the raw command line and the environment, before
    /// anything is parsed: the redactor for text trackpipe does not write itself, such as
    /// ArgumentParser's "Unexpected argument 'sasl.password=…'" when `-X` was forgotten.
    ///
    /// - A `key=value` argument (alone, after `-X`, or as `-Xkey=value`) whose key is secret.
    /// - A `TRACKPIPE_X` or `TRACKPIPE_X_<ANY>` pair whose key is secret.
    /// - The whole value of a `TRACKPIPE_X_<ANY>` variable that has no `=`: never valid, and most
    ///   likely the password itself written without its `sasl.password=` prefix.
    static func secretValues(arguments: [String], environment: [String: String]) -> [String] {
        var values: [String] = []
        // Both the value as written and trimmed: the environment's pairs are trimmed before
        // use, the command line's are not.
        func collect(_ pair: Substring) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, KafkaConfig.isSecret(parts[0].trimmingCharacters(in: .whitespaces)) else { return }
            values += [String(parts[1]), parts[1].trimmingCharacters(in: .whitespaces)]
        }
        for argument in arguments {
            var text = Substring(argument)
            if text.hasPrefix("-X") { text = text.dropFirst(2) }
            collect(text)
        }
        for (name, value) in environment where name == "TRACKPIPE_X" || name.hasPrefix("TRACKPIPE_X_") {
            if name != "TRACKPIPE_X" && !value.contains("=") {
                values.append(value.trimmingCharacters(in: .whitespaces))
                continue
            }
            for pair in value.split(whereSeparator: { $0 == ";" || $0 == "\n" }) { collect(pair) }
        }
        return values
    }
}
