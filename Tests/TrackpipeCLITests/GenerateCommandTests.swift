import Foundation
import Kafka
import Testing

@Suite("trackpipe generate")
struct GenerateCommandTests {
    @Test("writes --count JSON lines to stdout, the same for the same seed, with a summary on stderr")
    func jsonLinesToStdout() throws {
        let binary = try TrackpipeBinary.locate()
        let first = try binary.run(["generate", "--count", "500", "--seed", "9"])
        let again = try binary.run(["generate", "--count", "500", "--seed", "9"])
        let other = try binary.run(["generate", "--count", "500", "--seed", "10"])
        #expect(first.exitCode == 0)
        #expect(first.stdoutLines.count == 500)
        #expect(first.stdout == again.stdout)
        #expect(first.stdout != other.stdout)
        #expect(first.stderr.contains("generate: 500 messages to stdout"))
        // Every line is a message trackpipe normalize can judge: pipe one into the other.
        let judged = try binary.run(["normalize"], stdin: Array(first.stdout.utf8))
        #expect(judged.exitCode == 0)
        #expect(judged.stdoutLines.count == 500)
        #expect(judged.stdoutLines.filter { $0.hasPrefix("{\"status\":\"ok\"") }.count > 400)
    }

    @Test("produces into a Kafka topic with --brokers, keys and timestamps included")
    func intoKafka() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("gen", partitions: 2)
        let result = try TrackpipeBinary.locate().run([
            "generate", "--count", "300", "--brokers", broker.bootstrapServers, "--topic", "gen", "-X", "log_level=3",
        ])
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stdout.isEmpty)
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        let records = try consumer.readToEnd(topic: "gen", partitions: 2)
        #expect(records.count == 300)
        #expect(records.allSatisfy { $0.timestamp != nil })
        #expect(records.contains { $0.key != nil })
    }

    @Test("a bad --start is refused with what to write instead")
    func badStart() throws {
        let result = try TrackpipeBinary.locate().run(["generate", "--start", "tomorrow"])
        #expect(result.exitCode != 0)
        #expect(result.stderr.contains("RFC 3339"))
    }
}
