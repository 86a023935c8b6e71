import Kafka
import Testing
import TrackingDomain
import Windowing

@testable import Pipeline
@testable import RecordFormats
@testable import Runner

/// Where the group's records of a source begin in a repartition partition, and what a window
/// task without a commit makes of it (docs/scale-out.md, "Lost input"): the stages as values,
/// no Kafka.
@Suite("lost input: where a source's records begin behind the shuffle")
struct LostInputStageTests {
    static let window = WindowConfig(size: 60_000, grace: 10_000, retention: 600_000, idleTimeout: 30_000)

    func normalize(repartitions: Int32) -> NormalizeStage {
        NormalizeStage(
            inputTopic: "hits", sourcePartitions: 2, repartitionPartitions: repartitions, limits: NormalizerLimits(),
            maxFutureSkew: 3_600_000, idleTimeout: 30_000, markInterval: 500)
    }

    func aggregate() -> AggregateStage<RepartitionInput> {
        AggregateStage(sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: Self.window, shards: 1)
    }

    /// Each source a repartition record names, with whether the record begins the group's
    /// records of it in its partition.
    func beginnings(_ sent: RecordingSink.Sent) throws -> [Int32: Bool] {
        try sent.value!.withUnsafeBytes { bytes in
            switch try RepartitionRecord.decode(bytes) {
            case .events(let record): Dictionary(uniqueKeysWithValues: zip(record.marks.map(\.source), record.begins))
            case .marks(let record): Dictionary(uniqueKeysWithValues: zip(record.marks.map(\.source), record.begins))
            }
        }
    }

    /// Hits of delivery `delivery` at offsets `offsets` of input partition `partition`.
    func hits(_ arena: RecordArena, partition: Int32, _ offsets: Range<Int64>, delivery: String = "d1") -> [PolledRecord] {
        offsets.map { offset in
            arena.record(partition: partition, offset: offset, value: rawHit(delivery, "b\(partition)-\(offset)", at: 1_000 + offset), timestamp: 2_000)
        }
    }

