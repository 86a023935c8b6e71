import Kafka
import Pipeline
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

    /// A worker on those topics. The embedded broker holds a rejoin for about the session
    /// timeout when the group has history; real brokers act on LeaveGroup at once, so tests
    /// shorten it.
    static func config(_ broker: EmbeddedBroker, group: String, window: WindowConfig, shards: Int = 2) -> PipelineConfig {
        var config = PipelineConfig()
        config.brokers = broker.bootstrapServers
        config.inputTopic = "hits"
        config.outputTopic = "aggregates"
        config.deadLetterTopic = "dlq"
        config.group = group
        config.shards = shards
        config.window = window
        config.kafkaProperties = ["log_level": "3", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500"]
        return config
    }

    static func contents(_ broker: EmbeddedBroker, outputPartitions: Int32 = 4) throws -> TopicContents {
        try TopicContents(broker: broker, output: "aggregates", outputPartitions: outputPartitions, dlq: "dlq", dlqPartitions: 2)
    }
}
