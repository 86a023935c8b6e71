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
}