    @Test("an owner without a commit marks the first record it sends each repartition partition naming its source, and gives no commit point until every partition has one")
    func beginningRecords() throws {
        let arena = RecordArena()
        var stage = normalize(repartitions: 4)
        try stage.assign([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process(hits(arena, partition: 0, 0..<5), now: 1, into: &sink)
        let target = DeliveryHash.partition(of: "d1", count: 4)
        let first = sink.take()
        #expect(first.count == 1 && first[0].partition == target)
        #expect(try beginnings(first[0]) == [0: true], "the first record to its partition begins the source's records there")
        #expect(stage.commitPoints().isEmpty, "three partitions have nothing of the source yet")
        try stage.process(hits(arena, partition: 0, 5..<8), now: 2, into: &sink)
        #expect(try sink.take().map(beginnings) == [[0: false]], "only the first begins")
        // A commit before the first marks sends them first: to the other partitions as their
        // beginning, to the one begun as an ordinary mark.
        try stage.prepareCommit(into: &sink)
        let marks = sink.take()
        #expect(marks.count == 4)
        for record in marks { #expect(try beginnings(record) == [0: record.partition != target]) }
        #expect(stage.commitPoints().mapValues(\.offset) == [0: 8])
        try stage.tick(now: 10_000, into: &sink)
        #expect(try sink.take().allSatisfy { try beginnings($0) == [0: false] }, "later marks begin nothing")
    }

    @Test("an owner resuming a commit of the normalize stage begins nothing; one resuming another tool's commit, an offset reset or a commit beyond the log begins the group's line again")
    func whoBegins() throws {
        let arena = RecordArena()
        let trackpipe = SourceCheckpoint(epoch: 0, progress: 500).encoded
        let cases: [(PartitionStart, Bool)] = [
            (PartitionStart(partition: 0, committedOffset: 10, metadata: trackpipe, logStart: 0, logEnd: 40), false),
            (PartitionStart(partition: 0, committedOffset: 10, metadata: nil, logStart: 0, logEnd: 40), true),
            (PartitionStart(partition: 0, committedOffset: 10, metadata: "kafka-streams", logStart: 0, logEnd: 40), true),
            (PartitionStart(partition: 0, committedOffset: 90, metadata: trackpipe, logStart: 0, logEnd: 40), true),
            (PartitionStart(partition: 0), true),
        ]
        for (start, begins) in cases {
            var stage = normalize(repartitions: 1)
            try stage.assign([start], now: 0)
            var sink = RecordingSink()
            try stage.process(hits(arena, partition: 0, 40..<42), now: 1, into: &sink)
            #expect(try sink.take().map(beginnings) == [[0: begins]], "\(start)")
            #expect(stage.commitPoints()[0]?.offset == 42, "its one repartition partition has what it sent: the point is given")
        }
    }

    /// Records a normalize owner without a commit sends to the one repartition partition: its
    /// beginning (events of input partition 0), then marks, then more events.
    func repartitionRecords(_ arena: RecordArena) throws -> [RecordingSink.Sent] {
        var stage = normalize(repartitions: 1)
        try stage.assign([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process(hits(arena, partition: 0, 0..<3), now: 1, into: &sink)
        try stage.tick(now: 1_000, into: &sink)
        try stage.process(hits(arena, partition: 0, 3..<6), now: 1_001, into: &sink)
        return sink.to(.repartition)
    }

    @Test("a window task without a commit that first reads a record of a source not beginning its records reports every record before its first read; from the beginning, or with a commit, nothing")
    func firstRead() throws {
        let arena = RecordArena()
        let records = try repartitionRecords(arena)
        #expect(records.count == 3)
        #expect(try records.map(beginnings) == [[0: true], [0: false], [0: false]])
        func read(from first: Int, start: PartitionStart = PartitionStart(partition: 0)) throws -> [InputSpan] {
            var stage = aggregate()
            try stage.assignEmpty([start], now: 0)
            var sink = RecordingSink()
            let polled = records.enumerated().dropFirst(first).map { arena.record($0.element, offset: Int64($0.offset)) }
            try stage.process(polled, now: 2_000, into: &sink)
            return stage.drainReport().unread
        }
        #expect(try read(from: 0).isEmpty, "the source's records begin where the task began reading")
        let gone = try read(from: 1)
        #expect(gone.map { [Int64($0.partition.partition), $0.from ?? -1, $0.to] } == [[0, -1, 1]], "\(gone)")
        #expect(gone.first?.reason.contains("input partitions [0]") == true, "\(gone)")
        let checkpoint = Checkpoint(evictedBefore: 0, processedMark: 1, changelog: 0, windowSize: Self.window.lengths[0])
        #expect(
            try read(from: 1, start: PartitionStart(partition: 0, committedOffset: 1, metadata: checkpoint.encoded, logStart: 1, logEnd: 3)).isEmpty,
            "with a commit, the runner compares it with the log start")
    }

    @Test("a source first named later without its beginning is reported with where the task began reading; a new owner's beginning is not")
    func sourceFirstNamedLater() throws {
        let arena = RecordArena()
        var records = try repartitionRecords(arena)
        // Input partition 1: one owner without a commit (its beginning), and one that resumes a
        // commit (no beginning), each sending one record.
        for start in [PartitionStart(partition: 1), PartitionStart(partition: 1, committedOffset: 3, metadata: SourceCheckpoint(epoch: 0).encoded, logStart: 0, logEnd: 9)] {
            var stage = normalize(repartitions: 1)
            try stage.assign([start], now: 0)
            var sink = RecordingSink()
            try stage.process(hits(arena, partition: 1, 3..<4), now: 1, into: &sink)
            records += sink.to(.repartition)
        }
        func unread(_ offsets: [Int]) throws -> [InputSpan] {
            var stage = aggregate()
            try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
            var sink = RecordingSink()
            for offset in offsets {
                try stage.process([arena.record(records[offset], offset: Int64(offset))], now: 2_000, into: &sink)
            }
            return stage.drainReport().unread
        }
        #expect(try unread([0, 1, 2, 3]).isEmpty, "partition 1's first record begins its records")
        let later = try unread([0, 1, 2, 4])
        #expect(later.map { [$0.from ?? -1, $0.to] } == [[-1, 0]] && later.first?.reason.contains("[1]") == true, "\(later)")
    }

    @Test("a window task reading back state of owners that never committed reports every record before its first read, for the log start to judge: only reading their records again rebuilds the duplicate filter")
    func restoredWithoutACommit() throws {
        let arena = RecordArena()
        let records = try repartitionRecords(arena)
        var first = aggregate()
        try first.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try first.process(records.enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }, now: 2_000, into: &sink)
        // The state is written, and the owner dies before its commit.
        try first.prepareCommit(into: &sink)
        var next = aggregate()
        try next.assignRestoring([PartitionStart(partition: 0)], state: sink, now: 3_000)
        var out = RecordingSink()
        try next.process([arena.record(records[2], offset: 2)], now: 3_001, into: &out)
        let unread = next.drainReport().unread
        #expect(unread.map { [$0.from ?? -1, $0.to] } == [[-1, 2]], "\(unread)")
        #expect(InputLoss.lost(InputSpan(partition: TopicPartition(topic: "r", partition: 0), from: nil, to: 2, cause: .firstRead("")), logStart: 0) == nil, "nothing deleted: nothing lost")
        #expect(InputLoss.lost(InputSpan(partition: TopicPartition(topic: "r", partition: 0), from: nil, to: 2, cause: .firstRead("")), logStart: 2).map(\.to) == 2, "the log start passed both records the owners before read")
    }
}
