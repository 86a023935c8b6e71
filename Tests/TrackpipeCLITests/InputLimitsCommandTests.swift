import Foundation
import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
@testable import TrackpipeCLI

@Suite("input limits through the worker", .serialized)
struct InputLimitsCommandTests {
    @Test("--max-headers and TRACKPIPE_MAX_HEADERS are read by run and replay; a negative limit is refused")
    func settings() throws {
        #expect(try RunCommand.parse([]).resolve(Environment([:])).config.limits.maxHeaders == 64)
        #expect(try RunCommand.parse(["--max-headers", "3"]).resolve(Environment(["TRACKPIPE_MAX_HEADERS": "9"])).config.limits.maxHeaders == 3)
        #expect(try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_MAX_HEADERS": "9"])).config.limits.maxHeaders == 9)
        #expect(try ReplayCommand.parse(["--max-headers", "0"]).resolve(Environment([:])).config.limits.maxHeaders == 0)
        func message(_ arguments: [String], _ environment: [String: String] = [:]) -> String {
            do {
                _ = try RunCommand.parse(arguments).resolve(Environment(environment))
                return "accepted"
            } catch {
                return RunCommand.message(for: error)
            }
        }
        #expect(message(["--max-headers", "-1"]).hasPrefix("--max-headers -1: must be 0 or more"))
        #expect(message([], ["TRACKPIPE_MAX_HEADERS": "-5"]).hasPrefix("TRACKPIPE_MAX_HEADERS=-5: must be 0 or more"))
        #expect(message([], ["TRACKPIPE_MAX_HEADERS": "lots"]) == "TRACKPIPE_MAX_HEADERS=lots: expected a whole number")
    }

