import Kafka
import Pipeline
import Testing
import TrackpipeTestSupport
import Windowing

/// The topic layout every pipeline test uses: `hits` in, `aggregates` and `dlq` out.
enum TestTopics {
    static func broker(inputPartitions: Int = 8, outputPartitions: Int = 4) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: inputPartitions)
        try broker.createTopic("aggregates", partitions: outputPartitions)
        try broker.createTopic("dlq", partitions: 2)
        return broker
    }

    /// The partitions of a worker's internal topics (`<group>-repartition`, `<group>-state`):
    /// what librdkafka 2.0.2's embedded broker gave a topic it created on first use.
    static let internalTopicPartitions = 4

    /// A worker on those topics. The embedded broker holds a rejoin for about the session
    /// timeout when the group has history; real brokers act on LeaveGroup at once, so tests
    /// shorten it.
    ///
    /// The worker's internal topics are created here (unless the test made them first, with
    /// counts of its own). The worker would create them itself on a real cluster; on the
    /// embedded broker, librdkafka 2.0.2 made them on the worker's first metadata request, while
    /// later versions (2.16 measured) create no topic on use and leave CreateTopics unanswered,
    /// so without this the run would fail on 2.16 after the admin request's timeout
    /// (docs/compatibility.md).
    static func config(_ broker: EmbeddedBroker, group: String, window: WindowConfig, shards: Int = 2) -> PipelineConfig {
        do {
            try createInternalTopics(broker, group: group)
        } catch {
            Issue.record(error, "creating the internal topics of group \(group) on the embedded broker")
        }
        var config = PipelineConfig()
        config.brokers = broker.bootstrapServers
        config.inputTopic = "hits"
        config.outputTopics = ["aggregates"]
        config.deadLetterTopic = "dlq"
        config.group = group
        config.shards = shards
        config.window = window
        config.kafkaProperties = ["log_level": "3", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500"]
        return config
    }

    /// `<group>-repartition` and `<group>-state` with `internalTopicPartitions` each, leaving
    /// either alone where it exists.
    static func createInternalTopics(_ broker: EmbeddedBroker, group: String) throws {
        for topic in ["\(group)-repartition", "\(group)-state"] {
            try broker.createTopic(topic, partitions: internalTopicPartitions, ifMissing: true)
        }
    }

    static func contents(_ broker: EmbeddedBroker, outputPartitions: Int32 = 4) throws -> TopicContents {
        try TopicContents(broker: broker, output: "aggregates", outputPartitions: outputPartitions, dlq: "dlq", dlqPartitions: 2)
    }
}
