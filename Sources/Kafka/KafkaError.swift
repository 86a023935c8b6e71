import CRdKafka

/// Every failure of the Kafka layer, carrying librdkafka's own error name so that a user can
/// search for it, and a sentence that says what to do about it.
public struct KafkaError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// A configuration property librdkafka does not know, or a value it refuses.
        case invalidProperty(name: String, value: String)
        /// librdkafka refused to create the client (usually a configuration conflict).
        case clientCreation
        /// A librdkafka call returned an error code.
        case librdkafka(code: Int32)
        /// The embedded broker could not be started or configured.
        case embeddedBroker
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The librdkafka error code, when the failure came from one.
    public var code: Int32? {
        if case .librdkafka(let code) = kind { return code }
        return nil
    }

    public var description: String { message }

    static func from(_ err: rd_kafka_resp_err_t, _ context: String) -> KafkaError {
        let name = String(cString: rd_kafka_err2name(err))
        let text = String(cString: rd_kafka_err2str(err))
        return KafkaError(.librdkafka(code: err.rawValue), "\(context): \(name): \(text)")
    }

    /// Takes ownership of an `rd_kafka_error_t` (destroys it) and turns it into a Swift error.
    static func consuming(_ error: OpaquePointer, _ context: String) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        let code = rd_kafka_error_code(error)
        let name = String(cString: rd_kafka_error_name(error))
        let text = String(cString: rd_kafka_error_string(error))
        return KafkaError(.librdkafka(code: code.rawValue), "\(context): \(name): \(text)")
    }
}

extension rd_kafka_resp_err_t {
    var isError: Bool { self != RD_KAFKA_RESP_ERR_NO_ERROR }
}

extension KafkaError {
    /// The topic does not exist on the cluster (or this client may not see it).
    public var isUnknownTopic: Bool {
        code == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC.rawValue || code == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART.rawValue
    }
}
