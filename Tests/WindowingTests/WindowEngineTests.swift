import Testing
import TrackingDomain
@testable import Windowing

@Suite struct WindowEngineTests {
    /// Small windows so random streams exercise emission, corrections and eviction a lot.
    static let small = WindowConfig(size: 1_000, grace: 300, retention: 4_000, idleTimeout: 1 << 40)

    static func run(_ stream: RandomStream, config: WindowConfig, shards: Int, partitions: [Int32]) -> (
        outputs: [EngineOutput], flush: EngineOutput, engine: WindowEngine
    ) {
        var engine = WindowEngine(config: config, shards: shards)
        engine.assign(partitions: partitions, now: 0)
        var outputs: [EngineOutput] = []
        for (batch, now) in zip(stream.batches, stream.clock) {
            outputs.append(engine.process(batch, now: now))
        }
        let flush = engine.flushAll()
        return (outputs, flush, engine)
    }

    static func lateKeys(_ outputs: [EngineOutput]) -> [[Int64]] {
        outputs.flatMap { $0.tooLate.map { [Int64($0.partition), $0.offset] } }
    }

    // MARK: Idle and silent partitions

    @Test func idleTimeoutEmitsTheWindowsOfAQuietTopic() {
        var engine = WindowEngine(config: WindowConfig(), shards: 1)
        engine.assign(partitions: [0], now: 0)
        let start: Int64 = 1_795_299_960_000
        var out = engine.process([Hits.input("d1", "b1", .impression, at: start + 50_000, offset: 0)], now: 1_000)
        #expect(out.emitted.isEmpty)
        out = engine.advance(now: 30_999)  // not idle yet: watermark is the hit's time
        #expect(out.emitted.isEmpty)
        #expect(engine.watermark == start + 50_000)
        out = engine.advance(now: 31_000)  // idle: watermark = hit time + 30 s >= end + grace
        #expect(engine.watermark == start + 80_000)
        #expect(out.emitted.map(\.windowStart) == [start])
    }

