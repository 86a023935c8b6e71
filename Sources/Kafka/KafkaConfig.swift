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

    /// Properties whose values must never reach a log or an error message: every key that
    /// names a password or a secret (`sasl.password`, `ssl.key.password`,
    /// `ssl.keystore.password`, `sasl.oauthbearer.client.secret`, and whatever a plugin or a
    /// later librdkafka adds), and the others librdkafka itself redacts in its configuration
    /// dump (`ssl.key.pem`, `ssl.key.location`, `sasl.oauthbearer.config`). Matched on parts of
    /// the name, case-insensitively, so that a misspelt or unknown secret is hidden too.
    ///
    /// Searched as UTF-8 bytes: Foundation's `String.contains` (CFStringFind) cost about 4,000
    /// instructions a search, 4.4 M of an empty `run --until-end`'s 86 M (callgrind), as every
    /// client's configuration is screened (`firstRange(of:)` on the UTF-8 view cost five times
    /// more). The parts are ASCII, which UTF-8 never uses inside
    /// another character, so the bytes match where the characters do.
    public static func isSecret(_ name: String) -> Bool {
        let lowered = Array(name.lowercased().utf8)
        return secretNameParts.contains { part in
            lowered.count >= part.count && (0...lowered.count - part.count).contains { lowered[$0..<$0 + part.count].elementsEqual(part) }
        }
    }

    private static let secretNameParts = ["pass", "secret", "pwd", "token", "credential", "ssl.key", "private", "oauthbearer.config"].map { Array($0.utf8) }

    /// Scrubs the values of this configuration's secret properties out of free text.
    var redactor: SecretRedactor {
        SecretRedactor(properties: properties.map { (key: $0.0, value: $0.1) })
    }

    /// Builds a native configuration; a wrong property or value fails here, naming it, before any
    /// connection is attempted. The caller owns the result until it hands it to `rd_kafka_new`.
    func makeNative() throws -> OpaquePointer {
        try native(unallocated: KafkaError(.clientCreation, "librdkafka could not allocate a configuration")) { name, value, unknown, reason in
            // The value of an unknown property does not help fix its name and may be a secret
            // under a misspelt key; a known secret's value is never shown either.
            let shown = unknown || Self.isSecret(name) ? "(value hidden)" : value
            return KafkaError(
                .invalidProperty(name: name, value: shown),
                "Kafka property \(name)=\(shown): \(unknown ? "unknown property" : "invalid value"): \(reason). "
                    + "Check the name and value against librdkafka's CONFIGURATION.md (librdkafka \(Librdkafka.version))."
            )
        }
    }

    /// A native configuration with every property set on it, or `refused`'s error for the first
    /// one librdkafka refuses: given its name, its value, whether librdkafka knows no property of
    /// that name, and librdkafka's reason, redacted (it may quote the value: "Invalid value
    /// \"…\" for …").
    func native<Failure: Error>(
        unallocated: Failure, refused: (_ name: String, _ value: String, _ unknown: Bool, _ reason: String) -> Failure
    ) throws(Failure) -> OpaquePointer {
        guard let conf = rd_kafka_conf_new() else { throw unallocated }
        var errstr = [CChar](repeating: 0, count: 512)
        for (name, value) in properties {
            let result = rd_kafka_conf_set(conf, name, value, &errstr, errstr.count)
            guard result == RD_KAFKA_CONF_OK else {
                rd_kafka_conf_destroy(conf)
                throw refused(name, value, result == RD_KAFKA_CONF_UNKNOWN, redactor.redact(string(fromErrorBuffer: errstr)))
            }
        }
        return conf
    }
}

/// What `print`, string interpolation and `dump` show of a configuration: the properties in
/// order, each secret one's value as `[redacted]`. A configuration dumped into a log while
/// debugging must not carry the SASL password with it.
extension KafkaConfig: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        properties.map { "\($0.0)=\(Self.isSecret($0.0) ? SecretRedactor.placeholder : $0.1)" }.joined(separator: " ")
    }

    public var debugDescription: String { "KafkaConfig(\(description))" }

    public var customMirror: Mirror {
        Mirror(
            self,
            children: properties.map { (label: $0.0 as String?, value: (Self.isSecret($0.0) ? SecretRedactor.placeholder : $0.1) as Any) },
            displayStyle: .struct)
    }
}
