import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import Windowing

/// The stages as values: records in, records out, commit points. No Kafka.
@Suite("Stages without Kafka")
struct StageTests {
    static let minute: Int64 = 60_000
    static let window = WindowConfig(size: minute, grace: 10_000, retention: 10 * minute, idleTimeout: 30_000)
    /// The normalize stage's clock in tests about late hits: far past every hit (the latest at
    /// 100 minutes), so that each is old enough to carry its original and moves its source's
    /// event time in full (no mark passes its writer's clock).
    static let writerClock: Int64 = 10 * 60 * minute

    func normalize(repartitions: Int32 = 4, window: WindowConfig = Self.window) -> NormalizeStage {
        NormalizeStage(
            inputTopic: "hits", sourcePartitions: 2, repartitionPartitions: repartitions, limits: NormalizerLimits(),
            maxFutureSkew: 3_600_000, idleTimeout: 30_000, markInterval: 500, originals: OriginalRule(window: window))
    }

    func aggregate() -> AggregateStage<RepartitionInput> {
        AggregateStage(sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: Self.window, shards: 2)
    }

    /// The events of repartition records, in the order they were sent.
    func events(of records: [RecordingSink.Sent]) throws -> [(partition: Int32, deliveryId: String, event: DecodedEvent)] {
        var result: [(partition: Int32, deliveryId: String, event: DecodedEvent)] = []
        for record in records {
            try record.value!.withUnsafeBytes { bytes in
                guard case .events(let decoded) = try RepartitionRecord.decode(bytes) else { return }
                for event in decoded.events {
                    result.append((record.partition!, String(decoding: event.deliveryId, as: UTF8.self), DecodedEvent(event, of: decoded)))
                }
            }
        }
        return result
    }