    @Test("records with more headers than the limit go to the dead-letter topic as too_many_headers, bytes unchanged; a raised limit lets them through")
    func tooManyHeaders() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 2)
        try broker.createTopic("aggregates", partitions: 1)
        try broker.createTopic("dlq", partitions: 1)
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let now = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        var sent: [String: (headers: Int, value: [UInt8])] = [:]
        for index in 0..<6 {
            let headers = index % 2 == 0 ? 70 : 2
            let value = Array(#"{"deliveryId":"d1","broadlogId":"b\#(index)","action":"7","timestamp":\#(now + Int64(index))}"#.utf8)
            sent["device-\(index)"] = (headers, value)
            try producer.send(
                topic: "hits", key: Array("device-\(index)".utf8), value: value,
                headers: (0..<headers).map { KafkaHeader(key: "trace-\($0)", string: "x") })
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)

        let binary = try TrackpipeBinary.locate()
        let arguments = [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--until-end", "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
        let limited = try binary.run(arguments + ["--group", "limited"])
        #expect(limited.exitCode == 0, "\(limited.stderr)")
        #expect(limited.stdout.contains("dead-lettered 3 (too_many_headers 3)"), "\(limited.stdout)")

        let letters = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 1, dlq: "dlq", dlqPartitions: 1).deadLetters
        #expect(letters.count == 3)
        for letter in letters {
            let context = try #require(DeadLetter(headers: letter.headers))
            #expect(context.reason == .tooManyHeaders)
            #expect(context.detail.hasPrefix("the record has 70 Kafka headers, more than the limit of 64;"))
            #expect(context.detail.contains("--max-headers"))
            let key = String(decoding: letter.key ?? [], as: UTF8.self)
            #expect(sent[key]?.headers == 70, "only the records over the limit: \(key)")
            #expect(letter.value == sent[key]?.value, "the original value, unchanged")
        }

        let raised = try binary.run(arguments + ["--group", "raised"], environment: ["TRACKPIPE_MAX_HEADERS": "100"])
        #expect(raised.exitCode == 0, "\(raised.stderr)")
        #expect(raised.stdout.contains("accepted      6"), "\(raised.stdout)")
        #expect(!raised.stdout.contains("too_many_headers"), "\(raised.stdout)")
    }

    @Test("records larger than the dead-letter topic takes cost one dead letter each, cut to fit; a valid hit under a 300,000-byte key is counted; the run goes on")
    func recordsTooLargeForTheDeadLetterTopic() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 2)
        try broker.createTopic("aggregates", partitions: 1)
        try broker.createTopic("dlq", partitions: 1)
        // Kafka's default broker takes records up to about 1 MB; this producer (like a buggy one
        // writing to a topic configured for more) sends larger ones.
        let producer = try KafkaProducer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3", "message.max.bytes": "3000000"]))
        let now = Int64(Date().timeIntervalSince1970 * 1000) - 120_000
        func hit(_ index: Int) -> [UInt8] {
            Array(#"{"deliveryId":"d1","broadlogId":"b\#(index)","action":"7","timestamp":\#(now + Int64(index))}"#.utf8)
        }
        let invalid = [UInt8](repeating: UInt8(ascii: "x"), count: 1_010_000)
        let tooLarge = Array(#"{"deliveryId":"d1","broadlogId":"big","action":"7","timestamp":\#(now),"pad":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "y"), count: 1_500_000) + Array(#""}"#.utf8)
        let hugeKey = [UInt8](repeating: UInt8(ascii: "k"), count: 300_000)
        // Partition 0: hits around the two large values and the huge key; partition 1: hits.
        var ordinary = 0
        func sendHit(partition: Int32) throws {
            try producer.send(topic: "hits", partition: partition, key: Array("device-\(ordinary)".utf8), value: hit(ordinary))
            ordinary += 1
        }
        try sendHit(partition: 0)
        try producer.send(topic: "hits", partition: 0, key: Array("bad-1".utf8), value: invalid)  // offset 1
        try sendHit(partition: 0)
        try producer.send(topic: "hits", partition: 0, key: Array("bad-2".utf8), value: tooLarge)  // offset 3
        try sendHit(partition: 0)
        try producer.send(topic: "hits", partition: 0, key: hugeKey, value: hit(100))  // offset 5
        try sendHit(partition: 0)
        for _ in 0..<4 { try sendHit(partition: 1) }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)

        let result = try TrackpipeBinary.locate().run([
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--group", "large", "--until-end", "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ])
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stdout.contains("dead-lettered 2 (malformed_json 1, too_large 1)"), "\(result.stdout)")

        // Every ordinary hit and the one under the huge key counted, in one window.
        let contents = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 1, dlq: "dlq", dlqPartitions: 1)
        let impressions = contents.lastByKey.values.compactMap { $0["impressions"] as? Int }.reduce(0, +)
        #expect(impressions == ordinary + 1, "\(contents.lastByKey)")

        let letters = contents.deadLetters.sorted { (DeadLetter(headers: $0.headers)?.sourceOffset ?? 0) < (DeadLetter(headers: $1.headers)?.sourceOffset ?? 0) }
        try #require(letters.count == 2)
        for (letter, (reason, offset, original)) in zip(letters, [(RejectReason.malformedJSON, Int64(1), invalid), (.tooLarge, Int64(3), tooLarge)]) {
            let context = try #require(DeadLetter(headers: letter.headers))
            #expect(context.reason == reason)
            #expect(context.sourceTopic == "hits" && context.sourcePartition == 0 && context.sourceOffset == offset)
            func header(_ name: String) -> String? { letter.headers.last { $0.key == name }?.stringValue }
            #expect(header(DeadLetterCut.Header.truncated) == "value")
            #expect(header(DeadLetterCut.Header.valueSize) == String(original.count))
            #expect(header(DeadLetterCut.Header.valueSHA256) == sha256Hex(original))
            let value = try #require(letter.value)
            #expect(value.count < 1_000_000 && value.count > 900_000, "cut to what the topic takes: \(value.count)")
            #expect(Array(original.prefix(value.count)) == value, "the value kept is the original's first bytes")
            #expect(letter.key == Array("bad-\(offset == 1 ? 1 : 2)".utf8), "the small key is kept whole")
        }
    }
}

/// The SHA-256 of `bytes` as the dead letters' headers write it.
private func sha256Hex(_ bytes: [UInt8]) -> String { bytes.withUnsafeBytes { SHA256.hex($0) } }
