import ArgumentParser
import Foundation

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
}
