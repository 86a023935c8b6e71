import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import Windowing

/// The normalize stage's lanes sum up their chunks per run of a source partition, and the
/// sequential pass settles each record's source watermarks and beginnings from them: the
/// records must say what a pass over every hit in input order would.
@Suite("Normalize lanes")
struct NormalizeLanesTests {
    static let now: Int64 = 900_000

    /// One input record: a hit at `time` (nil: a message that is not a hit), arrived at `arrival`.
    struct Input {
        var partition: Int32
        var offset: Int64
        var time: Int64?
        var arrival: Int64?
    }

    /// Runs of three sources over several lanes, a source coming back within a lane and in the
    /// next: event times out of order and going back on the whole (so that what a lane sees of a
    /// source alone is behind what the source has reached), some clamped by their arrival or by
    /// the stage's clock, some records rejected, and a first batch that moved source 0 on before.
    static func batches() -> [[Input]] {
        var state: UInt64 = 7
        func next(_ bound: Int64) -> Int64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int64((state >> 33) % UInt64(bound))
        }
        var offsets: [Int32: Int64] = [:]
        func run(_ partition: Int32, _ count: Int) -> [Input] {
            (0..<count).map { index in
                let offset = offsets[partition, default: 0]
                offsets[partition] = offset + 1
                let time = 890_000 - 400 * offset + next(30_000)
                let arrival: Int64? = index % 5 == 0 ? nil : time + next(20_000) - 10_000
                return Input(partition: partition, offset: offset, time: index % 37 == 3 ? nil : time, arrival: arrival)
            }
        }
        let first = run(0, 20).map { Input(partition: $0.partition, offset: $0.offset, time: $0.time.map { _ in 895_000 }, arrival: nil) }
        let second = run(0, 150) + run(1, 180) + run(0, 120) + run(2, 300) + run(1, 90) + run(0, 260) + run(2, 100)
        return [first, second]
    }

    @Test("every record carries each source's running watermark in input order as of the record's last event of it, and the first record naming a source in a partition begins it, whatever the lanes", arguments: [1, 3])
    func settledAsInInputOrder(shards: Int) throws {
        let arena = RecordArena()
        var stage = NormalizeStage(
            inputTopic: "hits", sourcePartitions: 3, repartitionPartitions: 4, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: 30_000, shards: shards)
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1), PartitionStart(partition: 2)], now: 0)
        var sink = RecordingSink()
        // What a pass in input order gives: each source's watermark after each of its hits.
        var watermark: [Int32: Int64] = [:]
        var after: [Int32: [Int64: Int64]] = [:]
        var accepted = 0
        for batch in Self.batches() {
            let records = batch.map { input in
                arena.record(
                    partition: input.partition, offset: input.offset,
                    value: input.time.map { rawHit("d\(input.offset % 11)", "b\(input.offset)", at: $0) } ?? Array("not a hit".utf8),
                    timestamp: input.arrival)
            }
            try stage.process(records, now: Self.now, into: &sink)
            for input in batch {
                guard let time = input.time else { continue }
                let seen = EventTimeMath.latest(watermark[input.partition], min(time, input.arrival ?? time, Self.now))
                watermark[input.partition] = seen
                after[input.partition, default: [:]][input.offset] = seen
                accepted += 1
            }
        }
        var begun: Set<[Int32]> = []
        var events = 0
        for record in sink.to(.repartition) {
            try record.value!.withUnsafeBytes { bytes in
                guard case .events(let decoded) = try RepartitionRecord.decode(bytes) else { return }
                events += decoded.events.count
                for (mark, begins) in zip(decoded.marks, decoded.begins) {
                    let last = decoded.events.filter { $0.sourcePartition == mark.source }.map(\.sourceOffset).max()!
                    #expect(mark.watermark == after[mark.source]?[last], "source \(mark.source) at offset \(last)")
                    #expect(begins == begun.insert([record.partition!, mark.source]).inserted, "only the first record naming it begins it")
                }
            }
        }
        #expect(events == accepted)
        let report = stage.drainReport()
        #expect(report.accounting.accepted == accepted && report.accounting.balanced)
        #expect(report.accounting.deadLettered.total == Self.batches().joined().count - accepted)
        for (partition, point) in stage.commitPoints() {
            #expect(point.offset == Self.batches().joined().filter { $0.partition == partition }.count)
            #expect(SourceCheckpoint(decoding: point.metadata)?.progress == watermark[partition])
        }
    }
}
