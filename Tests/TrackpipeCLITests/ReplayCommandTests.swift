import Foundation
import HitGenerator
import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
@testable import TrackpipeCLI

@Suite("trackpipe replay", .serialized)
struct ReplayCommandTests {
    static let start: Int64 = 1_795_341_600_000  // 2026-11-22T10:00:00Z, the generator's default

    func lastByKey(_ records: [StoredRecord]) throws -> [String: [String: Any]] {
        var last: [String: [String: Any]] = [:]
        for record in records.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(record.value ?? [])) as? [String: Any])
            last[String(decoding: record.key ?? [], as: UTF8.self)] = object
        }
        return last
    }

    @Test("a replay of a sub-range agrees with the live run for every window in the range, writes nothing outside it, never touches the live group; --output-file gives the same records")
    func subRangeAgreesWithLiveRun() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try broker.createTopic("aggregates", partitions: 4)
        try broker.createTopic("backfill", partitions: 4)
        try broker.createTopic("dlq", partitions: 2)
        try broker.createTopic("live-repartition", partitions: 8)
        try broker.createTopic("live-state", partitions: 8)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 12_000, seed: 71, deliveries: 8, span: 15 * 60_000)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let binary = try TrackpipeBinary.locate()
        let common = ["--brokers", broker.bootstrapServers, "--input-topic", "hits", "--log-level", "warning", "-X", "session.timeout.ms=6000"]
        let live = try binary.run(["run", "--output-topic", "aggregates", "--dlq-topic", "dlq", "--group", "live", "--until-end"] + common)
        #expect(live.exitCode == 0, "\(live.stderr)")
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "live", "log_level": "3"]))
        let inputPartitions = (0..<8).map { TopicPartition(topic: "hits", partition: Int32($0)) }
        let committedBefore = try reader.committed(inputPartitions)

        let from = "2026-11-22T10:04:00Z", to = "2026-11-22T10:09:00Z"
        let replay = try binary.run(["replay", "--from", from, "--to", to, "--output-topic", "backfill"] + common)
        #expect(replay.exitCode == 0, "\(replay.stderr)")
        #expect(replay.stderr.contains("replay: 100.0%"), "progress in a pipe: plain lines ending at 100 %")
        #expect(replay.stderr.contains("balanced      yes"))
        #expect(!replay.stderr.contains("committed"), "a replay commits nothing, and its summary says no committed positions: \(replay.stderr.suffix(1_500))")
        #expect(replay.stdout.isEmpty, "the summary goes to standard error even without --output-file -")
        #expect(replay.stderr.contains("the broker does not search offsets by time"), "the embedded broker's limit is said")
        #expect(try reader.committed(inputPartitions) == committedBefore, "the live group's commits are untouched")

        let fromMillis = Self.start + 4 * 60_000, toMillis = Self.start + 9 * 60_000
        let liveRecords = try lastByKey(try reader.readToEnd(topic: "aggregates", partitions: 4, timeoutSeconds: SafetyDeadline.seconds))
        let backfill = try lastByKey(try reader.readToEnd(topic: "backfill", partitions: 4, timeoutSeconds: SafetyDeadline.seconds))
        let expectedKeys = liveRecords.keys.filter { key in
            let start = RFC3339.parse(Array(key.split(separator: "@")[1].utf8))!
            return start >= fromMillis && start < toMillis
        }
        #expect(expectedKeys.count > 20)
        #expect(Set(backfill.keys) == Set(expectedKeys), "exactly the windows of the range")
        for key in expectedKeys {
            var a = liveRecords[key]!, b = backfill[key]!
            a["revision"] = nil
            b["revision"] = nil
            #expect(NSDictionary(dictionary: a).isEqual(to: b), "\(key): live \(a), replay \(b)")
        }

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID()).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        let toFile = try binary.run(["replay", "--from", from, "--to", to, "--output-file", file.path] + common)
        #expect(toFile.exitCode == 0, "\(toFile.stderr)")
        /// The last record per key of JSON Lines output (corrections come as later lines; how
        /// many depends on timing, the last one does not).
        func lastPerKey(_ text: String) throws -> [String: [String: Any]] {
            var last: [String: [String: Any]] = [:]
            for line in text.split(separator: "\n") {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                last["\(object["deliveryId"]!)@\(object["windowStart"]!)"] = object
            }
            return last
        }
        let fromFile = try lastPerKey(try String(contentsOf: file, encoding: .utf8))
        #expect(Set(fromFile.keys) == Set(backfill.keys))
        for (key, object) in fromFile { #expect(NSDictionary(dictionary: object).isEqual(to: backfill[key]!), "\(key)") }

        let toStdout = try binary.run(["replay", "--from", from, "--to", to, "--output-file", "-"] + common)
        #expect(toStdout.exitCode == 0)
        #expect(toStdout.stderr.contains("trackpipe summary") && !toStdout.stdout.contains("trackpipe summary"))
        let fromStdout = try lastPerKey(toStdout.stdout)
        #expect(Set(fromStdout.keys) == Set(backfill.keys))
        for (key, object) in fromStdout { #expect(NSDictionary(dictionary: object).isEqual(to: backfill[key]!), "\(key)") }
    }

    @Test(
        "a replay over a range: its summary says what it wrote, equal to what its dead-letter and output topics received, and what it read and left aside outside the range; it balances"
    )
    func rangeSummaryMatchesTopics() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try broker.createTopic("backfill", partitions: 4)
        try broker.createTopic("dlqR", partitions: 2)
        // Half an hour of hits with bad messages, late hits, tracking-off deliveries, and hits a
        // day old at the end: dead letters inside the range and outside it.
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 10_000, seed: 81, deliveries: 8, span: 30 * 60_000, lateRate: 0.03, badRate: 0.03, staleCount: 30))
                .generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let replay = try TrackpipeBinary.locate().run([
            "replay", "--from", "2026-11-22T10:10:00Z", "--to", "2026-11-22T10:20:00Z", "--dlq-topic", "dlqR", "--output-topic", "backfill",
            "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--log-level", "warning",
        ])
        #expect(replay.exitCode == 0, "\(replay.stderr)")
        let summary = try SummaryReading(replay.stderr)
        let topics = try TopicContents(broker: broker, output: "backfill", outputPartitions: 4, dlq: "dlqR", dlqPartitions: 2)
        summary.expectMatches(topics)
        #expect(replay.stderr.contains("  range         windows starting from 2026-11-22T10:10:00Z to 2026-11-22T10:20:00Z (exclusive)\n"), "\(replay.stderr)")
        let stage = try #require(summary.stages.first)
        let outside = try #require(stage.outsideRange, "an outside range line: \(replay.stderr)")
        #expect(stage.consumed == corpus.hits.count)
        #expect(stage.consumed == stage.accepted + stage.filtered + stage.deadLetteredTotal + outside, "\(replay.stderr)")
        #expect(outside > stage.accepted, "two thirds of the half hour lie outside the range")
        #expect(topics.deadLetters.count > 0 && topics.deadLetters.count < corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count)
        let line = try #require(replay.stderr.split(separator: "\n").first { $0.hasPrefix("  outside range ") })
        #expect(line.contains("read and left aside, nothing written: ") && line.contains(" hits of other windows") && line.contains(" dead letters not sent ("), "\(line)")
        // Every hit of a window outside the range, the day-old ones among them, is read and left
        // aside: counted into its window, or judged too late when event time had gone past it
        // before its batch (event time moves at batch boundaries, so which depends on where the
        // consumer's batches fall), and nothing of it goes out.
        let from = Self.start + 10 * 60_000, to = Self.start + 20 * 60_000
        let hitsOutside = corpus.hits.count { hit in
            switch hit.truth {
            case .counted(let expected), .stale(let expected): !(from..<to).contains(expected.eventTime / 60_000 * 60_000)
            case .trackingOff, .rejected: false
            }
        }
        func count(after label: String) -> Int {
            guard let found = line.range(of: label) else { return 0 }
            return Int(line[found.upperBound...].prefix(while: \.isNumber)) ?? 0
        }
        #expect(count(after: "nothing written: ") + count(after: "too_late ") == hitsOutside, "\(hitsOutside) hits of windows outside the range: \(line)")
        // Every window written is in the range; every letter not about a late hit was received in it.
        for key in topics.lastByKey.keys {
            let start = try #require(RFC3339.parse(Array(key.split(separator: "@")[1].utf8)))
            #expect(start >= from && start < to, "\(key)")
        }
        for letter in topics.deadLetters where DeadLetter(headers: letter.headers)?.reason != .tooLate {
            let time = try #require(letter.timestamp)
            #expect(time >= from && time < to, "a dead letter about \(RFC3339.format(epochMillis: time))")
        }
    }

    @Test("--emit final: three replays (other shards, another partition count) write the same records, one per window, each the last record of a default replay; run --until-end --emit final writes one per window too")
    func finalEmission() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try broker.createTopic("hits-3", partitions: 3)
        for topic in ["final-run", "dlq", "final-repartition", "final-state"] { try broker.createTopic(topic, partitions: 4) }
        // An hour and a half of event time: windows are evicted (and written) while the replay
        // reads, not only at its end; late hits and SDK retries included.
        let corpus = Corpus(HitStream(HitStreamConfig(count: 9_000, seed: 77, deliveries: 6, span: 90 * 60_000)).generate())
        // Then hits of the same deliveries for windows closed long before, still within the
        // retention: corrections for the default emission.
        let late = Corpus(
            HitStream(
                HitStreamConfig(
                    count: 400, seed: 78, deliveries: 6, start: Self.start + 40 * 60_000, span: 30 * 60_000, deliverySeed: 77,
                    firstRecipient: 1_000_000)
            ).generate())
        for topic in ["hits", "hits-3"] {
            try corpus.produce(0..<corpus.hits.count, to: topic, on: broker)
            try late.produce(0..<late.hits.count, to: topic, on: broker)
        }
        let binary = try TrackpipeBinary.locate()
        let common = ["--brokers", broker.bootstrapServers, "--log-level", "warning", "-X", "session.timeout.ms=6000"]
        func replay(_ input: String, shards: Int, emit: String) throws -> String {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("final-\(UUID()).jsonl")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try binary.run(
                ["replay", "--input-topic", input, "--output-file", file.path, "--shards", "\(shards)", "--emit", emit] + common)
            #expect(run.exitCode == 0, "\(run.stderr)")
            return try String(contentsOf: file, encoding: .utf8)
        }
        func keyed(_ lines: [Substring]) throws -> [(String, [String: Any])] {
            try lines.map { line in
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                return ("\(object["deliveryId"]!)@\(object["windowStart"]!)", object)
            }
        }
        var lastOfChanges: [String: [String: Any]] = [:]
        let changes = try keyed(try replay("hits", shards: 2, emit: "changes").split(separator: "\n"))
        // How many corrections the default replay writes depends on how the broker batches the
        // partitions (a late hit fetched with the hits before it corrects nothing); the last
        // record per window does not. WindowStoreTests shows corrections against `final` exactly.
        for (key, object) in changes { lastOfChanges[key] = object }
        #expect(!lastOfChanges.isEmpty)

        let finals = [try replay("hits", shards: 1, emit: "final"), try replay("hits", shards: 3, emit: "final"), try replay("hits-3", shards: 2, emit: "final")]
        #expect(finals[0] == finals[1] && finals[0] == finals[2], "the same records in the same order, whatever the shards and partitions")
        let records = try keyed(finals[0].split(separator: "\n"))
        #expect(records.count == lastOfChanges.count && Set(records.map(\.0)) == Set(lastOfChanges.keys), "one record per window, every window")
        for (key, object) in records {
            #expect(NSDictionary(dictionary: object).isEqual(to: lastOfChanges[key]!), "\(key): final \(object), last of the default \(lastOfChanges[key]!)")
        }

        // The live worker's bounded mode: one record per window as well, the same ones.
        let run = try binary.run(
            ["run", "--input-topic", "hits", "--output-topic", "final-run", "--dlq-topic", "dlq", "--group", "final", "--until-end", "--emit", "final"]
                + common)
        #expect(run.exitCode == 0, "\(run.stderr)")
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "final-reader", "log_level": "3"]))
        let written = try reader.readToEnd(topic: "final-run", partitions: 4, timeoutSeconds: SafetyDeadline.seconds)
        #expect(written.count == lastOfChanges.count, "one record per window")
        for (key, object) in try lastByKey(written) {
            #expect(NSDictionary(dictionary: object).isEqual(to: lastOfChanges[key] ?? [:]), "\(key)")
        }
    }

    @Test("an --output-file that fills up part way (a full disk) fails the replay with exit 1, not 64: the setting was right, the run was not")
    func outputFileFullExits1() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 80, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let result = try TrackpipeBinary.locate().run(
            ["replay", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-file", "/dev/full", "--log-level", "warning"])
        #expect(result.exitCode == 1, "\(result.stderr)")
        #expect(result.stderr.contains("--output-file /dev/full: writing failed") && result.stderr.contains("the output is incomplete"), "\(result.stderr)")
    }

    @Test("another --window than the group's or the output topic's: run and replay exit 64 naming both sizes, and write nothing")
    func windowSizeChangeRefused() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        for topic in ["aggregates", "dlq", "sized-repartition", "sized-state"] { try broker.createTopic(topic, partitions: 4) }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 1_500, seed: 79, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let binary = try TrackpipeBinary.locate()
        let common = [
            "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--log-level", "warning", "-X",
            "session.timeout.ms=6000",
        ]
        let first = try binary.run(["run", "--dlq-topic", "dlq", "--group", "sized", "--until-end"] + common)
        #expect(first.exitCode == 0, "\(first.stderr)")
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "sized-reader", "log_level": "3"]))
        let written = try reader.readToEnd(topic: "aggregates", partitions: 4, timeoutSeconds: SafetyDeadline.seconds).count

        let run = try binary.run(["run", "--dlq-topic", "dlq", "--group", "sized", "--until-end", "--window", "5m"] + common)
        #expect(run.exitCode == 64, "\(run.stderr)")
        #expect(run.stderr.contains("it counts windows of 1m and this run asks for --window 5m"), "\(run.stderr)")
        let replay = try binary.run(["replay", "--window", "5m"] + common)
        #expect(replay.exitCode == 64, "\(replay.stderr)")
        #expect(replay.stderr.contains("holds windows of 1m") && replay.stderr.contains("new --output-topic"), "\(replay.stderr)")
        #expect(try reader.readToEnd(topic: "aggregates", partitions: 4, timeoutSeconds: SafetyDeadline.seconds).count == written)
    }

    @Test("bad ranges are refused with a message that says what to type", arguments: [
        (["--from", "2026-11-22T10:05:30Z"], "--from 2026-11-22T10:05:30Z is not on a window boundary (windows of 60 s start at multiples of the window size since the Unix epoch): use 2026-11-22T10:05:00Z or 2026-11-22T10:06:00Z"),
        (["--from", "2026-11-22T10:05:00Z", "--to", "2026-11-22T10:05:00Z"], "--to 2026-11-22T10:05:00Z is not after --from 2026-11-22T10:05:00Z: the range [from, to) would be empty; for one window write --to 2026-11-22T10:06:00Z"),
        (["--from", "2026-11-22T10:05:00Z", "--to", "2026-11-22T10:00:00Z"], "is not after --from"),
        (["--from", "yesterday"], "--from yesterday: not a time; write an RFC 3339 time with a zone, like 2026-11-22T10:00:00Z, or 'beginning'"),
        (["--to", "2026-11-22 10:00"], "or 'end'"),
        (["--from", "2026-11-22T10:00:00Z", "--window", "5m", "--to", "2026-11-22T10:07:00Z"], "use 2026-11-22T10:05:00Z or 2026-11-22T10:10:00Z"),
    ])
    func badRanges(_ arguments: [String], _ message: String) throws {
        let result = try TrackpipeBinary.locate().run(["replay"] + arguments)
        #expect(result.exitCode == 64)
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("the topics a replay writes: a topic per size, none of them its input or its dead-letter topic, each refused with exit 64 before any broker", arguments: [
        (["--window", "1m,1h", "--output-topic", "agg"], "--output-topic agg: name a topic of its own for each window size"),
        (["--window", "1m,1h", "--output-topic", "agg,agg"], "--output-topic agg,agg: name a topic of its own for each window size"),
        (["--output-topic", "tracking-hits"], "the input topic tracking-hits must differ from the output and dead-letter topics"),
        (["--window", "1m,1h", "--output-topic", "a,tracking-hits"], "the input topic tracking-hits must differ"),
        (["--dlq-topic", "tracking-hits"], "the input topic tracking-hits must differ"),
        (["--output-topic", "dead", "--dlq-topic", "dead"], "the dead-letter topic dead must differ from the output topics"),
        (["--window", "1m,1h", "--output-topic", "a,dead", "--dlq-topic", "dead"], "the dead-letter topic dead must differ"),
    ])
    func writtenTopics(_ arguments: [String], _ message: String) throws {
        let result = try TrackpipeBinary.locate().run(["replay", "--brokers", "127.0.0.1:9"] + arguments)
        #expect(result.exitCode == 64, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("configuration errors of run exit 64 and name what to change")
    func runConfigurationErrorsExit64() throws {
        let result = try TrackpipeBinary.locate().run(["run", "--shards", "0"])
        #expect(result.exitCode == 64)
        #expect(result.stderr.contains("--shards 0: use 1 to 1024"), "\(result.stderr)")
        #expect(result.stderr.contains("trackpipe run"), "run's usage, not the top-level one")
    }

    @Test("the progress display: a bar redrawn in place on a terminal, plain lines every few seconds in a pipe")
    func progressDisplay() {
        let written = LockedValue<[String]>([])
        let terminal = ProgressDisplay(isTerminal: true) { text in written.set(written.get() + [text]) }
        terminal.show(RunnerProgress(elapsedMilliseconds: 1_000, consumed: 50_000, done: 250, total: 1_000, finished: false))
        terminal.show(RunnerProgress(elapsedMilliseconds: 2_000, consumed: 100_000, done: 1_000, total: 1_000, finished: true))
        let drawn = written.get()
        #expect(drawn.count == 2 && drawn.allSatisfy { $0.hasPrefix("\r\u{1B}[2Kreplay ") })
        #expect(drawn[0].contains(" 25.0%") && drawn[0].contains("50,000/s") && drawn[0].contains("ETA 0:03") && !drawn[0].hasSuffix("\n"))
        #expect(drawn[1].contains("100.0%") && drawn[1].hasSuffix("in 0:02\n"))

        written.set([])
        let pipe = ProgressDisplay(isTerminal: false, plainInterval: 5_000) { text in written.set(written.get() + [text]) }
        for second in 1...12 {
            pipe.show(RunnerProgress(elapsedMilliseconds: Int64(second) * 1_000, consumed: second * 10, done: Int64(second), total: 12, finished: second == 12))
        }
        let lines = written.get()
        #expect(lines.count == 4, "\(lines)")  // 1 s, 6 s, 11 s, and the end
        #expect(lines.allSatisfy { $0.hasPrefix("replay: ") && $0.hasSuffix("\n") && !$0.contains("\r") })
        #expect(lines.last!.contains("100.0%"))
    }
}
