import Benchmarking
import Foundation
import HitGenerator
import Kafka
import RecordFormats
import Testing
import TrackingDomain
import TrackpipeTestSupport

/// `--window 1m,1h,1d`: one pipeline reads, scans and shuffles each hit once, and counts it in a
/// window of each size, each size written to a topic of its own.
@Suite("trackpipe run: several window sizes in one pipeline", .serialized)
struct SeveralSizesCommandTests {
    static let sizes: [(text: String, millis: Int64, topic: String)] = [
        ("1m", 60_000, "agg-1m"), ("1h", 3_600_000, "agg-1h"), ("1d", 86_400_000, "agg-1d"),
    ]

    /// Two and a half hours of hits with late ones (within the retention), bad messages and
    /// tracking-off deliveries: several hours, one day.
    static func corpus() -> Corpus {
        Corpus(HitStream(HitStreamConfig(count: 8_000, seed: 91, deliveries: 6, span: 150 * 60_000, lateRate: 0.03, badRate: 0.03)).generate())
    }

    /// A broker with the input, each size's output topic, the group's internal topics and `also`.
    static func broker(group: String, also: [String] = []) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 6)
        for topic in sizes.map(\.topic) + also + ["\(group)-repartition", "\(group)-state"] { try broker.createTopic(topic, partitions: 4) }
        try broker.createTopic("dlq", partitions: 2)
        return broker
    }

    static func counted(_ hits: [GeneratedHit]) -> [GeneratedHit.Expected] {
        hits.compactMap { hit in if case .counted(let expected) = hit.truth { expected } else { nil } }
    }

    func run(_ broker: EmbeddedBroker, group: String, window: String = "1m,1h,1d", outputs: String = "agg-1m,agg-1h,agg-1d") throws
        -> TrackpipeBinary.Result
    {
        try TrackpipeBinary.locate().run([
            "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", outputs, "--dlq-topic", "dlq",
            "--window", window, "--group", group, "--log-level", "warning", "-X", "session.timeout.ms=6000",
        ])
    }

    func expectExact(_ broker: EmbeddedBroker, against hits: [GeneratedHit.Expected], sourceLocation: SourceLocation = #_sourceLocation) throws
        -> [TopicContents]
    {
        try Self.sizes.map { size in
            let topic = try TopicContents(broker: broker, output: size.topic, outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
            let wrong = topic.mismatches(against: ReferenceAggregates(hits, windowSize: size.millis))
            #expect(wrong.isEmpty, "\(size.text): \(wrong.prefix(5))", sourceLocation: sourceLocation)
            for object in topic.lastByKey.values {
                let start = (object["windowStart"] as? String).flatMap { RFC3339.parse(Array($0.utf8)) } ?? 0
                let end = (object["windowEnd"] as? String).flatMap { RFC3339.parse(Array($0.utf8)) } ?? 0
                #expect(end - start == size.millis, "\(size.topic) holds windows of its size only", sourceLocation: sourceLocation)
            }
            return topic
        }
    }

    @Test("--window 1m,1h,1d: one read of the input; each size's topic exact against its own reference count, the hour's uniques not the sum of its minutes'; the summary's emitted records are what the three topics received")
    func threeSizesExact() throws {
        let broker = try Self.broker(group: "sizes")
        let corpus = Self.corpus()
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let run = try run(broker, group: "sizes")
        #expect(run.exitCode == 0, "\(run.stderr.suffix(2_000))")
        let summary = try SummaryReading(run.stdout)
        #expect(summary.stages.count == 2 && summary.stages.allSatisfy { $0.balanced == true }, "\(run.stdout)")
        #expect(summary.stages.first?.consumed == corpus.hits.count, "the input is read once, whatever the sizes")
        #expect(summary.stages[0].accepted == summary.stages[1].consumed, "each hit crosses the shuffle once")
        let counted = Self.counted(corpus.hits)
        let topics = try expectExact(broker, against: counted)
        #expect(summary.emitted == topics.map(\.outputRecords).reduce(0, +), "\(run.stdout)")
        // Distinct counts of an hour are not the sum of its minutes': a broadlog clicked in one
        // minute and opened in the next is a dismissal of its minute, not of its hour.
        let minutes = ReferenceAggregates(counted, windowSize: 60_000).byKey.values.map(\.dismissals).reduce(0, +)
        let hours = ReferenceAggregates(counted, windowSize: 3_600_000).byKey.values.map(\.dismissals).reduce(0, +)
        #expect(hours < minutes, "the corpus has broadlogs clicked and opened in different minutes of an hour")
    }

    @Test("a restart goes on with every size: the second run reads the three sizes' windows back from the one state topic and ends exact for each")
    func restartRestoresEverySize() throws {
        let broker = try Self.broker(group: "restart")
        let corpus = Self.corpus()
        let half = corpus.hits.count / 2
        try corpus.produce(0..<half, to: "hits", on: broker)
        let first = try run(broker, group: "restart")
        #expect(first.exitCode == 0, "\(first.stderr.suffix(2_000))")
        try corpus.produce(half..<corpus.hits.count, to: "hits", on: broker)
        let second = try run(broker, group: "restart")
        #expect(second.exitCode == 0, "\(second.stderr.suffix(2_000))")
        let summary = try SummaryReading(second.stdout)
        #expect(summary.stages.first?.consumed == corpus.hits.count - half, "the second run reads only what the first did not")
        _ = try expectExact(broker, against: Self.counted(corpus.hits))
    }

    @Test("the sizes are fixed for the group: a size added or removed is refused before anything is written (64), the added one with the replay that backfills it; one --output-topic for three sizes is refused with the form that works")
    func sizesAreFixedForTheGroup() throws {
        let broker = try Self.broker(group: "fixed", also: ["agg-1w"])
        let corpus = Self.corpus()
        try corpus.produce(0..<2_000, to: "hits", on: broker)
        let first = try run(broker, group: "fixed")
        #expect(first.exitCode == 0, "\(first.stderr.suffix(2_000))")
        let before = try Self.sizes.map { try TopicContents(broker: broker, output: $0.topic, outputPartitions: 4, dlq: "dlq", dlqPartitions: 2).outputRecords }

        let added = try run(broker, group: "fixed", window: "1m,1h,1d,7d", outputs: "agg-1m,agg-1h,agg-1d,agg-1w")
        #expect(added.exitCode == 64, "\(added.stderr.suffix(1_500))")
        #expect(added.stderr.contains("it counts windows of 1m,1h,1d") && added.stderr.contains("trackpipe replay --window 7d"), "\(added.stderr.suffix(1_500))")
        let removed = try run(broker, group: "fixed", window: "1m,1h", outputs: "agg-1m,agg-1h")
        #expect(removed.exitCode == 64, "\(removed.stderr.suffix(1_500))")
        #expect(removed.stderr.contains("holds windows of 1d"), "\(removed.stderr.suffix(1_500))")
        let after = try Self.sizes.map { try TopicContents(broker: broker, output: $0.topic, outputPartitions: 4, dlq: "dlq", dlqPartitions: 2).outputRecords }
        #expect(after == before, "nothing written by the refused runs")

        // Each size's topic is checked as one size's: the minutes sent into the hours' topic.
        let swapped = try run(broker, group: "swapped", outputs: "agg-1h,agg-1m,agg-1d")
        #expect(swapped.exitCode == 64, "\(swapped.stderr.suffix(1_500))")
        #expect(swapped.stderr.contains("the output topic agg-1h holds windows of 1h") && swapped.stderr.contains("this run writes windows of 1m there (--window 1m,1h,1d)") && swapped.stderr.contains("give --output-topic each size's own topic, in the order of --window"), "\(swapped.stderr.suffix(1_500))")

        let oneTopic = try run(broker, group: "other", outputs: "aggregates")
        #expect(oneTopic.exitCode == 64)
        #expect(oneTopic.stderr.contains("--output-topic aggregates: name a topic of its own for each window size") && oneTopic.stderr.contains("tracking-aggregates-1m,tracking-aggregates-1h,tracking-aggregates-1d"), "\(oneTopic.stderr)")
    }
    /// A series' value in a `/metrics` text, nil where it is absent.
    static func value(_ metrics: String, _ series: String) -> Double? {
        metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test("a live run of 1m,1h: /metrics shows each size under the same names (window label); hits too late for the minute and counted in the hour are counted under window=\"1m\", not as dead letters; status names the sizes; the summary on exit says the same count and balances")
    func operationsShowEachSize() throws {
        let group = "ops"
        let broker = try Self.broker(group: group)
        // 90 minutes of hits from an hour's start, on time; a day-old few held back.
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 3_000, seed: 93, deliveries: 6, span: 90 * 60_000, lateRate: 0, badRate: 0.02, staleCount: 20)).generate())
        let start = HitStreamConfig(count: 1).start
        #expect(start % 3_600_000 == 0)
        try corpus.produce(0..<(corpus.hits.count - 20), to: "hits", on: broker)
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "agg-1m,agg-1h", "--dlq-topic", "dlq",
                "--window", "1m,1h", "--retention", "1m", "--group", group, "--commit-interval", "200ms", "--metrics-port", "\(port)",
                "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        defer { worker.signal(SIGKILL) }
        var metrics = ""
        func caughtUp(with messages: Int) -> Bool {
            metrics = (try? HTTPGet.fetch(port: port, path: "/metrics").body) ?? ""
            let sent = Self.value(metrics, "trackpipe_hits_accepted_total{stage=\"normalize\"}")
            return Self.value(metrics, "trackpipe_messages_consumed_total{stage=\"normalize\"}") == Double(messages)
                && sent != nil && Self.value(metrics, "trackpipe_messages_consumed_total{stage=\"aggregate\"}") == sent
        }
        // The aggregate stage's event time near the end: minutes 60 to 80 are expired for the
        // 1m windows (their end plus the retention of 1m passed) and not for the hour 60-120.
        let watermarkNearEnd = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            caughtUp(with: corpus.hits.count - 20)
                && (Self.value(metrics, "trackpipe_watermark_ms{stage=\"aggregate\"}") ?? 0) >= Double(start + 86 * 60_000)
        }
        try #require(watermarkNearEnd, "the worker never read its input; stderr: \(worker.stderr.suffix(2_000))")
        // Sent again now: hits of minutes 60 to 80, too late for their minute and counted in their
        // hour; and the day-old ones, too late for both.
        let late = corpus.hits.prefix(corpus.hits.count - 20).filter { hit in
            guard case .counted(let expected) = hit.truth else { return false }
            return (start + 60 * 60_000..<start + 80 * 60_000).contains(expected.eventTime)
        }.prefix(200)
        #expect(late.count == 200)
        try Corpus(Array(late) + corpus.hits.suffix(20)).produce(0..<(late.count + 20), to: "hits", on: broker)
        try #require(BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { caughtUp(with: corpus.hits.count + late.count) }, "\(worker.stderr.suffix(2_000))")
        for name in ["trackpipe_windows_open", "trackpipe_window_entries", "trackpipe_windows_pending"] {
            for window in ["1m", "1h"] { #expect(Self.value(metrics, "\(name){stage=\"aggregate\",window=\"\(window)\"}") != nil, "\(name) \(window): \(metrics)") }
            #expect(!metrics.contains("\(name){stage=\"aggregate\"}"), "labelled by size, not summed: \(metrics)")
        }
        #expect(Self.value(metrics, "trackpipe_window_entries{stage=\"aggregate\",window=\"1h\"}").map { $0 > 0 } == true, "\(metrics)")
        let lateForMinute = try #require(Self.value(metrics, "trackpipe_hits_too_late_for_size_total{stage=\"aggregate\",window=\"1m\"}"))
        #expect(lateForMinute == Double(late.count), "each hit late for its minute, counted in its hour: \(late.count) sent")
        #expect(Self.value(metrics, "trackpipe_hits_too_late_for_size_total{stage=\"aggregate\",window=\"1h\"}") == 0, "too late for the hour is too late for every size")
        #expect(Self.value(metrics, "trackpipe_windows_finalized_early_total{stage=\"aggregate\",window=\"1h\"}") == 0)

        // status: both groups' commits name the sizes.
        var status = ""
        let named = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds, every: 0.2) {
            status = try TrackpipeBinary.locate().run(["status", "--brokers", broker.bootstrapServers, "--group", group, "--input-topic", "hits"]).stdout
            return status.components(separatedBy: ", windows 1m,1h\n").count == 3
        }
        #expect(named, "\(status)")
        #expect(status.contains("group ops-aggregate (aggregate stage) on ops-repartition: lag "), "\(status)")

        // The summary on exit: the same count, by size, accepted and not dead-lettered.
        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr.suffix(2_000))")
        let summary = try SummaryReading(worker.stdout)
        #expect(summary.stages.count == 2 && summary.stages.allSatisfy { $0.balanced == true }, "\(worker.stdout)")
        #expect(summary.stages.last?.lateForSize == ["1m": Int(lateForMinute)], "\(worker.stdout)")
        let letters = SummaryReading.byReason(try TopicContents(broker: broker, output: "agg-1m", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2).deadLetters)
        let tooLate = summary.deadLettered["too_late"] ?? 0
        #expect(tooLate == 20 && letters["too_late"] == tooLate, "the day-old hits, too late for both sizes, are the only too_late letters: \(letters) \(worker.stdout)")
    }
}

