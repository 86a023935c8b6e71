import Foundation
import Kafka
import Testing

@Suite("trackpipe embedded-broker")
struct EmbeddedBrokerCommandTests {
    @Test("prints a bootstrap address that a Kafka client can use, serves the topics, and stops cleanly on SIGTERM")
    func servesUntilSignalled() throws {
        let broker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), ["embedded-broker", "--topic", "events", "--topic", "other", "--partitions", "3"])
        var bootstrap = ""
        let started = BackgroundTrackpipe.waitUntil(seconds: 10) {
            bootstrap = broker.stdout.split(separator: "\n").first { $0.hasPrefix("bootstrap: ") }.map { String($0.dropFirst(11)) } ?? ""
            return !bootstrap.isEmpty
        }
        #expect(started, "no bootstrap line; stderr: \(broker.stderr)")
        #expect(broker.stdout.contains("events, other (3 partitions each)"))

        // A real client round trip against the printed address.
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": bootstrap, "log_level": "3"]))
        try producer.send(topic: "events", partition: 2, key: Array("k".utf8), value: Array("hello".utf8))
        try producer.flush(timeoutMilliseconds: 10_000)
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": bootstrap, "group.id": "probe", "log_level": "3"]))
        #expect(try consumer.watermarks(TopicPartition(topic: "events", partition: 2)).high == 1)
        let records = try consumer.readToEnd(topic: "events", partitions: 3)
        #expect(records.map { $0.value.map { String(decoding: $0, as: UTF8.self) } } == ["hello"])

        broker.signal(SIGTERM)
        #expect(broker.waitForExit(seconds: 10) == 0)
    }

    @Test("refuses nonsense sizes with a message")
    func validatesArguments() throws {
        let result = try TrackpipeBinary.locate().run(["embedded-broker", "--partitions", "0"])
        #expect(result.exitCode != 0)
        #expect(result.stderr.contains("--partitions must be at least 1"))
    }
}
