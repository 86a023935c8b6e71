import CRdKafka
import Kafka

extension KafkaError {
    /// The librdkafka errors the simulated cluster raises where librdkafka would, so that the
    /// runner meets them exactly as it does in production.
    enum Named: Sendable {
        case illegalGeneration, rebalanceInProgress, timedOut, messageTooLarge, unknownTopic, transport, topicAuthorizationFailed
        case unsupportedFeature, offsetOutOfRange, notLeader

        var code: rd_kafka_resp_err_t {
            switch self {
            case .illegalGeneration: RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION
            case .rebalanceInProgress: RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS
            case .timedOut: RD_KAFKA_RESP_ERR__TIMED_OUT
            case .messageTooLarge: RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE
            case .unknownTopic: RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
            case .transport: RD_KAFKA_RESP_ERR__TRANSPORT
            case .topicAuthorizationFailed: RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
            case .unsupportedFeature: RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE
            case .offsetOutOfRange: RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE
            case .notLeader: RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION
            }
        }
    }

    /// The error librdkafka reports for `named`, in `context`.
    init(_ named: Named, _ context: String) {
        self = KafkaError.from(named.code, context)
    }
}