/// The sizes a test of crashes, faults or several instances runs with: the one size it was
/// written for, or 1m,1h,1d from one pipeline, each size to a topic of its own (4 partitions)
/// and each held exact against its own reference count.
struct WindowSizes: Sendable, CustomTestStringConvertible {
    var sizes: [(text: String, millis: Int64, topic: String)]

    static func one(_ text: String, _ millis: Int64) -> WindowSizes { WindowSizes(sizes: [(text, millis, "aggregates")]) }
    static let three = WindowSizes(sizes: SeveralSizesCommandTests.sizes)

    var testDescription: String { "--window " + sizes.map(\.text).joined(separator: ",") }
    /// `--window` and `--output-topic`, a topic per size in `--window`'s order.
    var flags: [String] { ["--window", sizes.map(\.text).joined(separator: ","), "--output-topic", sizes.map(\.topic).joined(separator: ",")] }

    func createTopics(on broker: EmbeddedBroker) throws {
        for topic in sizes.map(\.topic) { try broker.createTopic(topic, partitions: 4) }
    }

    /// Each size's topic as read back now.
    func contents(_ broker: EmbeddedBroker) throws -> [TopicContents] {
        try sizes.map { try TopicContents(broker: broker, output: $0.topic, outputPartitions: 4, dlq: "dlq", dlqPartitions: 2) }
    }

    /// Keys of any size whose record differs from that size's reference count, each naming its size.
    func mismatches(_ contents: [TopicContents], against corpus: Corpus, highestRevision: Bool = false) -> [String] {
        zip(sizes, contents).flatMap { size, topic in
            topic.mismatches(against: corpus.expected(windowSize: size.millis), highestRevision: highestRevision).map { "\(size.text): \($0)" }
        }
    }
}
