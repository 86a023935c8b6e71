import Foundation
import Kafka
import Testing

@Suite("topic admin on the embedded broker")
struct TopicAdminTests {
    @Test("a cluster that cannot describe topic configs (the mock has no controller) leaves max.message.bytes unknown")
    func maxMessageBytesUnknown() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("described", partitions: 1)
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        #expect(admin.maxMessageBytes(of: ["described"], timeoutMilliseconds: 1_000) == [:])
    }
}
