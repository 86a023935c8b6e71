import CRdKafka
import Testing
@testable import Kafka

/// librdkafka can refuse to take the partitions a group decided (for example one it already
/// holds); the consumer must say so, not carry on as if
/// it owned them.
@Suite("Assignment refusals")
struct AssignmentTests {
    @Test("an assignment librdkafka refuses comes back as an error naming what was refused; an allowed one does not")
    func refusedAssignmentIsReported() throws {
        let consumer = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": "127.0.0.1:1", "group.id": "refusal", "log_level": "0"]))
        let partitions = [TopicPartition(topic: "hits", partition: 0)]
        // A plain assignment outside any group protocol is allowed.
        #expect(consumer.applyAssignment(partitions, cooperative: false) == nil)
        // Taking a partition already held is refused.
        let refused = consumer.applyAssignment(partitions, cooperative: true)
        #expect(refused != nil)
        #expect(refused?.description.contains("taking the assigned partitions") == true, "\(String(describing: refused))")
    }

    /// librdkafka cannot say which protocol a client without a group uses (the same nil it
    /// answered on 2.16 in a closing consumer's last revocation, which crashed the worker):
    /// the configured assignors decide.
    @Test(
        "without an answer from librdkafka, the protocol is cooperative exactly when every configured assignor is",
        arguments: [("cooperative-sticky", true), ("range,roundrobin", false), ("roundrobin", false)])
    func protocolWithoutAGroup(strategy: String, cooperative: Bool) throws {
        let config = KafkaConfig(["bootstrap.servers": "127.0.0.1:1", "log_level": "0", "partition.assignment.strategy": strategy])
        let (client, context) = try makeNativeClient(type: RD_KAFKA_CONSUMER, config: config, context: ClientContext(logger: .init(label: "test")))
        defer {
            rd_kafka_destroy(client)
            context.release()
        }
        #expect(rd_kafka_rebalance_protocol(client) == nil, "a client without group.id has no group to ask")
        #expect(KafkaConsumer.rebalanceIsCooperative(client) == cooperative)
    }
}
