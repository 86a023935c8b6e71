import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import RecordFormats
@testable import Runner

/// Ordinary situations of a real fleet that once lost hits silently, each reproduced at the
/// stages without Kafka: a device clock ahead, a takeover with a correction in flight, a topic
/// switched under a group, a pause of every source, a group switched between modes.
@Suite("counts on real traffic")
struct RealTrafficTests {
    static let minute: Int64 = 60_000
    static let hour: Int64 = 60 * minute
    /// The collector's clock when the hits arrive.
    static let now: Int64 = 1_795_300_000_000

    func normalize(topic: String = "hits", sources: Int = 2, idleTimeout: Int64 = 2_000, window: WindowConfig = WindowConfig(idleTimeout: 2_000)) -> NormalizeStage {
        NormalizeStage(
            inputTopic: topic, sourcePartitions: sources, repartitionPartitions: 1, limits: NormalizerLimits(),
            maxFutureSkew: Self.hour, idleTimeout: idleTimeout, markInterval: 500, originals: OriginalRule(window: window))
    }

    func aggregate(window: WindowConfig = WindowConfig(idleTimeout: 2_000)) -> AggregateStage<RepartitionInput> {
        AggregateStage(sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: window, shards: 1)
    }

    /// The repartition records `hits` become, each (partition, offset, value, Kafka timestamp)
    /// processed as a batch of its own.
    func shuffle(
        _ hits: [(partition: Int32, offset: Int64, value: [UInt8], timestamp: Int64)], through stage: inout NormalizeStage,
        arena: RecordArena, now: Int64 = RealTrafficTests.now
    ) throws -> [RecordingSink.Sent] {
        var sink = RecordingSink()
        for hit in hits {
            try stage.process(
                [arena.record(partition: hit.partition, offset: hit.offset, value: hit.value, timestamp: hit.timestamp)], now: now,
                into: &sink)
        }
        return sink.to(.repartition)
    }

    /// Hands `records` to `stage` as one batch at offsets from `first` of repartition partition 0.
    func feed(
        _ records: [RecordingSink.Sent], from first: Int64, to stage: inout AggregateStage<RepartitionInput>, arena: RecordArena,
        now: Int64, into sink: inout RecordingSink
    ) throws {
        try stage.process(records.enumerated().map { arena.record($0.element, offset: first + Int64($0.offset)) }, now: now, into: &sink)
    }

    /// The last value per key of the output records, as text.
    func lastRecords(_ sink: RecordingSink) -> [String: String] {
        var last: [String: String] = [:]
        for record in sink.to(.output) { last[record.keyText ?? ""] = String(decoding: record.value!, as: UTF8.self) }
        return last
    }

    // MARK: 1

