import CRdKafka
import Kafka

/// Faults the tests inject into the embedded broker: request errors and missing topics.
/// Brokers down, leaders and latency too (the soak benchmark uses them); the commands that start
/// an embedded broker (`demo`, `embedded-broker`) never fail one.
extension EmbeddedBroker {
    /// Broker ids run from 1 to `brokerCount`.
    public func setBrokerDown(_ brokerId: Int32) throws {
        let err = rd_kafka_mock_broker_set_down(cluster, brokerId)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "taking embedded broker \(brokerId) down") }
    }

    public func setBrokerUp(_ brokerId: Int32) throws {
        let err = rd_kafka_mock_broker_set_up(cluster, brokerId)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "bringing embedded broker \(brokerId) up") }
    }

    /// Makes `brokerId` the leader of a partition, so that a test can slow down or stop the
    /// brokers of some topics only.
    public func setLeader(_ topic: String, partition: Int32, brokerId: Int32) throws {
        let err = rd_kafka_mock_partition_set_leader(cluster, topic, partition, brokerId)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "moving the leader of \(topic)[\(partition)] to embedded broker \(brokerId)") }
    }

    /// Adds a round-trip delay to every request a broker answers.
    public func setRoundTripTime(_ brokerId: Int32, milliseconds: Int) throws {
        let err = rd_kafka_mock_broker_set_rtt(cluster, brokerId, Int32(milliseconds))
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "setting the round-trip time of embedded broker \(brokerId)") }
    }

    /// The next requests of this API fail with these error codes, one each, in order.
    public func failNextRequests(_ api: KafkaAPI, with errors: [Int32]) {
        let codes = errors.map { rd_kafka_resp_err_t(rawValue: $0) }
        codes.withUnsafeBufferPointer {
            rd_kafka_mock_push_request_errors_array(cluster, api.rawValue, $0.count, $0.baseAddress)
        }
    }

    /// The next `count` requests of this API that broker `brokerId` receives fail with `error`.
    /// Unlike `failNextRequests`, the errors are the broker's own and how many are left can be
    /// read back (`injectedErrorsLeft`): a test learns from it that a request has arrived.
    public func failNextRequests(_ api: KafkaAPI, on brokerId: Int32, with error: Int32, count: Int) throws {
        for _ in 0..<count {
            let err = rd_kafka_resp_err_t(rawValue: pushBrokerError(brokerId, api: api, error: error))
            if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "injecting errors into embedded broker \(brokerId)") }
        }
    }

    /// How many errors injected with `failNextRequests(_:on:with:count:)` broker `brokerId` has
    /// still to answer with.
    public func injectedErrorsLeft(_ api: KafkaAPI, on brokerId: Int32) throws -> Int {
        var count = 0
        let err = rd_kafka_mock_broker_error_stack_cnt(cluster, brokerId, api.rawValue, &count)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "reading the injected errors of embedded broker \(brokerId)") }
        return count
    }

    /// Makes the cluster answer metadata requests for `topic` with this error (e.g.
    /// `KafkaErrorCode.unknownTopicOrPartition`), as a real cluster does for a missing topic;
    /// librdkafka 2.0.2's embedded broker otherwise creates unknown topics on first use.
    public func setTopicError(_ topic: String, code: Int32) {
        rd_kafka_mock_topic_set_error(cluster, topic, rd_kafka_resp_err_t(rawValue: code))
    }

    /// Makes `brokerId` the coordinator of consumer group `group` (else the cluster picks one by
    /// hashing the name), so that a test can take other brokers down without the group.
    public func setGroupCoordinator(_ group: String, brokerId: Int32) throws {
        let err = rd_kafka_mock_coordinator_set(cluster, "group", group, brokerId)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.from(err, "making embedded broker \(brokerId) the coordinator of \(group)") }
    }

    public func clearRequestErrors(_ api: KafkaAPI) {
        rd_kafka_mock_clear_request_errors(cluster, api.rawValue)
    }
}

/// Kafka protocol request kinds, for fault injection (numbers from the Kafka protocol guide).
public enum KafkaAPI: Int16, Sendable {
    case produce = 0
    case fetch = 1
    case listOffsets = 2
    case metadata = 3
    case offsetCommit = 8
    case offsetFetch = 9
    case findCoordinator = 10
    case joinGroup = 11
    case heartbeat = 12
    case leaveGroup = 13
    case syncGroup = 14
}

/// Kafka error codes used in fault injection (protocol numbers).
public enum KafkaErrorCode {
    public static let unknownTopicOrPartition: Int32 = 3
    public static let notLeaderForPartition: Int32 = 6
    public static let requestTimedOut: Int32 = 7
    public static let offsetMetadataTooLarge: Int32 = 12
    public static let notCoordinator: Int32 = 16
    public static let rebalanceInProgress: Int32 = 27
    public static let notEnoughReplicas: Int32 = 19
}
