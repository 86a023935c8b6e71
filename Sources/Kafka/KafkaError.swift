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
        /// Memory for librdkafka to own could not be had (`malloc` returned NULL): fatal.
        case outOfMemory
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

    /// `NAME: text`: librdkafka's name of the code, which a user can search for, then what is
    /// said of it (`detail`, else librdkafka's own words for the code).
    static func named(_ err: rd_kafka_resp_err_t, _ detail: String? = nil) -> String {
        "\(string(from: rd_kafka_err2name(err), or: "error \(err.rawValue)")): \(detail ?? string(from: rd_kafka_err2str(err), or: ""))"
    }

    package static func from(_ err: rd_kafka_resp_err_t, _ context: String, detail: String? = nil) -> KafkaError {
        KafkaError(.librdkafka(code: err.rawValue), "\(context): \(named(err, detail))")
    }

    /// Takes ownership of an `rd_kafka_error_t` (destroys it) and turns it into a Swift error.
    static func consuming(_ error: OpaquePointer, _ context: String) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        // rd_kafka_error_name is the code's name (rd_kafka_err2name) in librdkafka.
        return from(rd_kafka_error_code(error), context, detail: string(from: rd_kafka_error_string(error), or: ""))
    }
}

extension rd_kafka_resp_err_t {
    var isError: Bool { self != RD_KAFKA_RESP_ERR_NO_ERROR }
}

extension KafkaError {
    /// A call that waits for librdkafka's threads gave up waiting: the work may still happen,
    /// and asking again is safe for idempotent requests (a seek to the same offset).
    public var isTimedOut: Bool { code == RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue }

    /// The topic does not exist on the cluster (or this client may not see it).
    ///
    /// librdkafka reports a topic deleted under a consumer either way: as an unknown topic, or,
    /// when the metadata refresh lands first, as each assigned partition being "no longer
    /// available". Partitions never go away otherwise (Kafka cannot shrink a topic), so both mean
    /// the topic is gone.
    public var isUnknownTopic: Bool {
        code == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC.rawValue || code == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART.rawValue
            || code == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION.rawValue
    }

    /// Whether waiting can fix it: a worker stops on `fatal` (naming the cause, with a non-zero
    /// exit), and rides out `transient` (a warning and a counter) because librdkafka retries.
    public enum Severity: String, Sendable {
        /// Retrying cannot help: permissions, a cluster too old, a producer fenced or broken.
        case fatal
        /// Connections, leaders and timeouts: librdkafka reconnects and retries by itself.
        case transient
        /// Neither: the caller decides from the context.
        case other
    }

    public var severity: Severity {
        if kind == .outOfMemory { return .fatal }
        guard let code else { return .other }
        switch rd_kafka_resp_err_t(rawValue: code) {
        case RD_KAFKA_RESP_ERR__FATAL, RD_KAFKA_RESP_ERR__AUTHENTICATION, RD_KAFKA_RESP_ERR__SSL,
            RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
            RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, RD_KAFKA_RESP_ERR_UNSUPPORTED_SASL_MECHANISM,
            RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION, RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE,
            RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT, RD_KAFKA_RESP_ERR_INVALID_CONFIG,
            RD_KAFKA_RESP_ERR_PRODUCER_FENCED, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
            RD_KAFKA_RESP_ERR__INCONSISTENT, RD_KAFKA_RESP_ERR__INVALID_ARG:
            return .fatal
        case RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__RESOLVE,
            RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
            RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH, RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
            RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR, RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED,
            RD_KAFKA_RESP_ERR__WAIT_COORD, RD_KAFKA_RESP_ERR__NODE_UPDATE, RD_KAFKA_RESP_ERR__PARTIAL:
            return .transient
        default:
            return .other
        }
    }

    /// The record is larger than the producer's `message.max.bytes`, or than the topic's
    /// `max.message.bytes` (the broker's answer): a failure of that one record.
    public var isRecordTooLarge: Bool {
        code == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue || code == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE.rawValue
    }

    /// The group coordinator refused a request of this member's generation: the group is
    /// rebalancing, or has already moved on without it.
    public var isStaleGeneration: Bool {
        guard let code else { return false }
        switch rd_kafka_resp_err_t(rawValue: code) {
        case RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION, RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS:
            return true
        default:
            return false
        }
    }

    /// What an operator should do about a fatal error, in one sentence.
    public var remedy: String {
        guard let code else { return "" }
        switch rd_kafka_resp_err_t(rawValue: code) {
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
            RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
            return "This client is not allowed to use a topic or group it needs: grant its principal Read on the input topic and the groups, Write on the output, dead-letter and repartition topics (see docs/deploy.md)."
        case RD_KAFKA_RESP_ERR__AUTHENTICATION, RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED, RD_KAFKA_RESP_ERR__SSL,
            RD_KAFKA_RESP_ERR_UNSUPPORTED_SASL_MECHANISM:
            return "The cluster refused this client's credentials: check -X security.protocol, sasl.* and ssl.* (see docs/deploy.md)."
        case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION, RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE, RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
            return "The broker does not speak a protocol version trackpipe needs: use Kafka 2.4 or newer (cooperative rebalancing), or set -X broker.version.fallback for an old cluster."
        default:
            return "See the error name in librdkafka's documentation."
        }
    }
}
