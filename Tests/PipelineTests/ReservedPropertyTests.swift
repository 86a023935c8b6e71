import Kafka
import Testing
@testable import Pipeline

/// The properties trackpipe keeps for itself, tried as an adversary would: every spelling
/// librdkafka reads as the refused value, through both doors (`validate`, which every pipeline
/// runs, and `checkKafkaProperties`, which every command runs before it contacts a broker), and
/// trackpipe's own values let through however they are spelt.
@Suite("ReservedProperty: -X cannot change what the guarantees and the group's identity rest on")
struct ReservedPropertyTests {
    static let refused: [(key: String, value: String, says: String)] = [
        ("group.id", "gx", "use --group (TRACKPIPE_GROUP)"),
        ("group.id", "trackpipe", "use --group (TRACKPIPE_GROUP)"),
        ("group.instance.id", "pod-0", "use --instance-id (TRACKPIPE_INSTANCE_ID)"),
        ("enable.auto.commit", "true", "commits only offsets below its safe mark"),
        ("enable.auto.commit", "T", "commits only offsets below its safe mark"),
        ("enable.auto.offset.store", "1", "commits only offsets below its safe mark"),
        ("enable.idempotence", "false", "the idempotent producer"),
        ("enable.idempotence", "F", "the idempotent producer"),
        ("enable.idempotence", "0", "the idempotent producer"),
        ("auto.offset.reset", "latest", "a new group starts wherever its input begins"),
        ("auto.offset.reset", "END", "a new group starts wherever its input begins"),
        ("auto.offset.reset", "error", "a new group starts wherever its input begins"),
        ("topic.auto.offset.reset", "largest", "a new group starts wherever its input begins"),
        ("enable.partition.eof", "false", "read to its end"),
        ("enable.partition.eof", "f", "read to its end"),
    ]

    @Test("a reserved property set to anything but trackpipe's own value is refused, however librdkafka would spell it")
    func refusedEverySpelling() {
        for (key, value, says) in Self.refused {
            var config = PipelineConfig()
            config.kafkaProperties = ["linger.ms": "5", key: value]
            do {
                try config.validate()
                Issue.record("-X \(key)=\(value) passed validate()")
            } catch {
                #expect("\(error)".contains("-X \(key)=\(value): "), "\(error)")
                #expect("\(error)".contains(says), "\(error)")
            }
            #expect(throws: KafkaConfigProblem.self, "-X \(key)=\(value) passed checkKafkaProperties") { try config.checkKafkaProperties() }
        }
    }

    @Test("trackpipe's own values pass in any spelling librdkafka reads as them")
    func ownValuesPass() throws {
        let own = [
            "enable.auto.commit": "FALSE", "enable.auto.offset.store": "f", "enable.idempotence": "T",
            "auto.offset.reset": "Smallest", "topic.auto.offset.reset": "beginning", "enable.partition.eof": "1",
        ]
        var config = PipelineConfig()
        config.kafkaProperties = own
        try config.validate()
        try config.checkKafkaProperties()
    }

    @Test("each consumer still gets the group trackpipe names, and the reserved values it sets")
    func consumerKeepsItsGroup() {
        let config = PipelineConfig()
        let consumer = config.consumerConfig(group: config.aggregateGroup, member: "aggregate")
        #expect(consumer["group.id"] == "trackpipe-aggregate")
        #expect(consumer["auto.offset.reset"] == "earliest" && consumer["enable.partition.eof"] == "true")
        #expect(consumer["enable.auto.commit"] == "false" && consumer["enable.auto.offset.store"] == "false")
        #expect(config.producerConfig["enable.idempotence"] == "true")
    }
}
