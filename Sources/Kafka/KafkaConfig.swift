import CRdKafka

/// librdkafka properties, passed through untouched so that every knob a user knows from
/// librdkafka's CONFIGURATION.md (security, tuning) works here by the same name.
public struct KafkaConfig: Sendable, Equatable {
    public private(set) var properties: [(String, String)] = []

    public init(_ properties: [String: String] = [:]) {
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) { self[key] = value }
    }

    public subscript(name: String) -> String? {
        get { properties.last(where: { $0.0 == name })?.1 }
        set {
            properties.removeAll { $0.0 == name }
            if let newValue { properties.append((name, newValue)) }
        }
    }

    /// Later properties win, so defaults can be laid down first and user flags on top.
    public func merging(_ other: KafkaConfig) -> KafkaConfig {
        var merged = self
        for (key, value) in other.properties { merged[key] = value }
        return merged
    }

    public static func == (lhs: KafkaConfig, rhs: KafkaConfig) -> Bool {
        lhs.properties.elementsEqual(rhs.properties, by: { $0 == $1 })
    }

    /// Properties whose values must never reach a log or an error message.
    public static func isSecret(_ name: String) -> Bool {
        let lowered = name.lowercased()
        return ["pass", "secret", "pwd", "token", "credential", "ssl.key", "private"].contains { lowered.contains($0) }
    }

    /// Builds a native configuration; a wrong property or value fails here, naming it, before any
    /// connection is attempted. The caller owns the result until it hands it to `rd_kafka_new`.
    func makeNative() throws -> OpaquePointer {
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(.clientCreation, "librdkafka could not allocate a configuration")
        }
        var errstr = [CChar](repeating: 0, count: 512)
        for (name, value) in properties {
            let result = rd_kafka_conf_set(conf, name, value, &errstr, errstr.count)
            if result != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                let reason = string(fromErrorBuffer: errstr)
                let what = result == RD_KAFKA_CONF_UNKNOWN ? "unknown property" : "invalid value"
                // The value of an unknown property does not help fix its name and may be a
                // secret under a misspelt key; a known secret's value is never shown either.
                let shown = result == RD_KAFKA_CONF_UNKNOWN || Self.isSecret(name) ? "(value hidden)" : value
                throw KafkaError(
                    .invalidProperty(name: name, value: shown),
                    "Kafka property \(name)=\(shown): \(what): \(reason). "
                        + "Check the name and value against librdkafka's CONFIGURATION.md (librdkafka \(Librdkafka.version))."
                )
            }
        }
        return conf
    }
}