    /// The runner commits early for closed windows, not for corrections: the output says which.
    @Test func windowsClosedCountsFirstEmissionsNotCorrections() {
        var engine = WindowEngine(config: WindowConfig(size: 60_000, grace: 1_000), shards: 2)
        engine.assign(partitions: [0], now: 0)
        var out = engine.process([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 0), Hits.input("d2", "b2", .impression, at: 2_000, offset: 1),
        ], now: 0)
        #expect(out.emitted.isEmpty && out.windowsClosed == 0)
        out = engine.process([Hits.input("d1", "b3", .impression, at: 61_000, offset: 2)], now: 0)
        #expect(out.emitted.count == 2 && out.windowsClosed == 2)
        // A late hit for the closed window: a correction of d1, no window closed.
        out = engine.process([Hits.input("d1", "b4", .click, at: 3_000, offset: 3)], now: 0)
        #expect(out.emitted.map(\.deliveryId) == ["d1"] && out.windowsClosed == 0)
        // The end of a bounded run closes the open window.
        out = engine.flushAll()
        #expect(out.emitted.map(\.windowStart) == [60_000] && out.windowsClosed == 1)
    }

    /// What the pipeline tells an operator whose `--emit final` worker writes nothing: how many
    /// windows wait, and the event time the first waits for, at the moment it goes out.
    @Test(arguments: [WindowEmission.changes, .final])
    func firstOpenDueIsWhenTheOldestOpenWindowGoesOut(emission: WindowEmission) {
        var config = WindowConfig(size: 60_000, grace: 1_000, retention: 600_000)
        config = config.emitting(emission)
        var engine = WindowEngine(config: config, shards: 2)
        engine.assign(partitions: [0], now: 0)
        #expect(engine.stats.windows.total.openWindows == 0 && engine.stats.windows.total.firstOpenDue == nil)
        _ = engine.process([
            Hits.input("d1", "b1", .impression, at: 61_000, offset: 0), Hits.input("d2", "b2", .impression, at: 62_000, offset: 1),
            Hits.input("d1", "b3", .impression, at: 120_500, offset: 2),
        ], now: 0)
        let wait: Int64 = emission == .final ? 600_000 : 1_000
        // The window 60 s to 120 s (two deliveries) is the oldest; 120 s to 180 s is open too.
        #expect(engine.stats.windows.total.openWindows == 3)
        #expect(engine.stats.windows.total.firstOpenDue == 120_000 + wait)
        // Event time one millisecond short of it: nothing goes out.
        var emitted = engine.process([Hits.input("d3", "b4", .impression, at: 120_000 + wait - 1, offset: 3)], now: 0).emitted
        emitted += engine.process([], now: 0).emitted
        #expect(emitted.allSatisfy { $0.windowStart != 60_000 })
        #expect(engine.stats.windows.total.firstOpenDue == 120_000 + wait)
        // At it, the window goes out, and the next one is the first due.
        emitted = engine.process([Hits.input("d3", "b5", .impression, at: 120_000 + wait, offset: 4)], now: 0).emitted
        emitted += engine.process([], now: 0).emitted
        #expect(Set(emitted.filter { $0.windowStart == 60_000 }.map(\.deliveryId)) == ["d1", "d2"])
        #expect(engine.stats.windows.total.firstOpenDue.map { $0 > 120_000 + wait } == true, "\(String(describing: engine.stats.windows.total.firstOpenDue))")
        let flushed = engine.flushAll()
        #expect(engine.stats.windows.total.openWindows == 0 && engine.stats.windows.total.firstOpenDue == nil && !flushed.emitted.isEmpty)
    }

    @Test func assignedButSilentPartitionsHoldTheWatermarkUntilIdle() {
        var engine = WindowEngine(config: WindowConfig(), shards: 2)
        engine.assign(partitions: [0, 1], now: 0)
        var out = engine.process([
            Hits.input("d1", "b1", .impression, at: 10_000, partition: 0, offset: 0),
            Hits.input("d1", "b2", .impression, at: 500_000, partition: 0, offset: 1),
        ], now: 1_000)
        #expect(out.emitted.isEmpty && engine.watermark == nil)
        out = engine.process([Hits.input("d1", "b3", .impression, at: 500_100, partition: 0, offset: 2)], now: 29_000)
        #expect(out.emitted.isEmpty && engine.watermark == nil)
        out = engine.advance(now: 30_000)  // partition 1 silent for 30 s: stops holding back
        #expect(engine.watermark == 500_100)
        #expect(out.emitted.map(\.windowStart) == [0])
        // Partition 1 finally delivers, older data: the watermark does not go back, and its hit
        // (past grace, within retention) is emitted at once.
        out = engine.process([Hits.input("d2", "b1", .click, at: 450_000, partition: 1, offset: 0)], now: 31_000)
        #expect(engine.watermark == 500_100)
        #expect(out.emitted.map(\.windowStart) == [420_000] && out.emitted[0].dismissals == 1)
    }

    @Test func revokedPartitionsAreNoLongerAwaited() {
        var engine = WindowEngine(config: WindowConfig(), shards: 1)
        engine.assign(partitions: [0, 1], now: 0)
        _ = engine.process([Hits.input("d1", "b1", .impression, at: 100_000, partition: 0, offset: 0)], now: 0)
        #expect(engine.watermark == nil)
        engine.revoke(partitions: [1])
        let out = engine.advance(now: 1)
        #expect(engine.watermark == 100_000)
        #expect(out.emitted.isEmpty)  // window [60s,120s) needs 130 s
    }

    // MARK: Shard independence and the reference model

    @Test func outputIsIdenticalWithOneTwoAndEightShards() {
        let stream = RandomStream.make(seed: 7, hits: 40_000, partitions: 4, deliveries: 300, broadlogs: 200)
        for config in [Self.small, WindowConfig(size: 1_000, grace: 300, retention: 4_000, idleTimeout: 1 << 40, maxEntries: 1_500)] {
            let one = Self.run(stream, config: config, shards: 1, partitions: [0, 1, 2, 3])
            for shards in [2, 8] {
                let many = Self.run(stream, config: config, shards: shards, partitions: [0, 1, 2, 3])
                #expect(one.outputs.map(\.emitted) == many.outputs.map(\.emitted))
                #expect(Self.lateKeys(one.outputs) == Self.lateKeys(many.outputs))
                #expect(one.outputs.map(\.capacityEvictions) == many.outputs.map(\.capacityEvictions))
                #expect(one.flush.emitted == many.flush.emitted)
                #expect(one.engine.stats == many.engine.stats)
            }
            #expect(one.outputs.reduce(0) { $0 + $1.emitted.count } > 1_000)
            #expect(!Self.lateKeys(one.outputs).isEmpty)
        }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func lastRecordPerKeyMatchesTheReferenceModel(seed: UInt64) {
        let partitions: [Int32] = [0, 1, 2]
        let stream = RandomStream.make(seed: seed, hits: 6_000, partitions: 3)
        var engine = WindowEngine(config: Self.small, shards: Int(seed % 3) + 1)
        engine.assign(partitions: partitions, now: 0)
        var reference = ReferenceModel(config: Self.small, partitions: Set(partitions))
        var last = LastRecords()
        var late: [[Int64]] = []
        for (batch, now) in zip(stream.batches, stream.clock) {
            let out = engine.process(batch, now: now)
            reference.apply(batch: batch)
            last.add(out)
            late += out.tooLate.map { [Int64($0.partition), $0.offset] }
            #expect(engine.evictionHorizon == reference.horizon)
        }
        last.add(engine.flushAll())
        #expect(last.countsOnly == reference.expected)
        #expect(Set(late) == reference.tooLate && late.count == reference.tooLate.count)
        #expect(reference.tooLate.count > 10)
        let stats = engine.stats
        #expect(stats.hitsProcessed == 6_000)
        #expect(stats.hitsCounted + stats.tooLateHits == 6_000)
    }

    @Test("several sizes: each size's last records are its own reference's; a hit is too late for the engine only when it is for every size, and one late for some sizes is counted in the others and reported by size", arguments: [UInt64(1), 2, 3])
    func severalSizesMatchTheirReferences(seed: UInt64) {
        let partitions: [Int32] = [0, 1, 2]
        let sizes: [Int64] = [1_000, 3_000]
        let config = WindowConfig(sizes: sizes.map { WindowSize(size: $0, grace: 300) }, retention: 4_000, idleTimeout: 1 << 40)
        let stream = RandomStream.make(seed: seed, hits: 6_000, partitions: 3)
        var engine = WindowEngine(config: config, shards: Int(seed % 3) + 1)
        engine.assign(partitions: partitions, now: 0)
        var references = sizes.map { ReferenceModel(config: config, partitions: Set(partitions), size: $0) }
        var last: [Int64: LastRecords] = [:]
        var late: [[Int64]] = []
        var lateInSome: [Int64: Int] = [:]
        for (batch, now) in zip(stream.batches, stream.clock) {
            let out = engine.process(batch, now: now)
            for index in references.indices { references[index].apply(batch: batch) }
            for record in out.emitted { last[record.windowEnd - record.windowStart, default: LastRecords()].add(EngineOutput(emitted: [record])) }
            late += out.tooLate.map { [Int64($0.partition), $0.offset] }
            lateInSome.merge(out.lateInSomeSizes, uniquingKeysWith: +)
        }
        for record in engine.flushAll().emitted { last[record.windowEnd - record.windowStart, default: LastRecords()].add(EngineOutput(emitted: [record])) }
        for (index, size) in sizes.enumerated() {
            #expect(last[size]?.countsOnly == references[index].expected, "windows of \(size) ms")
        }
        let lateForAll = references[0].tooLate.intersection(references[1].tooLate)
        #expect(Set(late) == lateForAll && late.count == lateForAll.count)
        #expect(lateInSome[1_000] == references[0].tooLate.count - lateForAll.count && lateInSome[1_000]! > 0, "late for the second and counted in its 3 s window")
        #expect(lateInSome[3_000, default: 0] == references[1].tooLate.count - lateForAll.count)
        #expect(engine.stats.hitsProcessed == 6_000)
    }

    @Test("the memory cap of an engine of several sizes evicts the windows that expire first, the smaller size's before the larger's, and names the sizes it evicted")
    func capacityOfSeveralSizesEvictsWhatExpiresFirst() {
        let config = WindowConfig(
            sizes: [WindowSize(size: 1_000, grace: 0), WindowSize(size: 10_000, grace: 0)], retention: 100_000, idleTimeout: 1 << 40, maxEntries: 150)
        var engine = WindowEngine(config: config, shards: 1)
        var offset: Int64 = 0
        var out = engine.process(Self.window("d1", start: 0, broadlogs: 30, offset: &offset), now: 0)
        out = engine.process(Self.window("d2", start: 1_000, broadlogs: 30, offset: &offset), now: 0)
        // 60 entries in two 1 s windows, 60 in the 10 s windows of d1 and d2: 120 < 150.
        #expect(out.capacityEvictions.isEmpty)
        out = engine.process(Self.window("d3", start: 2_000, broadlogs: 30, offset: &offset), now: 0)
        // 180 >= 150: the 1 s windows expire first (at 101 s and 102 s), the 10 s one at 110 s.
        let eviction = try! #require(out.capacityEvictions.first)
        #expect(eviction.windowsEvictedBySize == [1_000: 2] && eviction.newHorizon == 102_000, "\(eviction)")
        #expect(engine.stats.windows.total.entries == 120)
    }

    // MARK: Crash recovery

    @Test(arguments: [5, 40, 117, 230])
    func crashAndRereadFromTheStartGivesTheSameLastRecords(crashAfter: Int) {
        let partitions: [Int32] = [0, 1, 2]
        let stream = RandomStream.make(seed: 99, hits: 6_000, partitions: 3)
        #expect(stream.batches.count > crashAfter)
        let reference = Self.run(stream, config: Self.small, shards: 1, partitions: partitions)
        var expected = LastRecords()
        reference.outputs.forEach { expected.add($0) }
        expected.add(reference.flush)
        let expectedLate = Self.lateKeys(reference.outputs)

        // First run: crashes after `crashAfter` batches, having recorded its eviction horizon
        // and processed position (a restore point without a state read back).
        var first = WindowEngine(config: Self.small, shards: 2)
        first.assign(partitions: partitions, now: 0)
        var delivered = LastRecords()
        var late: [[Int64]] = []
        var processedMarks: [Int32: Int64] = [:]
        for index in 0..<crashAfter {
            let out = first.process(stream.batches[index], now: stream.clock[index])
            delivered.add(out)
            late += out.tooLate.map { [Int64($0.partition), $0.offset] }
            for input in stream.batches[index] { processedMarks[input.partition] = input.offset + 1 }
        }
        let horizon = first.evictionHorizon

        // Second run, with no state read back: restores the points and rereads every partition
        // from its start (below the processed mark, hits of evicted windows are dropped,
        // the others counted again).
        var second = WindowEngine(config: Self.small, shards: 3)
        second.assign(partitions: partitions, now: 0)
        for partition in partitions {
            if let processedMark = processedMarks[partition] {
                second.restore(partition: partition, processedMark: processedMark, evictedBefore: horizon)
            }
        }
        var reread = 0
        for (index, batch) in stream.batches.enumerated() {
            let out = second.process(batch, now: stream.clock[index])
            delivered.add(out)
            late += out.tooLate.map { [Int64($0.partition), $0.offset] }
            reread += out.rereadFinal
        }
        delivered.add(second.flushAll())

        #expect(delivered.countsOnly == expected.countsOnly)
        #expect(late.sorted { $0.lexicographicallyPrecedes($1) } == expectedLate.sorted { $0.lexicographicallyPrecedes($1) })
        if crashAfter >= 117 { #expect(reread > 0) }
    }

    // MARK: Capacity

    static func window(_ delivery: String, start: Int64, broadlogs: Int, offset: inout Int64) -> [WindowInput] {
        (0..<broadlogs).map { index in
            defer { offset += 1 }
            return Hits.input(delivery, "b\(index)", .impression, at: start + Int64(index), offset: offset)
        }
    }

    @Test func capacityEvictsEmittedWindowsFirstAndReportsIt() {
        let config = WindowConfig(size: 1_000, grace: 0, retention: 100_000, idleTimeout: 1 << 40, maxEntries: 100)
        var engine = WindowEngine(config: config, shards: 1)
        var offset: Int64 = 0
        for start in stride(from: Int64(0), to: 3_000, by: 1_000) {
            let out = engine.process(Self.window("d1", start: start, broadlogs: 30, offset: &offset), now: 0)
            #expect(out.capacityEvictions.isEmpty)
        }
        // 120 entries >= 100: the oldest window (emitted already) goes, down to <= 90.
        let out = engine.process(Self.window("d1", start: 3_000, broadlogs: 30, offset: &offset), now: 0)
        var expected = CapacityEviction(
            entriesBefore: 120, maxEntries: 100, entriesFreed: 30, windowsEvicted: 1, windowsEmittedEarly: 0,
            oldestWindowStart: 0, newestWindowStart: 0, newHorizon: 101_000)
        expected.windowsEvictedBySize = [1_000: 1]
        #expect(out.capacityEvictions == [expected])
        #expect(engine.evictionHorizon == 101_000)
        #expect(engine.stats.windows.total.entries == 90 && engine.stats.capacityEvictions == 1)
        // The evicted window is closed for good: later hits for it are too late.
        let late = engine.process([Hits.input("d1", "zz", .click, at: 500, offset: offset)], now: 0)
        #expect(late.tooLate.count == 1)
    }

    /// What the gauges show per size: each size's windows, entries, starts and first due, every
    /// size present before its first window; the total adds them up.
    @Test func statsAreBySize() {
        let config = WindowConfig(sizes: [WindowSize(size: 60_000, grace: 1_000), WindowSize(size: 3_600_000, grace: 5_000)], retention: 600_000)
        var engine = WindowEngine(config: config, shards: 2)
        engine.assign(partitions: [0], now: 0)
        #expect(engine.stats.windows == [60_000: WindowFigures(), 3_600_000: WindowFigures()])
        _ = engine.process([
            Hits.input("d1", "b1", .impression, at: 61_000, offset: 0), Hits.input("d2", "b2", .impression, at: 62_000, offset: 1),
            Hits.input("d1", "b3", .impression, at: 120_500, offset: 2),
        ], now: 0)
        let minutes = engine.stats.windows[60_000], hours = engine.stats.windows[3_600_000]
        #expect(minutes?.openWindows == 3 && minutes?.entries == 3 && minutes?.windowStarts == 2 && minutes?.firstOpenDue == 121_000)
        #expect(hours?.openWindows == 2 && hours?.entries == 3 && hours?.windowStarts == 1 && hours?.firstOpenDue == 3_605_000)
        #expect(engine.stats.windows.total.openWindows == 5 && engine.stats.windows.total.entries == 6 && engine.stats.windows.total.firstOpenDue == 121_000)
    }

    @Test func capacityEmitsOpenWindowsBeforeEvictingThem() {
        let config = WindowConfig(size: 1_000, grace: 50_000, retention: 100_000, idleTimeout: 1 << 40, maxEntries: 100)
        var engine = WindowEngine(config: config, shards: 4)
        var offset: Int64 = 0
        var batch = Self.window("d1", start: 0, broadlogs: 40, offset: &offset)
        batch += Self.window("d2", start: 0, broadlogs: 10, offset: &offset)
        batch += Self.window("d1", start: 1_000, broadlogs: 45, offset: &offset)
        batch += Self.window("d1", start: 2_000, broadlogs: 10, offset: &offset)
        let out = engine.process(batch, now: 0)
        // 105 entries, nothing emitted by watermark; window 0 (50 entries) is emitted early then dropped.
        #expect(out.emitted.map(\.deliveryId) == ["d1", "d2"])
        #expect(out.emitted.map(\.uniqueImpressions) == [40, 10])
        #expect(out.emitted.allSatisfy { $0.revision == $0.uniqueImpressions && $0.windowStart == 0 })
        #expect(out.capacityEvictions.map(\.windowsEmittedEarly) == [2])
        #expect(out.capacityEvictions.map(\.entriesFreed) == [50])
        #expect(engine.stats.windows.total.openWindows == 2 && engine.stats.windows.total.entries == 55)
    }

    @Test("behind a shuffle: the watermark is the minimum of the sources' marks, not of the partitions the offsets belong to")
    func sourceMarksDriveTheWatermark() {
        var engine = WindowEngine(config: WindowConfig(size: 60_000, grace: 10_000, retention: 600_000), shards: 2)
        // Three source partitions feed this one downstream partition (7).
        engine.assign(partitions: [0, 1, 2], now: 0)
        var out = engine.process(
            [Hits.input("d1", "b1", .impression, at: 1_000, partition: 7, offset: 100)],
            marks: [SourceMark(source: 0, watermark: 200_000), SourceMark(source: 1, watermark: 150_000)], now: 1_000)
        // Source 2 has said nothing yet: it holds everything back.
        #expect(out.emitted.isEmpty && engine.watermark == nil)
        out = engine.process([], marks: [SourceMark(source: 2, watermark: 65_000)], now: 2_000)
        #expect(engine.watermark == 65_000 && out.emitted.isEmpty)  // window [0, 60s) needs 70 s
        out = engine.process([], marks: [SourceMark(source: 2, watermark: 65_000, idle: true)], now: 3_000)
        #expect(engine.watermark == 150_000)
        #expect(out.emitted.map(\.deliveryId) == ["d1"])
    }
}
