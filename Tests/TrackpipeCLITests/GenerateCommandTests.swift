#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackingDomain
@testable import TrackpipeCLI

@Suite("trackpipe generate")
struct GenerateCommandTests {
    @Test("writes --count JSON lines to stdout, the same for the same seed and start, with a summary on stderr")
    func jsonLinesToStdout() throws {
        let binary = try TrackpipeBinary.locate()
        let start = ["--start", "2026-11-22T10:00:00Z"]
        let first = try binary.run(["generate", "--count", "500", "--seed", "9"] + start)
        let again = try binary.run(["generate", "--count", "500", "--seed", "9"] + start)
        let other = try binary.run(["generate", "--count", "500", "--seed", "10"] + start)
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

    @Test("without --start, a batch ends at the present: every event time within --span and 63 s before now, none ahead")
    func batchEndsNow() throws {
        let before = Self.nowMillis()
        let result = try TrackpipeBinary.locate().run(["generate", "--count", "2000", "--span", "2m"])
        let after = Self.nowMillis()
        #expect(result.exitCode == 0, "\(result.stderr)")
        let normalizer = Normalizer()
        let times = result.stdoutLines.compactMap { line -> Int64? in
            if case .accepted(let event) = normalizer.normalize(Array(line.utf8), kafkaTimestamp: nil) { return event.eventTime }
            return nil
        }
        #expect(times.count > 1_000)
        #expect(times.allSatisfy { $0 >= before - 120_000 - HitStream.interactionReach && $0 <= after }, "\(times.min() ?? 0)...\(times.max() ?? 0) vs \(before)...\(after)")
        // The batch reaches the present, not merely some time before it.
        #expect((times.max() ?? 0) > before - 30_000)
    }

    @Test("the default start is now minus --span minus 63 s; an explicit --start is kept whatever the clock")
    func defaultStart() throws {
        let now: Int64 = 1_800_000_000_000
        #expect(try GenerateCommand.parse(["--count", "10"]).streamConfig(now: now).start == now - 600_000 - 63_000)
        #expect(try GenerateCommand.parse(["--span", "2h"]).streamConfig(now: now).start == now - 7_200_000 - 63_000)
        #expect(try GenerateCommand.parse(["--start", "2026-11-22T10:00:00Z"]).streamConfig(now: now).start == 1_795_341_600_000)
        #expect(try GenerateCommand.parse(["--start", "now"]).streamConfig(now: now).start == now)
        #expect(try GenerateCommand.parse(["--start", "1000"]).streamConfig(now: now).start == 1_000)
        // --help says exactly what batch mode uses.
        #expect(GenerateCommand.helpMessage(columns: 10_000).contains("Without --start the batch ends at the present: it starts at now minus --span minus 63 s"))
        #expect(HitStream.interactionReach == 63_000, "the help text's 63 s")
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

    @Test("--rate produces live, paced by the clock, event times never ahead of it, until SIGTERM")
    func liveUntilSignalled() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("live", partitions: 2)
        let testStart = Self.nowMillis()
        let generator = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            ["generate", "--rate", "500", "--brokers", broker.bootstrapServers, "--topic", "live", "-X", "log_level=3"])
        let started = Date()
        Thread.sleep(forTimeInterval: 2.5)
        generator.signal(SIGTERM)
        let elapsed = Date().timeIntervalSince(started)
        let status = generator.waitForExit(seconds: 15)
        #expect(status == 0, "\(generator.stderr)")
        #expect(generator.stderr.contains("messages to topic live on \(broker.bootstrapServers)"), "\(generator.stderr)")

        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        let records = try consumer.readToEnd(topic: "live", partitions: 2)
        let readAt = Self.nowMillis()
        // Loose: process start-up and a shared machine shift the count either way.
        let expected = 500 * elapsed
        #expect(Double(records.count) > 0.4 * expected && Double(records.count) < 1.6 * expected, "\(records.count) in \(elapsed) s")
        #expect(generator.stderr.contains("generate: \(records.count) messages"), "the summary counts what was delivered")

        let stamps = records.compactMap(\.timestamp)
        #expect(stamps.count == records.count)
        // Never ahead of the clock; behind it by the generator's own delays only (late hits
        // and their retries reach back up to 140 s, nearly all others 2 s).
        #expect(stamps.allSatisfy { $0 <= readAt })
        #expect(stamps.allSatisfy { $0 >= testStart - 141_000 })
        #expect(Double(stamps.filter { $0 >= testStart - 3_000 }.count) > 0.8 * Double(stamps.count))
        // Event time moves with the run: compare in production order (per partition, by offset).
        let byProduction = records.sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }
        for partition in Set(records.map(\.partition)) {
            let ordered = byProduction.filter { $0.partition == partition }.compactMap(\.timestamp)
            guard ordered.count >= 40 else { continue }
            let quarter = ordered.count / 4
            #expect(Self.median(ordered.suffix(quarter)) > Self.median(ordered.prefix(quarter)), "partition \(partition)")
        }
    }

    @Test("--rate with --count stops after that many messages, exit 0")
    func liveWithCount() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("live", partitions: 1)
        let result = try TrackpipeBinary.locate().run([
            "generate", "--rate", "1000", "--count", "300", "--brokers", broker.bootstrapServers, "--topic", "live", "-X", "log_level=3",
        ])
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stderr.contains("generate: 300 messages to topic live"))
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        #expect(try consumer.readToEnd(topic: "live", partitions: 1).count == 300)
    }

    @Test("--rate without --brokers, or with batch-only options, is refused with why")
    func liveNeedsBrokers() throws {
        let binary = try TrackpipeBinary.locate()
        let noBrokers = try binary.run(["generate", "--rate", "100"])
        #expect(noBrokers.exitCode != 0)
        #expect(noBrokers.stdout.isEmpty)
        #expect(noBrokers.stderr.contains("--rate produces into Kafka and runs until stopped: give --brokers"))
        let withStart = try binary.run(["generate", "--rate", "100", "--brokers", "localhost:1", "--start", "now"])
        #expect(withStart.exitCode != 0)
        #expect(withStart.stderr.contains("with --rate, event times follow the clock"))
        let zero = try binary.run(["generate", "--rate", "0", "--brokers", "localhost:1"])
        #expect(zero.exitCode != 0)
        #expect(zero.stderr.contains("--rate must be a positive number"))
    }

    private static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private static func median(_ values: some Collection<Int64>) -> Int64 {
        let sorted = values.sorted()
        return sorted[sorted.count / 2]
    }

    @Test("an unreachable broker: generate gives up after the 15 s delivery timeout, says how many were lost, exit 1")
    func unreachableBroker() throws {
        let started = Date()
        let result = try TrackpipeBinary.locate().run(["generate", "--count", "200", "--brokers", "127.0.0.1:1", "-X", "log_level=0"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.exitCode == 1)
        #expect(elapsed > 10 && elapsed < 40, "\(elapsed) s")
        #expect(result.stderr.contains("generate: 200 messages to topic tracking-hits on 127.0.0.1:1:"), "\(result.stderr)")
        #expect(
            result.stderr.contains(
                "generate: 200 of 200 messages were not delivered to topic tracking-hits on 127.0.0.1:1: delivery failed: _MSG_TIMED_OUT"),
            "\(result.stderr)")
        #expect(result.stderr.contains("is the broker reachable? (each message waits up to 15 s; -X message.timeout.ms=MS changes that)"))
    }

    @Test("SIGTERM during a batch into Kafka: generate stops waiting within seconds and prints its summary")
    func batchSummaryOnSignal() throws {
        let generator = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), ["generate", "--count", "300", "--brokers", "127.0.0.1:1", "-X", "log_level=0"])
        Thread.sleep(forTimeInterval: 1.5)
        let signalled = Date()
        generator.signal(SIGTERM)
        let status = generator.waitForExit(seconds: 10)
        #expect(status != nil, "still running 10 s after SIGTERM")
        #expect(Date().timeIntervalSince(signalled) < 6)
        #expect(generator.process.terminationReason == .exit, "killed by the signal instead of handling it")
        #expect(generator.stderr.contains("generate: 300 messages to topic tracking-hits on 127.0.0.1:1:"), "\(generator.stderr)")
        #expect(generator.stderr.contains("generate: 300 of 300 messages were not delivered"), "\(generator.stderr)")
        #expect(status == 1)
    }

    @Test("a negative --span is refused as negative, written either way")
    func negativeSpan() throws {
        let binary = try TrackpipeBinary.locate()
        for arguments in [["--span", "-5s"], ["--span=-5s"]] {
            let result = try binary.run(["generate"] + arguments)
            #expect(result.exitCode == 64)
            #expect(result.stderr.contains("--span -5s: durations cannot be negative"), "\(result.stderr)")
        }
        let zero = try binary.run(["generate", "--span", "0s"])
        #expect(zero.stderr.contains("--span must be longer than 0"))
    }

    @Test("a bad --start is refused with what to write instead")
    func badStart() throws {
        let result = try TrackpipeBinary.locate().run(["generate", "--start", "tomorrow"])
        #expect(result.exitCode != 0)
        #expect(result.stderr.contains("RFC 3339"))
    }
}
