import ArgumentParser
import Foundation

/// `-X key=value`, the way librdkafka users write properties (kcat, kafkacat); one reading of
/// it for every command, so a pair that `run` accepts is accepted by `generate` too.
enum KafkaPropertyArguments {
    /// Later pairs win over earlier ones (environment first, then the command line).
    static func parse(_ pairs: [String]) throws -> [String: String] {
        var properties: [String: String] = [:]
        for pair in pairs {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw ValidationError("-X \(pair): expected key=value, for example -X security.protocol=SASL_SSL")
            }
            properties[String(parts[0]).trimmingCharacters(in: .whitespaces)] = String(parts[1])
        }
        return properties
    }
}
