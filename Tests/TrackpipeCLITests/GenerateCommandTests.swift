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
import TrackpipeTestSupport

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
            "-X", Self.patientDelivery,
        ])
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stdout.isEmpty)
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        let records = try consumer.readToEnd(topic: "gen", partitions: 2, timeoutSeconds: SafetyDeadline.seconds)
        #expect(records.count == 300)
        // The summary says what the topic received.
        #expect(result.stderr.hasPrefix("generate: \(records.count) messages to topic gen on \(broker.bootstrapServers): "), "\(result.stderr)")
        #expect(records.allSatisfy { $0.timestamp != nil })
        #expect(records.contains { $0.key != nil })
    }

    /// A delivery timeout longer than any stall of a loaded machine, for runs against a working
    /// broker: one message expiring would end a live run and fail a batch (exit 1).
    static let patientDelivery = "message.timeout.ms=\(SafetyDeadline.milliseconds)"

    /// What a reader of `topic` finds now, and the moment it finished reading.
    static func read(_ broker: EmbeddedBroker, topic: String, partitions: Int32) throws -> (records: [StoredRecord], readAt: Int64) {
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        let records = try consumer.readToEnd(topic: topic, partitions: partitions, timeoutSeconds: SafetyDeadline.seconds)
        return (records, nowMillis())
    }

    /// Live event times (the records' timestamps) are never ahead of the clock, and behind it by
    /// the generator's own delays only: late hits and their retries reach back up to 140 s,
    /// nearly all others 2 s. A fact about the stream, whatever the machine's speed: the
    /// generator starts after `testStart` and hands out each message once the clock reaches it.
    static func expectLiveEventTimes(
        _ read: (records: [StoredRecord], readAt: Int64), since testStart: Int64, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let stamps = read.records.compactMap(\.timestamp)
        #expect(stamps.count == read.records.count, "every record carries its event time", sourceLocation: sourceLocation)
        #expect(stamps.allSatisfy { $0 <= read.readAt }, "an event time ahead of the clock: \(stamps.max() ?? 0) > \(read.readAt)", sourceLocation: sourceLocation)
        #expect(stamps.allSatisfy { $0 >= testStart - 141_000 }, "\(stamps.min() ?? 0) vs start \(testStart)", sourceLocation: sourceLocation)
        #expect(Double(stamps.filter { $0 >= testStart - 3_000 }.count) > 0.8 * Double(stamps.count), sourceLocation: sourceLocation)
    }

    /// What a user of `generate --rate` notices, each step waiting on the event itself: a rate
    /// or a delay would be a figure of the machine, not of the command (the pacing is measured
    /// by `trackpipe-bench generate`).
    @Test(
        "--rate produces live until SIGTERM or SIGINT: records arrive while it runs, event times follow the clock and never lead it, the summary counts what was delivered",
        arguments: [SIGTERM, SIGINT])
    func liveUntilSignalled(_ signal: Int32) throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("live", partitions: 2)
        let testStart = Self.nowMillis()
        let generator = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            ["generate", "--rate", "200", "--brokers", broker.bootstrapServers, "--topic", "live", "-X", "log_level=3", "-X", Self.patientDelivery])
        let watcher = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "w", "log_level": "3"]))
        func produced() throws -> Int64 {
            try (0..<2).map { try watcher.watermarks(TopicPartition(topic: "live", partition: $0)).high }.reduce(0, +)
        }

        // Records arrive while generate runs, not when it stops.
        let arrived = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds, every: 0.1) {
            try produced() >= 100 || !generator.process.isRunning
        }
        let count = try produced()
        try #require(arrived && generator.process.isRunning, "\(count) records; stderr: \(generator.stderr)")
        let early = try Self.read(broker, topic: "live", partitions: 2)
        #expect(early.records.count >= 100)
        Self.expectLiveEventTimes(early, since: testStart)

        // Event times follow the clock: records produced from now on are stamped after this
        // moment, later than every record read so far.
        let looked = Self.nowMillis()
        var latest: Int64 = 0
        let followed = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds, every: 0.25) {
            latest = try Self.read(broker, topic: "live", partitions: 2).records.compactMap(\.timestamp).max() ?? 0
            return latest > looked || !generator.process.isRunning
        }
        #expect(followed && generator.process.isRunning, "no event time after \(looked); latest \(latest); stderr: \(generator.stderr)")

        // The signal stops it: the summary, exit 0.
        generator.signal(signal)
        let status = generator.waitForExit(seconds: SafetyDeadline.seconds)
        try #require(status != nil, "still running \(SafetyDeadline.seconds) s after the signal")
        #expect(generator.process.terminationReason == .exit, "killed by the signal instead of handling it")
        #expect(status == 0, "\(generator.stderr)")
        let all = try Self.read(broker, topic: "live", partitions: 2)
        #expect(all.records.count > early.records.count)
        #expect(
            generator.stderr.contains("generate: \(all.records.count) messages to topic live on \(broker.bootstrapServers)"),
            "the summary counts what was delivered (\(all.records.count)): \(generator.stderr)")
        Self.expectLiveEventTimes(all, since: testStart)
    }

    @Test("--rate with --count stops after that many messages, exit 0")
    func liveWithCount() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("live", partitions: 1)
        let result = try TrackpipeBinary.locate().run([
            "generate", "--rate", "1000", "--count", "300", "--brokers", broker.bootstrapServers, "--topic", "live", "-X", "log_level=3",
            "-X", Self.patientDelivery,
        ])
        #expect(result.exitCode == 0, "\(result.stderr)")
        #expect(result.stderr.contains("generate: 300 messages to topic live"))
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "r", "log_level": "3"]))
        #expect(try consumer.readToEnd(topic: "live", partitions: 1, timeoutSeconds: SafetyDeadline.seconds).count == 300)
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

    @Test("an unreachable broker: generate gives up after the 15 s delivery timeout, says how many were lost, exit 1")
    func unreachableBroker() throws {
        let generator = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), ["generate", "--count", "200", "--brokers", "127.0.0.1:1", "-X", "log_level=0"])
        // A bound of its own, still minutes: librdkafka's default timeout is 300 s, and a run
        // waiting that long (the 15 s default lost) must fail here rather than pass slowly.
        let status = generator.waitForExit(seconds: 150)
        try #require(status != nil, "still waiting after 150 s: the 15 s delivery timeout is not in force; stderr: \(generator.stderr)")
        #expect(status == 1)
        #expect(generator.stderr.contains("generate: 200 messages to topic tracking-hits on 127.0.0.1:1:"), "\(generator.stderr)")
        // _MSG_TIMED_OUT: librdkafka gave each message up only once its timeout had passed.
        #expect(
            generator.stderr.contains(
                "generate: 200 of 200 messages were not delivered to topic tracking-hits on 127.0.0.1:1: delivery failed: _MSG_TIMED_OUT"),
            "\(generator.stderr)")
        #expect(generator.stderr.contains("is the broker reachable? (each message waits up to 15 s; -X message.timeout.ms=MS changes that)"))
    }

    @Test("SIGTERM while a batch waits for acknowledgements: generate stops waiting, prints its summary and how many were not delivered")
    func batchSummaryOnSignal() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("held", partitions: 1)
        // Every produce request is answered with a retriable error: librdkafka retries for as
        // long as a message may wait, and nothing is ever acknowledged.
        let held = 10_000
        try broker.failNextRequests(.produce, on: 1, with: KafkaErrorCode.notEnoughReplicas, count: held)
        let generator = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "generate", "--count", "300", "--brokers", broker.bootstrapServers, "--topic", "held", "-X", "log_level=0",
                // The 300 messages go in one request (one partition, batches of 300, no linger
                // expiry): the broker's first produce request says that generate has sent the
                // whole batch and now only waits.
                "-X", "batch.num.messages=300", "-X", "linger.ms=900000",
                // An hour: only the signal can end the wait before the test gives up.
                "-X", "message.timeout.ms=3600000",
            ])
        let waiting = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            try broker.injectedErrorsLeft(.produce, on: 1) < held || !generator.process.isRunning
        }
        try #require(waiting && generator.process.isRunning, "no produce request reached the broker; stderr: \(generator.stderr)")
        generator.signal(SIGTERM)
        let status = generator.waitForExit(seconds: SafetyDeadline.seconds)
        try #require(status != nil, "still waiting \(SafetyDeadline.seconds) s after SIGTERM")
        #expect(generator.process.terminationReason == .exit, "killed by the signal instead of handling it")
        let destination = "topic held on \(broker.bootstrapServers)"
        #expect(generator.stderr.contains("generate: 300 messages to \(destination):"), "\(generator.stderr)")
        #expect(
            generator.stderr.contains("generate: 300 of 300 messages were not delivered to \(destination): still unacknowledged when generate stopped waiting"),
            "\(generator.stderr)")
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
