import Foundation
import Kafka
import Testing
import TrackpipeTestSupport
@testable import TrackpipeCLI

@Suite("trackpipe embedded-broker")
struct EmbeddedBrokerCommandTests {
    @Test("prints a bootstrap address that a Kafka client can use, serves the topics, and stops cleanly on SIGTERM")
    func servesUntilSignalled() throws {
        let broker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), ["embedded-broker", "--topic", "events", "--topic", "other", "--partitions", "3"])
        var bootstrap = ""
        let started = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            bootstrap = broker.stdout.split(separator: "\n").first { $0.hasPrefix("bootstrap: ") }.map { String($0.dropFirst(11)) } ?? ""
            return !bootstrap.isEmpty
        }
        #expect(started, "no bootstrap line; stderr: \(broker.stderr)")
        #expect(broker.stdout.contains("events, other (3 partitions each)"))

        // A real client round trip against the printed address.
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": bootstrap, "log_level": "3"]))
        try producer.send(topic: "events", partition: 2, key: Array("k".utf8), value: Array("hello".utf8))
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": bootstrap, "group.id": "probe", "log_level": "3"]))
        #expect(try consumer.watermarks(TopicPartition(topic: "events", partition: 2)).high == 1)
        let records = try consumer.readToEnd(topic: "events", partitions: 3, timeoutSeconds: SafetyDeadline.seconds)
        #expect(records.map { $0.value.map { String(decoding: $0, as: UTF8.self) } } == ["hello"])

        broker.signal(SIGTERM)
        #expect(broker.waitForExit(seconds: SafetyDeadline.seconds) == 0)
    }

    @Test("refuses nonsense sizes with a message")
    func validatesArguments() throws {
        let binary = try TrackpipeBinary.locate()
        let result = try binary.run(["embedded-broker", "--partitions", "0"])
        #expect(result.exitCode != 0)
        #expect(result.stderr.contains("--partitions must be at least 1"))
        let none = try binary.run(["embedded-broker", "--broker-count", "0"])
        #expect(none.exitCode == 64)
        #expect(none.stderr.contains("--broker-count must be at least 1"))
    }

    @Test("--broker-count starts that many brokers; the old --brokers is refused with the new name")
    func brokerCount() throws {
        let binary = try TrackpipeBinary.locate()
        let broker = try BackgroundTrackpipe(binary, ["embedded-broker", "--broker-count", "2", "--topic", "t"])
        var bootstrap = ""
        let started = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            bootstrap = broker.stdout.split(separator: "\n").first { $0.hasPrefix("bootstrap: ") }.map { String($0.dropFirst(11)) } ?? ""
            return !bootstrap.isEmpty
        }
        #expect(started, "no bootstrap line; stderr: \(broker.stderr)")
        #expect(bootstrap.split(separator: ",").count == 2, "\(bootstrap)")
        broker.signal(SIGTERM)
        #expect(broker.waitForExit(seconds: SafetyDeadline.seconds) == 0)

        let renamed = try binary.run(["embedded-broker", "--brokers", "3"])
        #expect(renamed.exitCode == 64)
        #expect(renamed.stderr.contains("the number of brokers is now --broker-count (--brokers, on run and generate, takes bootstrap addresses)"))
    }

    /// The help says the embedded broker cannot refuse unknown topics. If a librdkafka upgrade
    /// makes a client's allow.auto.create.topics=false work, this fails: then say so instead.
    @Test("the embedded broker creates a topic a client merely asks about, even with allow.auto.create.topics=false")
    func createsTopicsOnRequest() throws {
        let broker = try EmbeddedBroker()
        let consumer = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "probe", "allow.auto.create.topics": "false", "log_level": "0"]))
        defer { consumer.close() }
        #expect(try consumer.watermarks(TopicPartition(topic: "tracking-hitz", partition: 3)) == (0, 0))
        #expect(EmbeddedBrokerCommand.helpMessage(columns: 10_000).contains("it creates every topic a client asks about, with 4 partitions, and it cannot be told not to"))
    }
}