    @Test("a device clock ahead of the collector moves no one's event time: the ordinary hits after a future-stamped one are counted, not too_late")
    func deviceClockAhead() throws {
        let arena = RecordArena()
        var upstream = normalize()
        try upstream.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: Self.now)
        // One hit per partition stamped 50 minutes after its arrival (within --max-future-skew).
        var hits: [(partition: Int32, offset: Int64, value: [UInt8], timestamp: Int64)] = [
            (0, 0, rawHit("fast", "b0", at: Self.now + 50 * Self.minute), Self.now),
            (1, 0, rawHit("fast", "b1", at: Self.now + 50 * Self.minute), Self.now),
        ]
        // Then ten ordinary hits that happened 15 minutes ago.
        for index in 0..<10 {
            hits.append((Int32(index % 2), 1 + Int64(index / 2), rawHit("d1", "r\(index)", at: Self.now - 15 * Self.minute), Self.now + 1_000))
        }
        let events = try shuffle(hits, through: &upstream, arena: arena)
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var sink = RecordingSink()
        // The future-stamped hits come first, in a batch of their own: event time has moved by
        // the time the ordinary ones are judged.
        try feed(Array(events.prefix(2)), from: 0, to: &stage, arena: arena, now: Self.now + 1_000, into: &sink)
        try feed(Array(events.dropFirst(2)), from: 2, to: &stage, arena: arena, now: Self.now + 1_000, into: &sink)
        try stage.finish(now: Self.now + 2_000, into: &sink)
        try stage.commitAll(now: Self.now + 2_000, into: &sink)
        #expect(sink.to(.deadLetter).count == 0, "\(sink.to(.deadLetter).map { $0.header[DeadLetter.Header.detail] ?? "" })")
        let d1 = lastRecords(sink).first { $0.key.hasPrefix("d1@") }?.value ?? ""
        #expect(d1.contains("\"impressions\":10"), "\(d1)")
        #expect(stage.drainReport().accounting.accepted == 12)
    }

    @Test("the one-stage path too: a future-stamped hit does not make the ordinary hits after it too_late")
    func deviceClockAheadOneStage() throws {
        let arena = RecordArena()
        var stage = AggregateStage(
            sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: Self.hour),
            window: WindowConfig(idleTimeout: 2_000), shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var records = [arena.record(partition: 0, offset: 0, value: rawHit("fast", "b0", at: Self.now + 50 * Self.minute), timestamp: Self.now)]
        for index in 0..<10 {
            records.append(
                arena.record(partition: 0, offset: 1 + Int64(index), value: rawHit("d1", "r\(index)", at: Self.now - 15 * Self.minute), timestamp: Self.now))
        }
        var sink = RecordingSink()
        try stage.process(Array(records.prefix(1)), now: Self.now, into: &sink)
        try stage.process(Array(records.dropFirst()), now: Self.now + 1, into: &sink)
        try stage.finish(now: Self.now + 2, into: &sink)
        try stage.commitAll(now: Self.now + 2, into: &sink)
        #expect(sink.to(.deadLetter).count == 0)
        #expect(lastRecords(sink).first { $0.key.hasPrefix("d1@") }?.value.contains("\"impressions\":10") == true)
    }

    // MARK: 2

    @Test("a takeover whose first batch corrects an emitted window and evicts it emits the correction")
    func takeoverKeepsTheCorrection() throws {
        let arena = RecordArena()
        let window = WindowConfig(size: Self.minute, grace: 0, retention: 10 * Self.minute, idleTimeout: 30_000)
        func stage() -> AggregateStage<RawHitInput> {
            AggregateStage(
                sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: Self.hour), window: window,
                shards: 1)
        }
        let base = Self.now - Self.now % Self.minute
        // Each hit arrives a second after it happened.
        let input = [
            ("d1", "a", base + 10_000), ("d1", "b", base + 20_000), ("d1", "c", base + 30_000),
            ("d2", "x", base + 2 * Self.minute),  // moves event time past d1's window: emitted, revision 3
            ("d1", "d", base + 40_000),  // late, within retention: the correction, revision 4
            ("d3", "y", base + 20 * Self.minute),  // far ahead: d1's window is evicted
        ].enumerated().map { index, hit in
            arena.record(partition: 0, offset: Int64(index), value: rawHit(hit.0, hit.1, at: hit.2), timestamp: hit.2 + 1_000)
        }

        // The previous owner processed the first four records, emitted d1's window and committed.
        var previous = stage()
        try previous.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var before = RecordingSink()
        try previous.process(Array(input.prefix(4)), now: Self.now, into: &before)
        let point = try #require(try previous.commitAll(now: Self.now, into: &before)[0])
        #expect(lastRecords(before).first { $0.key.hasPrefix("d1@") }?.value.contains("\"revision\":3") == true)

        // The new owner reads the state back; its first batch holds the correction and the eviction.
        var next = stage()
        try next.assignRestoring(
            [PartitionStart(partition: 0, committedOffset: point.offset, metadata: point.metadata)], state: before, now: Self.now)
        var after = RecordingSink()
        try next.process(Array(input[Int(point.offset)...]), now: Self.now, into: &after)
        try next.commitAll(now: Self.now, into: &after)
        let d1 = lastRecords(after).first { $0.key.hasPrefix("d1@") }?.value ?? "none"
        #expect(d1.contains("\"revision\":4") && d1.contains("\"impressions\":4"), "the correction was lost: \(d1)")
    }

    // MARK: 3

    @Test("another input topic under the same group: its hits are new, never dropped as duplicates of the old topic's positions")
    func inputTopicSwitched() throws {
        let arena = RecordArena()
        var first = normalize(topic: "t1")
        try first.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: Self.now)
        let old = try shuffle(
            (0..<20).map { (Int32($0 % 2), Int64($0 / 2), rawHit("d1", "b\($0)", at: Self.now - Self.minute), Self.now) }, through: &first,
            arena: arena)
        var stage = aggregate()
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var sink = RecordingSink()
        try feed(old, from: 0, to: &stage, arena: arena, now: Self.now, into: &sink)
        let point = try #require(stage.commitPoints()[0])

        // The worker restarts reading t2: its offsets start at 0 again.
        var second = normalize(topic: "t2")
        try second.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: Self.now)
        let new = try shuffle(
            (0..<6).map { (Int32($0 % 2), Int64($0 / 2), rawHit("d2", "n\($0)", at: Self.now - Self.minute), Self.now) }, through: &second,
            arena: arena)
        // Both the running task and one restored from its checkpoint count them.
        var restored = aggregate()
        try restored.assignEmpty([PartitionStart(partition: 0, committedOffset: point.offset, metadata: point.metadata)], now: Self.now)
        var restoredSink = RecordingSink()
        let replay = Array(old[Int(point.offset)...])
        try feed(replay + new, from: point.offset, to: &restored, arena: arena, now: Self.now, into: &restoredSink)
        try feed(new, from: Int64(old.count), to: &stage, arena: arena, now: Self.now, into: &sink)
        for (name, var counted) in [("running", stage), ("restored", restored)] {
            let a = counted.drainReport().accounting
            #expect(a.duplicates == 0, "\(name): the new topic's hits were dropped as duplicates")
        }
        try stage.finish(now: Self.now + 1, into: &sink)
        try stage.commitAll(now: Self.now + 1, into: &sink)
        #expect(lastRecords(sink).first { $0.key.hasPrefix("d2@") }?.value.contains("\"impressions\":6") == true)
    }

    // MARK: 4

    @Test("a pause of every source longer than the idle timeout does not make a lagging partition's backlog too_late")
    func pauseKeepsTheLaggingPartition() throws {
        let arena = RecordArena()
        var upstream = normalize(idleTimeout: 2_000)
        try upstream.assignEmpty([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: Self.now)
        // Partition 0 carries hits three hours old, partition 1 hits one hour old.
        let before = try shuffle(
            [
                (0, 0, rawHit("slow", "a", at: Self.now - 3 * Self.hour), Self.now),
                (1, 0, rawHit("fast", "b", at: Self.now - Self.hour), Self.now),
            ], through: &upstream, arena: arena)
        var stage = aggregate(window: WindowConfig(retention: Self.hour, idleTimeout: 2_000))
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var sink = RecordingSink()
        try feed(before, from: 0, to: &stage, arena: arena, now: Self.now, into: &sink)
        // A 5 s pause: both sources are reported idle.
        var marks = RecordingSink()
        try upstream.tick(now: Self.now + 5_000, into: &marks)
        try feed(marks.to(.repartition), from: 2, to: &stage, arena: arena, now: Self.now + 5_000, into: &sink)
        try stage.tick(now: Self.now + 5_001, into: &sink)
        // Partition 0's backlog goes on: 2 h 50 min old, well within retention of its own progress.
        let after = try shuffle(
            [(0, 1, rawHit("slow", "c", at: Self.now - 3 * Self.hour + 10 * Self.minute), Self.now + 5_002)], through: &upstream, arena: arena,
            now: Self.now + 5_002)
        try feed(after, from: 3, to: &stage, arena: arena, now: Self.now + 5_002, into: &sink)
        try stage.commitAll(now: Self.now + 5_002, into: &sink)
        #expect(sink.to(.deadLetter).count == 0, "\(sink.to(.deadLetter).map { $0.header[DeadLetter.Header.detail] ?? "" })")
        #expect(stage.drainReport().accounting.accepted == 3)
    }

    // MARK: 5

    @Test("a window stage refuses to resume from a commit without a window checkpoint (another mode's, or another tool's), saying what to do")
    func refusesAForeignCommit() throws {
        var stage = AggregateStage(
            sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: Self.hour), window: WindowConfig(),
            shards: 1)
        // The normalize stage of the two-stage mode committed offset 500 on the same group.
        let normalizeCommit = SourceCheckpoint(epoch: 0).encoded
        #expect(throws: PipelineError.self) {
            try stage.assignEmpty([PartitionStart(partition: 0, committedOffset: 500, metadata: normalizeCommit, logStart: 0)], now: Self.now)
        }
        do {
            try stage.assignEmpty([PartitionStart(partition: 0, committedOffset: 500, metadata: nil, logStart: 0)], now: Self.now)
            Issue.record("a plain commit in the middle of the partition was adopted")
        } catch {
            #expect("\(error)".contains("--group"), "the error says what to do: \(error)")
        }
        // A plain commit at the very beginning of the partition is a full recount: accepted.
        try stage.assignEmpty([PartitionStart(partition: 1, committedOffset: 0, metadata: nil, logStart: 0)], now: Self.now)
        #expect(stage.ownedPartitions == [1])
        // Not on the repartition topic, whose beginning is where the last purge left it: there the
        // earliest offset recounts only what is left, wherever the log starts.
        for logStart: Int64 in [0, 700] {
            let start = PartitionStart(partition: 2, committedOffset: logStart, metadata: nil, logStart: logStart)
            guard case .refuse(let refusal) = TestGroup.twoStages().judge(.commit(start, topic: "g-repartition")) else {
                Issue.record("a plain commit at the repartition topic's log start \(logStart) was adopted")
                continue
            }
            #expect("\(refusal)".contains("--group") && !"\(refusal)".contains("--to-earliest"))
        }
        // And the normalize stage refuses a window checkpoint (the one-stage mode's) the same way.
        var upstream = normalize()
        let window = Checkpoint(evictedBefore: 0, processedMark: 10, changelog: 0, windowSize: Self.minute).encoded
        for metadata in [window, window.replacingOccurrences(of: Checkpoint.format + " ", with: "trackpipe/3 ")] {
            #expect(throws: PipelineError.self, "\(metadata)") {
                try upstream.assignEmpty([PartitionStart(partition: 0, committedOffset: 5, metadata: metadata, logStart: 0)], now: Self.now)
            }
        }
    }

    // MARK: Found by the simulator

    @Test("a backlog read in one batch, its source's idle report last: event time still moves on once everything is quiet (as the upstream's marks say time passes), and the windows are emitted")
    func quietBacklogIsEmitted() throws {
        let arena = RecordArena()
        var upstream = normalize(sources: 1, idleTimeout: 2_000)
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        let events = try shuffle(
            (0..<5).map { (0, Int64($0), rawHit("d1", "b\($0)", at: Self.now - 10 * Self.minute), Self.now - 10 * Self.minute + 1_000) },
            through: &upstream, arena: arena)
        var marks = RecordingSink()
        try upstream.tick(now: Self.now + 5_000, into: &marks)  // the source has gone quiet
        // A new owner reads the events and the idle report in one batch; then only the
        // upstream's marks, two minutes on, say that time passes (behind the shuffle the task's
        // clock is its writers').
        var stage = aggregate(window: WindowConfig(idleTimeout: 2_000))
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var sink = RecordingSink()
        let read = events + marks.to(.repartition)
        try feed(read, from: 0, to: &stage, arena: arena, now: Self.now + 6_000, into: &sink)
        var later = RecordingSink()
        try upstream.tick(now: Self.now + 6_000 + 2 * Self.minute, into: &later)
        try feed(later.to(.repartition), from: Int64(read.count), to: &stage, arena: arena, now: Self.now + 6_000 + 2 * Self.minute, into: &sink)
        try stage.tick(now: Self.now + 6_000 + 2 * Self.minute, into: &sink)
        try stage.commitAll(now: Self.now + 6_000 + 2 * Self.minute, into: &sink)
        let d1 = lastRecords(sink).first { $0.key.hasPrefix("d1@") }?.value ?? "none"
        #expect(d1.contains("\"impressions\":5"), "the window was never emitted: \(d1)")
    }

    // MARK: Found by reading the code

    @Test("records routed by another repartition partition count than the topic has stop the stage with the remedy; nothing is counted")
    func routingMismatch() throws {
        let arena = RecordArena()
        var upstream = NormalizeStage(
            inputTopic: "hits", sourcePartitions: 1, repartitionPartitions: 2, limits: NormalizerLimits(), maxFutureSkew: Self.hour,
            idleTimeout: 2_000, originals: OriginalRule(window: WindowConfig(idleTimeout: 2_000)))
        try upstream.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var shuffle = RecordingSink()
        try upstream.process(
            (0..<20).map { arena.record(partition: 0, offset: Int64($0), value: rawHit("d\($0)", "b", at: Self.now), timestamp: Self.now) },
            now: Self.now, into: &shuffle)
        let routedToZero = shuffle.to(.repartition).filter { $0.partition == 0 }
        #expect(!routedToZero.isEmpty)
        // This instance believes the topic has 3 partitions.
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 3), window: WindowConfig(idleTimeout: 2_000), shards: 1)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: Self.now)
        var sink = RecordingSink()
        do {
            try stage.process([arena.record(routedToZero[0], offset: 0)], now: Self.now, into: &sink)
            Issue.record("records routed by 2 partitions were counted by a task of a 3-partition topic")
        } catch {
            #expect("\(error)".contains("routed by 2 partitions, but it has 3") && "\(error)".contains("--group"))
            #expect(PipelineError.exitCode(for: error) == 64, "a refusal, which a restart cannot mend")
        }
        #expect(stage.drainReport().accounting.accepted == 0)
    }
}
