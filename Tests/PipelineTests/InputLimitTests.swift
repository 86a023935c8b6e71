import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
@testable import Windowing

/// Every input limit, through both stages that read raw input (normalize, and the single-stage
/// aggregate path): each turns a record away with its own reason, counted by reason, with a
/// detail that says what to do; a record at the limit passes.
@Suite("input limits at the stages")
struct InputLimitTests {
    static let hitTime: Int64 = 1_795_341_600_000

    enum Path: CaseIterable { case normalize, singleStage }

    /// Runs `records` through the stage of `path`; returns the dead letters' (reason, detail)
    /// in record order, and the report.
    func run(_ path: Path, limits: NormalizerLimits, _ records: [PolledRecord]) throws -> (letters: [(String, String)], report: StageReport) {
        var sink = RecordingSink()
        var report: StageReport
        switch path {
        case .normalize:
            var stage = NormalizeStage(
                inputTopic: "hits", sourcePartitions: 1, repartitionPartitions: 2, limits: limits, maxFutureSkew: 3_600_000,
                idleTimeout: 30_000, originals: OriginalRule(window: WindowConfig()))
            try stage.assign([PartitionStart(partition: 0)], now: Self.hitTime)
            try stage.process(records, now: Self.hitTime, into: &sink)
            report = stage.drainReport()
        case .singleStage:
            var stage = AggregateStage(
                sourceTopic: "hits", input: RawHitInput(limits: limits, maxFutureSkew: 3_600_000),
                window: WindowConfig(size: 60_000, grace: 10_000, retention: 600_000, idleTimeout: 30_000), shards: 1)
            try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.hitTime)
            try stage.process(records, now: Self.hitTime, into: &sink)
            // Its dead letters go out with the commit (once the state is written).
            try stage.commitAll(now: Self.hitTime, into: &sink)
            report = stage.drainReport()
        }
        let letters = sink.to(.deadLetter).map { ($0.header[DeadLetter.Header.reason] ?? "", $0.header[DeadLetter.Header.detail] ?? "") }
        return (letters, report)
    }

    @Test("a record with more Kafka headers than the limit is dead-lettered as too_many_headers, saying how many and what to do",
          arguments: Path.allCases)
    func tooManyHeaders(_ path: Path) throws {
        let arena = RecordArena()
        let hit = rawHit("d1", "b1", at: Self.hitTime)
        let records = [64, 65, 0, 1_000].enumerated().map { index, count in
            PolledRecord(
                partition: 0, offset: Int64(index), key: nil, value: arena.bytes(hit), timestamp: Self.hitTime, headerCount: .known(count))
        }
        let (letters, report) = try run(path, limits: NormalizerLimits(), records)
        #expect(letters.map(\.0) == ["too_many_headers", "too_many_headers"])
        #expect(letters.first?.1 == "too_many_headers: the record has 65 Kafka headers, more than the limit of 64; trackpipe reads only a hit's key and value, so have the producer send fewer headers (or raise --max-headers if so many are legitimate)")
        #expect(letters.last?.1.contains("has 1000 Kafka headers") == true)
        #expect(report.accounting.deadLettered == [.tooManyHeaders: 2])
        #expect(report.accounting.accepted == 2, "64 headers (the limit) and none pass")

        // A lower limit is honoured, and 0 turns away any record with a header.
        let strict = try run(path, limits: NormalizerLimits(maxHeaders: 0), records)
        #expect(strict.report.accounting.deadLettered == [.tooManyHeaders: 3])
        #expect(strict.letters.first?.1.contains("more than the limit of 0") == true)
    }

    @Test("the normalizer's limits apply at both stages, each with its reason", arguments: Path.allCases)
    func normalizerLimits(_ path: Path) throws {
        let arena = RecordArena()
        let limits = NormalizerLimits(maxMessageBytes: 200, maxDepth: 3, maxIdBytes: 8, maxHeaders: 4)
        let values: [[UInt8]] = [
            rawHit("d1", "b1", at: Self.hitTime),  // fits every limit
            rawHit("d1", "b1", at: Self.hitTime) + Array(repeating: UInt8(ascii: " "), count: 200),  // too_large
            Array("{\"a\":{\"b\":{\"c\":{\"d\":1}}},\"deliveryId\":\"d1\"}".utf8),  // too_deep
            rawHit("d1", "broadlog-id-too-long", at: Self.hitTime),  // id_too_long
        ]
        let records = values.enumerated().map { index, value in
            PolledRecord(partition: 0, offset: Int64(index), key: nil, value: arena.bytes(value), timestamp: Self.hitTime, headerCount: .known(4))
        }
        let (letters, report) = try run(path, limits: limits, records)
        #expect(letters.map(\.0) == ["too_large", "too_deep", "id_too_long"])
        #expect(letters.allSatisfy { !$0.1.isEmpty })
        #expect(report.accounting.accepted == 1)
    }
}

@Suite("limit metrics")
struct LimitMetricsTests {
    /// The value of the series `name` with `stage`, from the exposition text.
    static func value(_ name: String, stage: String, reason: String? = nil, in text: String) -> String? {
        text.split(separator: "\n").first { line in
            line.hasPrefix(name + "{") && line.contains("stage=\"\(stage)\"") && (reason.map { line.contains("reason=\"\($0)\"") } ?? true)
        }.flatMap { $0.split(separator: " ").last.map(String.init) }
    }

    @Test("too_many_headers is a dead-letter series from the start; the memory cap counts evictions and windows finalized early")
    func limitSeries() {
        let metrics = PipelineMetrics()
        let normalize = metrics.stage("normalize")
        let aggregate = metrics.stage("aggregate")
        // What the runner reports as it begins: the stage's window sizes.
        aggregate.gauges(StageGauges(counting: WindowConfig(size: 60_000)), now: 0)
        var text = String(decoding: metrics.registry.emitToBuffer(), as: UTF8.self)
        #expect(Self.value("trackpipe_dead_letters_total", stage: "normalize", reason: "too_many_headers", in: text) == "0")
        #expect(Self.value("trackpipe_capacity_evictions_total", stage: "aggregate", in: text) == "0")
        #expect(Self.value("trackpipe_windows_finalized_early_total", stage: "aggregate", in: text) == "0")

        var report = StageReport()
        report.accounting.deadLettered[.tooManyHeaders] = 3
        normalize.record(report)
        var evicting = StageReport()
        var eviction = CapacityEviction(
            entriesBefore: 120, maxEntries: 100, entriesFreed: 50, windowsEvicted: 4, windowsEmittedEarly: 1,
            oldestWindowStart: 0, newestWindowStart: 60_000, newHorizon: 120_000)
        eviction.windowsEvictedBySize = [60_000: 4]
        evicting.capacityEvictions = [eviction, eviction]
        aggregate.record(evicting)
        text = String(decoding: metrics.registry.emitToBuffer(), as: UTF8.self)
        #expect(Self.value("trackpipe_dead_letters_total", stage: "normalize", reason: "too_many_headers", in: text) == "3")
        #expect(Self.value("trackpipe_capacity_evictions_total", stage: "aggregate", in: text) == "2")
        #expect(Self.value("trackpipe_windows_finalized_early_total", stage: "aggregate", in: text) == "8")
    }
}
