import Foundation
import Kafka
import Testing

@Suite("topic admin on the embedded broker")
struct TopicAdminTests {
    @Test("a cluster that cannot describe topic configs (the mock waits for a controller until the timeout) leaves max.message.bytes unknown")
    func maxMessageBytesUnknown() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("described", partitions: 1)
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        #expect(admin.maxMessageBytes(of: ["described"], timeoutMilliseconds: 1_000) == [:])
    }

    /// Measured on 2.0.2 and on 2.16 (scripts/compat.sh): "_TIMED_OUT: Failed while waiting for
    /// controller", after the request's timeout.
    @Test("librdkafka's mock cluster does not answer DescribeConfigs: every topic asked about comes back undescribed, with the reason")
    func topicConfigsUndescribed() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("state", partitions: 2)
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let answer = admin.topicConfigs(["state", "repartition"], timeoutMilliseconds: 2_000)
        #expect(answer.described.isEmpty)
        #expect(Set(answer.undescribed.keys) == ["state", "repartition"])
        #expect(answer.undescribed["state"].map { !$0.isEmpty } == true, "\(answer.undescribed)")
    }
}
