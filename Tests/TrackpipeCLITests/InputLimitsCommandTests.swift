import Foundation
import Kafka
import Pipeline
import Testing
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
            #expect(context.reason == "too_many_headers")
            #expect(context.detail.hasPrefix("too_many_headers: the record has 70 Kafka headers, more than the limit of 64;"))
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
}
