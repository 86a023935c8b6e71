import CRdKafkaMock
import Kafka

extension EmbeddedBroker {
    /// One error on broker `brokerId`'s own stack for `api`; librdkafka's error code (0: done).
    func pushBrokerError(_ brokerId: Int32, api: KafkaAPI, error: Int32) -> Int32 {
        trackpipe_mock_broker_push_error(UnsafeMutableRawPointer(cluster), brokerId, api.rawValue, error, 0)
    }
}
