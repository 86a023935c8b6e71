import CRdKafka
import Foundation

/// What kind of client a configuration is for: librdkafka checks some properties only when a
/// client of that kind is created (`fetch.max.bytes` against `message.max.bytes` for a
/// consumer, the SASL mechanism's own settings for both).
public enum KafkaClientRole: Sendable {
    case producer, consumer
}

/// A property that librdkafka would refuse, found before any client exists: what is wrong and
/// what to set. Never carries a value, which may be a secret.
public struct KafkaConfigProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The properties the problem is about, as they were set; the first is the one to look at
    /// (the misspelt one, the one with the bad value, the `security.protocol` that needs a
    /// mechanism). Empty when librdkafka's reason names none of the configuration's properties.
    public var properties: [String]
    /// What is wrong and what to do.
    public var reason: String
    /// librdkafka knows no property of that name: its value may be a secret under a misspelt
    /// key, so an error shows no value.
    public var isUnknownProperty: Bool

    public init(properties: [String], reason: String, isUnknownProperty: Bool = false) {
        self.properties = properties
        self.reason = reason
        self.isUnknownProperty = isUnknownProperty
    }

    public var description: String {
        properties.isEmpty ? "Kafka properties: \(reason)" : "Kafka property \(properties[0]): \(reason)"
    }
}

extension KafkaConfig {
    /// The mechanisms that authenticate with `sasl.username` and `sasl.password`.
    static let passwordMechanisms: Set<String> = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

    /// File properties librdkafka opens when the client is created (with TLS in use), checked
    /// here so that a wrong path says which property holds it.
    static let tlsFiles = ["ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location", "ssl.crl.location"]

    /// Checks the configuration as librdkafka will when a client of `role` is created, without
    /// contacting any broker: each property is set on a throwaway native configuration (names
    /// and value syntax, `linger.ms=abc`), the SASL and TLS combinations librdkafka would
    /// report in its own terms are checked by name ("Invalid sasl.kerberos.kinit.cmd value" for a
    /// missing mechanism), and then a client is created with no bootstrap servers and destroyed
    /// at once, which runs librdkafka's remaining checks (the same ones `rd_kafka_new` runs for
    /// the real client) while it has no broker to connect to.
    ///
    /// Why up front: the worker creates its clients one after another, and one that talks to the
    /// cluster (the topic lookup) comes before the producer; a value only the producer reads
    /// would otherwise surface after a broker timeout, blamed on the broker.
    public func check(as role: KafkaClientRole) throws(KafkaConfigProblem) {
        try checkSecurityCombinations()
        var offline = self
        offline["bootstrap.servers"] = nil
        offline["metadata.broker.list"] = nil
        let unallocated = KafkaConfigProblem(properties: [], reason: "librdkafka could not allocate a configuration")
        let conf = try offline.native(unallocated: unallocated) { name, _, unknown, said in
            guard !unknown else {
                return KafkaConfigProblem(
                    properties: [name],
                    reason:
                        "librdkafka \(Librdkafka.version) has no property named \(name): check the name against librdkafka's CONFIGURATION.md (a typo, or a property of a newer librdkafka)",
                    isUnknownProperty: true)
            }
            // librdkafka's reason names the property by its canonical name, which for an alias
            // (linger.ms) is another one.
            return KafkaConfigProblem(
                properties: [name],
                reason:
                    "librdkafka refuses the value (\(said.trimmingCharacters(in: .whitespacesAndNewlines))); see the property's type and range in librdkafka's CONFIGURATION.md")
        }
        var errstr = [CChar](repeating: 0, count: 512)
        // The check's own client logs nothing: a configuration warning belongs to the real one.
        rd_kafka_conf_set_log_cb(conf) { _, _, _, _ in }
        guard let client = rd_kafka_new(role == .consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            throw creationProblem(redactor.redact(string(fromErrorBuffer: errstr)))
        }
        rd_kafka_destroy(client)
    }

