import Kafka

/// What `print`, string interpolation and `String(reflecting:)` show of a configuration:
/// every field as Swift would show it, except the librdkafka properties, whose secret values
/// read `[redacted]`. Swift's default description would print the SASL password of anyone
/// who logs a configuration while debugging.
extension PipelineConfig: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { redactedDescription(of: self, named: "PipelineConfig") }
    public var debugDescription: String { description }

    /// The `-X` properties in effect, secrets redacted, for the start-up log line.
    var kafkaPropertiesText: String { KafkaConfig(kafkaProperties).description }
}

extension Replay.Config: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { redactedDescription(of: self, named: "Replay.Config") }
    public var debugDescription: String { description }
}

/// `Name(field: value, …)` from the value's mirror, with `kafkaProperties` shown through
/// `KafkaConfig`'s redacting description. The mirror keeps the list of fields in step with the
/// type, so a field added later is shown without touching this.
private func redactedDescription(of value: Any, named name: String) -> String {
    let fields = Mirror(reflecting: value).children.map { child in
        let label = child.label ?? "_"
        if let properties = child.value as? [String: String], label == "kafkaProperties" {
            return "\(label): [\(KafkaConfig(properties).description)]"
        }
        return "\(label): \(String(reflecting: child.value))"
    }
    return "\(name)(\(fields.joined(separator: ", ")))"
}
