import Kafka
import Testing
@testable import Pipeline

/// The librdkafka settings trackpipe chooses, and that an operator's `-X` still wins over them.
@Suite("PipelineConfig's librdkafka settings")
struct PipelineConfigTests {
    @Test("records are sent uncompressed unless -X compression.type asks otherwise")
    func compression() {
        var config = PipelineConfig()
        #expect(config.producerConfig["compression.type"] == "none")
        config.kafkaProperties["compression.type"] = "lz4"
        #expect(config.producerConfig["compression.type"] == "lz4")
        #expect(config.consumerConfig(group: "g")["compression.type"] == nil, "a producer setting stays off the consumer")
    }
}