    /// Mistakes whose librdkafka message names the wrong thing, or that librdkafka only warns
    /// about while the connection then fails for reasons that point elsewhere.
    private func checkSecurityCombinations() throws(KafkaConfigProblem) {
        let protocolValue = (self["security.protocol"] ?? "plaintext").uppercased()
        let usesSASL = protocolValue.hasPrefix("SASL_")
        let usesTLS = protocolValue == "SSL" || protocolValue == "SASL_SSL"
        let mechanismKey = ["sasl.mechanism", "sasl.mechanisms"].last { self[$0] != nil }
        let mechanism = mechanismKey.flatMap { self[$0] }?.uppercased()
        if usesSASL, mechanism == nil {
            throw KafkaConfigProblem(
                properties: ["security.protocol"],
                reason:
                    "security.protocol=\(protocolValue) needs a SASL mechanism, and none is set: also set sasl.mechanism=SCRAM-SHA-512 (or PLAIN, SCRAM-SHA-256, OAUTHBEARER, or GSSAPI for Kerberos), as your cluster requires. Without one librdkafka assumes GSSAPI and asks for Kerberos settings"
            )
        }
        if let mechanismKey, let mechanism, !usesSASL {
            throw KafkaConfigProblem(
                properties: [mechanismKey, "security.protocol"],
                reason:
                    "\(mechanismKey)=\(mechanism) is set, but security.protocol is \(protocolValue), which does not use SASL: set security.protocol=SASL_SSL (or SASL_PLAINTEXT on a network you trust), or the credentials are never sent"
            )
        }
        if let mechanismKey, let mechanism, usesSASL, Self.passwordMechanisms.contains(mechanism) {
            let missing = ["sasl.username", "sasl.password"].filter { (self[$0] ?? "").isEmpty }
            if !missing.isEmpty {
                throw KafkaConfigProblem(
                    properties: [mechanismKey],
                    reason:
                        "\(mechanismKey)=\(mechanism) authenticates with sasl.username and sasl.password: set \(missing.joined(separator: " and ")) (a password through its own environment variable, TRACKPIPE_X_SASL_PASSWORD=\"sasl.password=…\", never on the command line)"
                )
            }
        }
        guard usesTLS else { return }
        for key in Self.tlsFiles {
            guard let path = self[key], !path.isEmpty, path != "probe" else { continue }
            if !FileManager.default.isReadableFile(atPath: path) {
                let shown = Self.isSecret(key) ? "the path given" : path
                let exists = FileManager.default.fileExists(atPath: path)
                throw KafkaConfigProblem(
                    properties: [key],
                    reason:
                        "\(shown) \(exists ? "cannot be read by this process (check its permissions)" : "does not exist"): \(key) must name a \(key == "ssl.ca.location" ? "file or directory" : "file") the worker can read; mount it there, or correct the path")
            }
        }
    }

    /// `rd_kafka_new`'s refusal, with the properties its text names picked out, and the one
    /// message that names a property the user never set explained.
    private func creationProblem(_ said: String) -> KafkaConfigProblem {
        let named = properties.map(\.0).compactMap { name in said.range(of: name).map { (name, at: $0.lowerBound) } }
            .sorted { $0.at < $1.at }.map(\.0)
        if said.contains("sasl.kerberos") {
            let mechanismKey = ["sasl.mechanism", "sasl.mechanisms"].last { self[$0] != nil } ?? "sasl.mechanism"
            return KafkaConfigProblem(
                properties: [mechanismKey] + named.filter { $0 != mechanismKey },
                reason:
                    "\(mechanismKey)=GSSAPI (Kerberos) needs sasl.kerberos.keytab and sasl.kerberos.principal (or a sasl.kerberos.kinit.cmd of your own): set them, or, for a user name and password, use sasl.mechanism=SCRAM-SHA-512 or PLAIN instead (librdkafka: \(said))"
            )
        }
        return KafkaConfigProblem(
            properties: named, reason: "librdkafka refuses these settings: \(said); see librdkafka's CONFIGURATION.md")
    }
}