    @Test("normalize: every delivery always goes to one repartition partition, with its event, source position and original bytes, one record per partition and batch")
    func routesByDelivery() throws {
        let arena = RecordArena()
        var stage = normalize()
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: 0)
        var sink = RecordingSink()
        var records: [PolledRecord] = []
        for index in 0..<40 {
            let delivery = "d\(index % 7)"
            records.append(
                arena.record(
                    partition: Int32(index % 2), offset: Int64(index / 2), key: Array("device-\(index)".utf8),
                    value: rawHit(delivery, "b\(index)", at: 1_000 + Int64(index)), timestamp: 2_000))
        }
        // An hour after the hits (retention 10 minutes): they may be too late, so their originals travel.
        try stage.process(records, now: 3_600_000, into: &sink)
        let routed = sink.to(.repartition)
        #expect(Set(routed.map(\.partition)).count == routed.count, "one record per repartition partition for the batch")
        #expect(routed.allSatisfy { $0.key == nil && $0.timestamp == 2_000 })
        let events = try events(of: routed)
        #expect(events.count == 40)
        var partitionOf: [String: Int32] = [:]
        for (partition, delivery, event) in events {
            #expect(partitionOf[delivery, default: partition] == partition, "\(delivery) split over partitions")
            partitionOf[delivery] = partition
            #expect(partition == DeliveryHash.partition(of: DeliveryID(delivery), count: 4))
            #expect(event.sourcePartitions == 2)
            #expect(event.originalKey?.hasPrefix("device-") == true)
            #expect(event.originalValue?.contains(delivery) == true)
            #expect(event.sourceWatermark.map { $0 >= event.eventTime } == true)
        }
        // Within a partition, events keep the input order of each source.
        for partition in Set(events.map(\.partition)) {
            for source: Int32 in [0, 1] {
                let offsets = events.filter { $0.partition == partition && $0.event.sourcePartition == source }.map(\.event.sourceOffset)
                #expect(offsets == offsets.sorted())
            }
        }
        // Each record gives each of its sources the watermark as of the record's last event of it:
        // the source's running maximum in input order (hit i of the batch is at 1,000 + i ms).
        for partition in Set(events.map(\.partition)) {
            for source: Int32 in [0, 1] {
                let ofSource = events.filter { $0.partition == partition && $0.event.sourcePartition == source }
                guard let last = ofSource.map(\.event.sourceOffset).max() else { continue }
                #expect(ofSource.allSatisfy { $0.event.sourceWatermark == 1_000 + 2 * last + Int64(source) })
            }
        }
        #expect(Set(partitionOf.values).count > 1, "seven deliveries over four partitions use more than one")
        #expect(stage.commitPoints().mapValues(\.offset) == [0: 20, 1: 20])
        #expect(stage.commitPoints().values.allSatisfy { SourceCheckpoint(decoding: $0.metadata)?.epoch == 0 })
        let report = stage.drainReport()
        #expect(report.accounting.consumed == 40 && report.accounting.accepted == 40 && report.accounting.balanced)
    }

    @Test("normalize: a big batch is split into records below the broker's default size limit, losing no event")
    func bigBatchesSplit() throws {
        let arena = RecordArena()
        var stage = normalize(repartitions: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        let padding = String(repeating: "x", count: 2_000)
        let records = (0..<600).map { index in
            arena.record(
                partition: 0, offset: Int64(index), key: Array(padding.utf8),
                value: rawHit("d1", "b\(index)", at: 1_000 + Int64(index)))
        }
        // Old hits: each carries its original (2 KB of key), which fills records fast.
        try stage.process(records, now: Self.writerClock, into: &sink)
        let routed = sink.to(.repartition)
        #expect(routed.count > 1)
        #expect(routed.allSatisfy { $0.value!.count < RepartitionRecord.batchBytes + 3_000 })
        #expect(try events(of: routed).map(\.event.sourceOffset) == (0..<600).map(Int64.init))
    }

    @Test("normalize: with many deliveries (long, short, not ASCII) over small records filled again and again, across batches, every event names its own delivery and goes to its partition")
    func manyDeliveriesOverManyRecords() throws {
        let arena = RecordArena()
        var stage = NormalizeStage(
            inputTopic: "hits", sourcePartitions: 2, repartitionPartitions: 3, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: 30_000, markInterval: 500, batchBytes: 300, originals: OriginalRule(window: Self.window))
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: 0)
        var sink = RecordingSink()
        let deliveries = (0..<40).map { index in
            index % 3 == 0 ? "délivery-\(index)" : index % 3 == 1 ? "d\(index)" : "a-delivery-id-longer-than-sixteen-\(index)"
        }
        var sent: [String] = []
        for batch in 0..<3 {
            var records: [PolledRecord] = []
            for index in 0..<200 {
                let delivery = deliveries[(index * 7 + batch) % (index % 2 == 0 ? 5 : deliveries.count)]
                sent.append(delivery)
                records.append(
                    arena.record(
                        partition: Int32(index % 2), offset: Int64(batch * 100 + index / 2),
                        value: rawHit(delivery, "b\(index)", at: Self.writerClock - 1_000), timestamp: Self.writerClock))
            }
            try stage.process(records, now: Self.writerClock, into: &sink)
        }
        let events = try events(of: sink.to(.repartition))
        #expect(sink.to(.repartition).count > 20, "records filled many times")
        #expect(events.count == sent.count)
        for (partition, delivery, _) in events {
            #expect(partition == DeliveryHash.partition(of: DeliveryID(delivery), count: 3))
        }
        for source in [0, 1] as [Int32] {
            let ordered = events.filter { $0.event.sourcePartition == source }.sorted { $0.event.sourceOffset < $1.event.sourceOffset }
            let expected = sent.enumerated().filter { ($0.offset % 200) % 2 == Int(source) }.map(\.element)
            #expect(ordered.map(\.deliveryId) == expected)
        }
    }

    @Test("aggregate: a repartition record written by another version of trackpipe is dead-lettered as found, with what to do; nothing of it is counted")
    func refusesRecordsOfAnotherVersion() throws {
        let arena = RecordArena()
        var written = try shuffled([(partition: 0, offset: 0, value: rawHit("d1", "b1", at: 1_000))], arena: arena)[0]
        #expect(written.value?.first == RepartitionRecord.version)
        // The same record as another version would tag it (an older one, and a later one).
        var older = written
        older.value![0] = RepartitionRecord.version - 1
        written.value![0] = 9
        older.value!.withUnsafeBytes { raw in
            #expect(throws: RepartitionRecord.DecodingError.self) { try RepartitionRecord.decode(raw) }
            #expect(throws: RepartitionRecord.DecodingError.self) { try RepartitionRecord.event(0, in: raw) }
        }
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process([arena.record(older, offset: 0), arena.record(written, offset: 1)], now: 0, into: &sink)
        // Dead letters go out with the commit that follows (once the state is written).
        try stage.finish(now: 0, into: &sink)
        try stage.commitAll(now: 0, into: &sink)
        let letters = sink.to(.deadLetter)
        #expect(letters.count == 2)
        #expect(letters.map(\.value) == [older.value, written.value], "each record as found")
        for (letter, version) in zip(letters, [RepartitionRecord.version - 1, 9]) {
            let detail = letter.header[DeadLetter.Header.detail] ?? ""
            #expect(letter.header[DeadLetter.Header.reason] == RejectReason.unreadableRepartitionRecord.rawValue)
            #expect(detail.contains("format version \(version), written by another version of trackpipe"), "\(detail)")
            #expect(detail.contains("reads version \(RepartitionRecord.version) only") && detail.contains("same trackpipe version"), "\(detail)")
        }
        #expect(sink.to(.output).isEmpty)
        let a = stage.drainReport().accounting
        #expect(a.accepted == 0 && a.deadLettered == [.unreadableRepartitionRecord: 2] && a.balanced)
    }

    @Test("normalize: bad and tracking-off messages never reach the repartition topic; marks go to every partition")
    func deadLettersFiltersAndMarks() throws {
        let arena = RecordArena()
        var stage = normalize(repartitions: 3)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        let off = Array("{\"action\":\"7\",\"timestamp\":5000,\"message\":{\"data\":{\"_dId\":\"d1\",\"_mId\":\"b1\",\"_acsDeliveryTracking\":\"off\"}}}".utf8)
        try stage.process(
            [
                arena.record(partition: 0, offset: 0, key: [1, 2], value: Array("{not json".utf8), timestamp: 10),
                arena.record(partition: 0, offset: 1, value: off, timestamp: 10),
                arena.record(partition: 0, offset: 2, value: rawHit("d1", "b2", at: 5_000), timestamp: 5_000),
            ], now: 6_000, into: &sink)
        let letters = sink.to(.deadLetter)
        #expect(letters.count == 1)
        #expect(letters[0].value == Array("{not json".utf8) && letters[0].key == [1, 2])
        #expect(letters[0].header[DeadLetter.Header.reason] == "malformed_json")
        #expect(letters[0].header[DeadLetter.Header.sourceOffset] == "0")
        #expect(sink.to(.repartition).count == 1)
        _ = sink.take()
        try stage.tick(now: 6_700, into: &sink)
        let marks = sink.to(.repartition)
        #expect(marks.map(\.partition) == [0, 1, 2])
        let decoded = try marks[0].value!.withUnsafeBytes { try RepartitionRecord.decode($0) }
        guard case .marks(let record) = decoded else {
            Issue.record("not marks")
            return
        }
        #expect(record.origin == RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 2, routedPartitions: 3))
        #expect(record.marks == [SourceMark(source: 0, watermark: 5_000, idle: false)] && record.epochs == [0])
        // Quiet for the idle timeout: the marks say so, and the watermark stays.
        _ = sink.take()
        try stage.tick(now: 40_000, into: &sink)
        let later = try sink.to(.repartition)[0].value!.withUnsafeBytes { try RepartitionRecord.decode($0) }
        guard case .marks(let idleRecord) = later else { return }
        #expect(idleRecord.marks == [SourceMark(source: 0, watermark: 5_000, idle: true, quietSince: 6_000)], "quiet since its last hit was read")
        let a = stage.drainReport().accounting
        #expect(a.deadLettered == [.malformedJSON: 1] && a.filtered == [.trackingOff: 1] && a.accepted == 1 && a.balanced)
    }

    @Test("normalize: a source the marks called idle that delivers again is marked active to every partition before any record of its batch, at the event time it had reached; once only")
    func sourceBackFromIdleIsMarkedFirst() throws {
        let arena = RecordArena()
        var stage = normalize(repartitions: 3)
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: 0)
        var sink = RecordingSink()
        try stage.process(
            [
                arena.record(partition: 0, offset: 0, value: rawHit("d1", "b1", at: 5_000), timestamp: 5_000),
                arena.record(partition: 1, offset: 0, value: rawHit("d2", "b2", at: 5_500), timestamp: 5_500),
            ], now: 6_000, into: &sink)
        try stage.process([arena.record(partition: 1, offset: 1, value: rawHit("d2", "b3", at: 29_000), timestamp: 29_000)], now: 30_000, into: &sink)
        try stage.tick(now: 40_000, into: &sink)
        let idle = try sink.to(.repartition).suffix(3).map { try $0.value!.withUnsafeBytes { try RepartitionRecord.decode($0) } }
        guard case .marks(let idleMarks)? = idle.first else {
            Issue.record("no marks")
            return
        }
        #expect(idleMarks.marks == [SourceMark(source: 0, watermark: 5_000, idle: true, quietSince: 6_000), SourceMark(source: 1, watermark: 29_000, idle: false)])
        _ = sink.take()
        // Source 1's events come first in the batch, and most partitions get none of source 0's:
        // every partition hears that source 0 is back before any of them.
        try stage.process(
            [
                arena.record(partition: 1, offset: 2, value: rawHit("d2", "b4", at: 40_000), timestamp: 40_000),
                arena.record(partition: 0, offset: 1, value: rawHit("d1", "b5", at: 39_000), timestamp: 39_000),
            ], now: 40_100, into: &sink)
        let sent = sink.to(.repartition)
        let decoded = try sent.map { try $0.value!.withUnsafeBytes { try RepartitionRecord.decode($0) } }
        #expect(sent.count > 3 && sent.prefix(3).map(\.partition) == [0, 1, 2], "\(sent.map(\.partition))")
        for record in decoded.prefix(3) {
            guard case .marks(let marks) = record else {
                Issue.record("the batch's first records are not marks")
                continue
            }
            #expect(marks.marks == [SourceMark(source: 0, watermark: 5_000, idle: false), SourceMark(source: 1, watermark: 29_000, idle: false)])
        }
        #expect(decoded.dropFirst(3).allSatisfy { if case .events = $0 { true } else { false } })
        _ = sink.take()
        // Marked active now: its next batch goes out alone.
        try stage.process([arena.record(partition: 0, offset: 2, value: rawHit("d1", "b6", at: 40_050), timestamp: 40_050)], now: 40_200, into: &sink)
        #expect(sink.to(.repartition).count == 1)
    }

    /// Events of one normalize run over `hits`, as the aggregate stage's input (repartition offsets from 0).
    /// One record per hit: each processed as a batch of its own.
    func shuffled(_ hits: [(partition: Int32, offset: Int64, value: [UInt8])], arena: RecordArena) throws -> [RecordingSink.Sent] {
        var stage = normalize(repartitions: 1)
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: 0)
        var sink = RecordingSink()
        for hit in hits {
            try stage.process([arena.record(partition: hit.partition, offset: hit.offset, value: hit.value)], now: Self.writerClock, into: &sink)
        }
        return sink.to(.repartition)
    }

    @Test("aggregate: events sent twice (an upstream crash before its commit) are dropped by source position, not counted twice")
    func duplicatesDropped() throws {
        let arena = RecordArena()
        let events = try shuffled(
            (0..<6).map { (partition: Int32($0 % 2), offset: Int64($0 / 2), value: rawHit("d1", "b\($0)", at: 1_000 + Int64($0))) },
            arena: arena)
        // The upstream re-sends the last four after a crash.
        let input = events + events.suffix(4)
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process(input.enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }, now: 0, into: &sink)
        try stage.finish(now: 0, into: &sink)
        try stage.commitAll(now: 0, into: &sink)
        let out = sink.to(.output)
        #expect(out.count == 1)
        let value = String(decoding: out[0].value!, as: UTF8.self)
        #expect(value.contains("\"impressions\":6"))
        let a = stage.drainReport().accounting
        #expect(a.duplicates == 4 && a.accepted == 6 && a.consumed == 10 && a.balanced)
    }

    @Test("aggregate: an events record found malformed after some of its events were read is dead-lettered whole, none of its events counted; the records around it count")
    func malformedAfterSomeEvents() throws {
        let arena = RecordArena()
        var upstream = normalize(repartitions: 1)
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sent = RecordingSink()
        for batch: Range<Int64> in [0..<3, 3..<6, 6..<9] {
            let hits = batch.map { arena.record(partition: 0, offset: $0, value: rawHit("d1", "b\($0)", at: 1_000 + $0)) }
            try upstream.process(hits, now: Self.writerClock, into: &sent)
        }
        var records = sent.to(.repartition)
        try #require(records.count == 3)
        // The middle record says it holds one event more than it does: its three events are read,
        // then the fourth runs into the end of the events.
        var value = try #require(records[1].value)
        let count = try #require((2..<value.count - 4).first { value[$0..<$0 + 4].elementsEqual([3, 0, 0, 0]) })
        value[count] = 4
        records[1].value = value
        value.withUnsafeBytes { raw in
            #expect(throws: RepartitionRecord.DecodingError.self) { try RepartitionRecord.decode(raw) }
        }
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process(records.enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }, now: 0, into: &sink)
        try stage.finish(now: 0, into: &sink)
        try stage.commitAll(now: 0, into: &sink)
        let letters = sink.to(.deadLetter)
        #expect(letters.map(\.value) == [value], "the record as found")
        #expect(letters.first?.header[DeadLetter.Header.reason] == RejectReason.unreadableRepartitionRecord.rawValue)
        let out = sink.to(.output)
        #expect(out.count == 1)
        #expect(out.first.map { String(decoding: $0.value!, as: UTF8.self).contains("\"impressions\":6") } == true)
        let a = stage.drainReport().accounting
        #expect(a.accepted == 6 && a.deadLettered == [.unreadableRepartitionRecord: 1] && a.balanced)
    }

    @Test("aggregate: after a restart, an event re-sent beyond the checkpoint is dropped by the checkpointed map, never turned into too_late")
    func restoredMapDropsResentEvents() throws {
        let arena = RecordArena()
        // A first owner counts three events of source 0 (offsets 0-2), in a window that is then
        // evicted, and commits: everything processed, nothing held.
        let old = try shuffled((0..<3).map { (partition: 0, offset: Int64($0), value: rawHit("d1", "b\($0)", at: 1_000)) }, arena: arena)
        var first = aggregate()
        try first.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try first.process(old.enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }, now: 0, into: &sink)
        // Far later events of source 1 move event time past the first window's retention.
        let late = try shuffled([(partition: 1, offset: 0, value: rawHit("d2", "x", at: 100 * Self.minute))], arena: arena)
        try first.process([arena.record(late[0], offset: 3)], now: 100_000, into: &sink)
        var idle = RecordingSink()
        var upstream = normalize(repartitions: 1)
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        try upstream.tick(now: 100_000, into: &idle)  // source 0 idle: the watermark follows source 1's far event
        try first.process([arena.record(idle.sent[0], offset: 4)], now: 100_001, into: &sink)
        let point = try #require(first.commitPoints()[0])
        let checkpoint = try #require(Checkpoint(decoding: point.metadata))
        #expect(checkpoint.processedMark == 5)
        #expect(checkpoint.seen.mapValues(\.offset) == [0: 2, 1: 0])
        #expect(Set(checkpoint.seen.values.map(\.incarnation)) == [SourceKey.incarnation(topic: "hits", epoch: 0)])
        #expect(checkpoint.evictedBefore > 2 * Self.minute, "the first window was evicted")

        // The next owner resumes at the commit; the crashed upstream re-sends source 0's events.
        var second = aggregate()
        try second.assignEmpty([PartitionStart(partition: 0, committedOffset: point.offset, metadata: point.metadata)], now: 200_000)
        var out = RecordingSink()
        let reread = (Int(point.offset)..<5).map { offset -> PolledRecord in
            let sent = [old[0], old[1], old[2], late[0], idle.sent[0]][offset]
            return arena.record(sent, offset: Int64(offset))
        }
        try second.process(reread, now: 200_000, into: &out)
        try second.process(old.enumerated().map { arena.record($0.element, offset: 5 + Int64($0.offset)) }, now: 200_001, into: &out)
        try second.commitAll(now: 200_001, into: &out)
        #expect(out.to(.deadLetter).isEmpty, "re-sent events must not become too_late")
        let a = second.drainReport().accounting
        #expect(a.duplicates == 3)
        #expect(a.deadLettered.total == 0 && a.balanced)
    }

    @Test("aggregate: a hit later than retention is dead-lettered with its original key and value and source position")
    func tooLateKeepsOriginalBytes() throws {
        let arena = RecordArena()
        let events = try shuffled([
            (partition: 0, offset: 0, value: rawHit("d1", "b1", at: 100 * Self.minute)),
            (partition: 0, offset: 1, value: rawHit("d1", "b2", at: 1 * Self.minute)),
        ], arena: arena)
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000),
            shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        var upstream = normalize(repartitions: 1)
        try upstream.assign([PartitionStart(partition: 1)], now: 0)
        var marks = RecordingSink()
        try upstream.tick(now: 40_000, into: &marks)  // source 1 idle: only source 0 counts
        try stage.process([arena.record(marks.sent[0], offset: 0), arena.record(events[0], offset: 1)], now: 0, into: &sink)
        try stage.process([arena.record(events[1], offset: 2)], now: 1, into: &sink)
        try stage.commitAll(now: 1, into: &sink)
        let letters = sink.to(.deadLetter)
        #expect(letters.count == 1)
        #expect(letters[0].value == rawHit("d1", "b2", at: 1 * Self.minute))
        #expect(letters[0].header[DeadLetter.Header.reason] == "too_late")
        #expect(letters[0].header[DeadLetter.Header.sourceTopic] == "hits")
        #expect(letters[0].header[DeadLetter.Header.sourcePartition] == "0")
        #expect(letters[0].header[DeadLetter.Header.sourceOffset] == "1")
        #expect(letters[0].header[DeadLetter.Header.detail]?.hasPrefix("too_late: ") == true)
    }

    @Test("aggregate: late hits inside a batched record are dead-lettered with their own original bytes; the others are counted")
    func tooLateInsideABatch() throws {
        let arena = RecordArena()
        var upstream = normalize(repartitions: 1)
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        var shuffle = RecordingSink()
        try upstream.process([arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: 100 * Self.minute))], now: Self.writerClock, into: &shuffle)
        try upstream.process(
            [
                arena.record(partition: 0, offset: 1, key: Array("k1".utf8), value: rawHit("d1", "b1", at: 1 * Self.minute)),
                arena.record(partition: 0, offset: 2, key: Array("k2".utf8), value: rawHit("d1", "b2", at: 100 * Self.minute)),
                arena.record(partition: 0, offset: 3, key: Array("k3".utf8), value: rawHit("d2", "b3", at: 2 * Self.minute)),
            ], now: Self.writerClock, into: &shuffle)
        let records = shuffle.to(.repartition)
        #expect(records.count == 2, "one record per batch")
        var marks = RecordingSink()
        var other = normalize(repartitions: 1)
        try other.assign([PartitionStart(partition: 1)], now: 0)
        try other.tick(now: 40_000, into: &marks)  // source 1 idle: only source 0 counts
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 1),
            window: WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000), shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process([arena.record(marks.sent[0], offset: 0), arena.record(records[0], offset: 1)], now: 0, into: &sink)
        try stage.process([arena.record(records[1], offset: 2)], now: 1, into: &sink)
        try stage.commitAll(now: 1, into: &sink)
        let letters = sink.to(.deadLetter)
        #expect(letters.map(\.value) == [rawHit("d1", "b1", at: 1 * Self.minute), rawHit("d2", "b3", at: 2 * Self.minute)])
        #expect(letters.map(\.keyText) == ["k1", "k3"])
        #expect(letters.map { $0.header[DeadLetter.Header.sourceOffset] } == ["1", "3"])
        #expect(letters.allSatisfy { $0.header[DeadLetter.Header.reason] == "too_late" })
        try stage.finish(now: 2, into: &sink)
        try stage.commitAll(now: 2, into: &sink)
        let out = sink.to(.output).map { String(decoding: $0.value!, as: UTF8.self) }
        #expect(out.contains { $0.contains("\"impressions\":2") }, "a and b2 are counted: \(out)")
        let a = stage.drainReport().accounting
        #expect(a.consumed == 4 && a.accepted == 2 && a.deadLettered == [.tooLate: 2] && a.balanced)
    }

    @Test("two stages: a too_late hit's dead letter carries its original key, value and timestamp byte for byte, read from the repartition record alone: the input's bytes are gone by then")
    func tooLateCarriesItsOriginalWithoutTheInput() throws {
        let key: [UInt8] = [0, 0xFF, 0x80, 0x7F, 0x0A] + Array("device-é".utf8)
        let late = Array("{\"deliveryId\":\"d1\",\"broadlogId\":\"b\\u00e9\",\"action\":\"7\",\"timestamp\":60000,\"note\":\"κ\"}".utf8)
        var input: RecordArena? = RecordArena()
        var upstream = normalize(repartitions: 1)
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        var shuffle = RecordingSink()
        // Each hit arrives at its own time, as a phone sends it.
        try upstream.process(
            [input!.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: 100 * Self.minute), timestamp: 100 * Self.minute)],
            now: Self.writerClock, into: &shuffle)
        try upstream.process([input!.record(partition: 0, offset: 1, key: key, value: late, timestamp: 61_000)], now: Self.writerClock, into: &shuffle)
        // The input topic's retention has passed: nothing of its messages is left to read.
        input = nil
        let arena = RecordArena()
        var marks = RecordingSink()
        var other = normalize(repartitions: 1)
        try other.assign([PartitionStart(partition: 1)], now: 0)
        try other.tick(now: 40_000, into: &marks)  // source 1 idle: only source 0 counts
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 1),
            window: WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000), shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        let records = shuffle.to(.repartition)
        try stage.process([arena.record(marks.sent[0], offset: 0), arena.record(records[0], offset: 1)], now: 0, into: &sink)
        try stage.process([arena.record(records[1], offset: 2)], now: 1, into: &sink)
        try stage.commitAll(now: 1, into: &sink)
        let letters = sink.to(.deadLetter)
        try #require(letters.count == 1)
        #expect(letters[0].key == key)
        #expect(letters[0].value == late)
        #expect(letters[0].timestamp == 61_000)
        #expect(letters[0].header[DeadLetter.Header.reason] == "too_late")
        #expect(letters[0].header[DeadLetter.Header.sourceTopic] == "hits")
        #expect(letters[0].header[DeadLetter.Header.sourceOffset] == "1")
        #expect(!letters[0].headers.contains { $0.key == DeadLetterCut.Header.truncated }, "nothing cut")
    }

    @Test("two stages: a too_late hit whose original was too large to cross whole is dead-lettered cut as DeadLetterCut cuts, saying so, its first bytes exact")
    func tooLateLargeOriginalIsCut() throws {
        let arena = RecordArena()
        let padding = String(repeating: "p", count: 30_000)
        let late = Array("{\"deliveryId\":\"d1\",\"broadlogId\":\"b\",\"action\":\"7\",\"timestamp\":60000,\"pad\":\"\(padding)\"}".utf8)
        var upstream = NormalizeStage(
            inputTopic: "hits", sourcePartitions: 2, repartitionPartitions: 1, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: 30_000, maxOriginalBytes: 8_192,
            originals: OriginalRule(window: WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000)))
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        var shuffle = RecordingSink()
        try upstream.process(
            [arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: 100 * Self.minute), timestamp: 100 * Self.minute)],
            now: Self.writerClock, into: &shuffle)
        try upstream.process([arena.record(partition: 0, offset: 1, key: Array("k".utf8), value: late, timestamp: 61_000)], now: Self.writerClock, into: &shuffle)
        let records = shuffle.to(.repartition)
        #expect(records[1].value!.count < 8_192 + 1_000)
        var marks = RecordingSink()
        var other = normalize(repartitions: 1)
        try other.assign([PartitionStart(partition: 1)], now: 0)
        try other.tick(now: 40_000, into: &marks)
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 1),
            window: WindowConfig(size: Self.minute, grace: 0, retention: Self.minute, idleTimeout: 30_000), shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        try stage.process([arena.record(marks.sent[0], offset: 0), arena.record(records[0], offset: 1)], now: 0, into: &sink)
        try stage.process([arena.record(records[1], offset: 2)], now: 1, into: &sink)
        try stage.commitAll(now: 1, into: &sink)
        let letters = sink.to(.deadLetter)
        try #require(letters.count == 1)
        let expected = try #require(
            late.withUnsafeBytes { value in Array("k".utf8).withUnsafeBytes { key in DeadLetterCut.fitting(key: key, value: value, headers: [], limit: 8_192) } })
        #expect(letters[0].key == Array("k".utf8))
        #expect(letters[0].value == Array(late.prefix(expected.valueBytes)))
        #expect(letters[0].header[DeadLetter.Header.reason] == "too_late")
        #expect(letters[0].header[DeadLetterCut.Header.truncated] == "value")
        #expect(letters[0].header[DeadLetterCut.Header.valueSize] == String(late.count))
        #expect(letters[0].header[DeadLetterCut.Header.valueSHA256] == late.withUnsafeBytes { SHA256.hex($0) })
    }

    @Test("checkpoints round-trip, the seen map is compact, and other tools' metadata is ignored")
    func checkpoints() {
        var seen: [Int32: SourceFloor] = [:]
        let incarnation = SourceKey.incarnation(topic: "tracking-hits", epoch: 0)
        for source in 0..<Int32(Checkpoint.maxSourcePartitions) {
            seen[source] = SourceFloor(incarnation: incarnation, offset: Int64(source) * 1_000_003 + (1 << 40))
        }
        let checkpoint = Checkpoint(
            evictedBefore: 1_795_000_000_000, processedMark: 123_456_789, seen: seen, changelog: 1 << 40, changelogSince: 1 << 39,
            windowSize: 60_000)
        #expect(Checkpoint(decoding: checkpoint.encoded) == checkpoint)
        #expect(checkpoint.encoded.utf8.count <= Checkpoint.maxEncodedBytes)
        let bare = Checkpoint(evictedBefore: -5, processedMark: 0, changelog: 0, windowSize: Self.minute)
        #expect(bare.encoded == "trackpipe/5 evicted=-5 processed=0 changelog=0 since=0 window=60000 stages=2 repartition=g-repartition state=g-state")
        #expect(Checkpoint(decoding: bare.encoded) == bare)
        let identity = "window=60000 stages=2 repartition=g-repartition state=g-state"
        #expect(Checkpoint(decoding: "trackpipe/5 evicted=1 processed=2 changelog=3 since=0 \(identity) seen=%%%") == nil)
        #expect(Checkpoint(decoding: "trackpipe/5 evicted=1 processed=2 since=0 \(identity)") == nil, "the changelog position is not optional")
        #expect(
            Checkpoint(decoding: "trackpipe/5 evicted=1 processed=2 changelog=3 since=0 stages=2 repartition=g-repartition state=g-state") == nil,
            "the window size is not optional")
        #expect(Checkpoint(decoding: "some other tool") == nil)
        #expect(Checkpoint(decoding: nil) == nil)
        let sparse = Checkpoint(
            evictedBefore: 1, processedMark: 2,
            seen: [3: SourceFloor(incarnation: 7, offset: -1), 70_000: SourceFloor(incarnation: incarnation, offset: 0)], changelog: 9, windowSize: Self.minute)
        #expect(Checkpoint(decoding: sparse.encoded) == sparse)
    }

    @Test("a checkpoint of another version of trackpipe is not read: the aggregate stage refuses the group's commit with the remedy, as another tool's")
    func refusesCheckpointsOfAnotherVersion() throws {
        let current = Checkpoint(evictedBefore: 1_000, processedMark: 5, changelog: 2, windowSize: Self.minute).encoded
        let other = current.replacingOccurrences(of: Checkpoint.format + " ", with: "trackpipe/3 ")
        #expect(Checkpoint(decoding: other) == nil)
        #expect(Checkpoint.otherVersion(of: other) == "trackpipe/3")
        #expect(Checkpoint.otherVersion(of: current) == nil && Checkpoint.otherVersion(of: "trackpipe/source epoch=0") == nil)
        var stage = aggregate()
        do {
            try stage.assignEmpty([PartitionStart(partition: 0, committedOffset: 5, metadata: other, logStart: 0)], now: 0)
            Issue.record("a checkpoint of another version was adopted")
        } catch {
            let text = "\(error)"
            #expect(text.contains("another version of trackpipe") && text.contains("trackpipe/3"), "\(text)")
            // Behind the repartition topic a new group is the one remedy: its earliest offset is
            // where the last purge left it, so a reset there is no full recount.
            #expect(text.contains("--group") && !text.contains("--to-earliest") && text.contains("purged"), "the remedy: \(text)")
        }
        #expect(stage.ownedPartitions.isEmpty)
    }

    @Test("the batch-consume guard drops repeated offsets and reports jumps")
    func partitionGuard() {
        var progress = PartitionOffsets(nextToRead: 10)
        #expect(progress.admit(offset: 9) == .stale)
        #expect(progress.admit(offset: 10) == .take)
        #expect(progress.admit(offset: 10) == .stale)
        #expect(progress.admit(offset: 15) == .gap(4))
        #expect(progress.admit(offset: 16) == .take)
        #expect(progress.nextToRead == 17)
        var fresh = PartitionOffsets()
        #expect(fresh.admit(offset: 500) == .take)
        #expect(fresh.admit(offset: 501) == .take)
    }

    @Test("aggregate: partitions kept through an incremental rebalance keep their windows; only a newly assigned partition rereads")
    func keptPartitionsKeepTheirState() throws {
        let arena = RecordArena()
        let events = try shuffled((0..<4).map { (partition: 0, offset: Int64($0), value: rawHit("d1", "b\($0)", at: 1_000)) }, arena: arena)
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: 0)
        var sink = RecordingSink()
        try stage.process(events.prefix(2).enumerated().map { arena.record($0.element, offset: Int64($0.offset)) }, now: 0, into: &sink)
        let kept = stage.commitPoints()[0]
        // A cooperative rebalance: partition 1 leaves, partition 2 arrives with a checkpoint at 3
        // and a changelog whose task record says its previous owner processed through 5 (it
        // crashed between the state write and the commit).
        stage.revoke([1])
        let previous = Checkpoint(evictedBefore: .min, processedMark: 3, changelog: 0, windowSize: Self.minute)
        try stage.assign([PartitionStart(partition: 2, committedOffset: 3, metadata: previous.encoded)], now: 1)
        let task = ChangelogRecord.TaskState(
            processedMark: 5, evictedBefore: .min, source: ChangelogRecord.source(crossesShuffle: true, inputTopic: "hits", windowSizes: [Self.minute]))
        let record = ChangelogRecord.Entry.task(task).encoded
        stage.restoreState([StateRecord(offset: 0, key: record.key, value: record.value)], partition: 2)
        try stage.stateRestored(partition: 2, now: 1)
        #expect(stage.ownedPartitions == [0, 2])
        #expect(stage.commitPoints()[0] == kept, "partition 0's task is the same one")
        _ = stage.drainReport()
        try stage.process(
            events.suffix(2).enumerated().map { arena.record($0.element, offset: 2 + Int64($0.offset)) }
                + [arena.record(partition: 2, offset: 3, key: Array("d9".utf8), value: events[0].value)],
            now: 2, into: &sink)
        let a = stage.drainReport().accounting
        #expect(a.reread == 1, "only the record of the newly assigned partition below its previous owner's mark")
        try stage.finish(now: 3, into: &sink)
        try stage.commitAll(now: 3, into: &sink)
        let counts = sink.to(.output).map { String(decoding: $0.value!, as: UTF8.self) }
        #expect(counts.contains { $0.contains("\"deliveryId\":\"d1\"") && $0.contains("\"impressions\":4") }, "partition 0 kept its first two hits")
    }
}
