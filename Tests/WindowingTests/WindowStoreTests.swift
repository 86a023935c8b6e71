import Testing
import TrackingDomain
@testable import Windowing

/// The core driven directly, with watermark and horizon chosen by the test.
@Suite struct WindowStoreTests {
    static let config = WindowConfig(size: 60_000, grace: 10_000, retention: 120_000)

    struct Driver {
        var store = WindowStore(window: WindowStoreTests.config.sizes[0], retention: WindowStoreTests.config.retention)
        var horizon = Int64.min
        var restore: [Int32: RestorePoint] = [:]

        mutating func feed(_ inputs: [WindowInput], watermark: Int64?) -> StoreOutput {
            var out = StoreOutput()
            store.settle(watermark: store.watermark, horizon: horizon, into: &out)
            for input in inputs { withUnsafePointer(to: input) { store.ingest($0, restore: restore, into: &out) } }
            if let watermark { horizon = max(horizon, watermark) }
            store.settle(watermark: watermark, horizon: horizon, into: &out)
            return out
        }
    }

    @Test func emitsOnlyAfterEndPlusGrace() {
        var driver = Driver()
        var out = driver.feed([Hits.input("d1", "b1", .impression, at: 1_000, offset: 0)], watermark: 1_000)
        #expect(out.emitted.isEmpty)
        out = driver.feed([], watermark: 69_999)
        #expect(out.emitted.isEmpty)
        out = driver.feed([], watermark: 70_000)
        #expect(out.emitted.map(\.revision) == [1])  // one hit counted
        #expect(out.emitted.first?.impressions == 1)
        out = driver.feed([], watermark: 80_000)
        #expect(out.emitted.isEmpty)
    }

    @Test func outOfOrderWithinGraceIsJustCounted() {
        var driver = Driver()
        _ = driver.feed([Hits.input("d1", "b1", .click, at: 50_000, offset: 0)], watermark: 50_000)
        _ = driver.feed([Hits.input("d1", "b2", .click, at: 61_000, offset: 1)], watermark: 61_000)
        // Watermark is past the window end but within grace: this hit still counts normally.
        let out = driver.feed([Hits.input("d1", "b1", .open, at: 59_000, offset: 2)], watermark: 69_000)
        #expect(out.emitted.isEmpty && out.tooLate.isEmpty)
        let final = driver.feed([], watermark: 70_000).emitted
        #expect(final.count == 1)
        #expect(final[0].clicks == 1 && final[0].opens == 1 && final[0].dismissals == 0 && final[0].revision == 2)
    }

    @Test func lateHitAfterEmissionGivesRevisionTwoWithFullCounts() {
        var driver = Driver()
        _ = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 0),
            Hits.input("d1", "b1", .click, at: 2_000, offset: 1),
        ], watermark: 2_000)
        let first = driver.feed([], watermark: 75_000).emitted
        #expect(first.count == 1 && first[0].revision == 2 && first[0].dismissals == 1)
        // Two late hits for the same window in one batch: one re-emission with both.
        let second = driver.feed([
            Hits.input("d1", "b1", .open, at: 3_000, offset: 2),
            Hits.input("d1", "b2", .impression, at: 4_000, offset: 3),
        ], watermark: 76_000).emitted
        #expect(second == [WindowAggregate(
            deliveryId: "d1", windowStart: 0, windowEnd: 60_000, impressions: 2, clicks: 1, opens: 1,
            uniqueImpressions: 2, uniqueClicks: 1, uniqueOpens: 1, dismissals: 0,
            channels: .init(push: 4), platforms: .init(android: 4), revision: 4)])
        #expect(second[0].revision > first[0].revision, "a correction never goes backwards")
        // A late hit for a delivery the window had not seen yet is that record's first emission.
        let third = driver.feed([Hits.input("d2", "b9", .click, at: 5_000, offset: 4)], watermark: 77_000).emitted
        #expect(third.map(\.deliveryId) == ["d2"] && third[0].revision == 1)
    }

    @Test func pastRetentionIsTooLate() {
        var driver = Driver()
        _ = driver.feed([Hits.input("d1", "b1", .impression, at: 1_000, offset: 0)], watermark: 1_000)
        // Window [0, 60s) is retained until watermark 180s.
        var out = driver.feed([], watermark: 179_999)
        #expect(out.windowsEvicted == 0)
        out = driver.feed([Hits.input("d1", "b2", .impression, at: 1_500, offset: 1)], watermark: 180_000)
        #expect(out.tooLate.isEmpty)  // judged against the horizon before the batch
        #expect(out.emitted.map(\.impressions) == [2] && out.emitted[0].revision == 2)  // two hits
        #expect(out.windowsEvicted == 1 && driver.store.entries == 0)
        out = driver.feed([Hits.input("d1", "b3", .impression, at: 1_900, offset: 2)], watermark: 180_000)
        #expect(out.tooLate.map(\.offset) == [2] && out.emitted.isEmpty)
        #expect(out.tooLate[0].detail.hasPrefix("event time 1970-01-01T00:00:01.900Z"))
        #expect(out.tooLate[0].detail.contains("window 1970-01-01T00:00:00Z to 1970-01-01T00:01:00Z"))
        #expect(!out.tooLate[0].detail.contains("final"))
        // Never seen, but already past retention on arrival: too late as well.
        out = driver.feed([Hits.input("d7", "b1", .open, at: -30_000, offset: 3)], watermark: 180_000)
        #expect(out.tooLate.map(\.offset) == [3])
    }

    @Test func restoredRereadOfFinalWindowsIsDroppedAndCounted() {
        var driver = Driver()
        driver.restore = [0: RestorePoint(processedMark: 10, evictedBefore: 180_000)]
        driver.horizon = 180_000
        let out = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 8),   // final window, reread
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 10),  // new hit, final window
            Hits.input("d1", "b1", .impression, at: 70_000, offset: 9),  // reread, window still open
        ], watermark: nil)
        #expect(out.rereadFinal.count == 1)
        #expect(out.tooLate.map(\.offset) == [10])
        #expect(out.hitsCounted == 1)
    }

    /// A reread over state read back from a changelog takes the previous owner's verdicts from
    /// that state, whatever the horizon now: a hit its window holds was counted, any other was
    /// judged too late (and its dead letter may have been lost with the previous owner).
    @Test func rereadOverStateReadBackTakesItsVerdictsFromTheState() {
        var driver = Driver()
        driver.restore = [
            0: RestorePoint(
                processedMark: 10, evictedBefore: 180_000,
                counted: [WindowKey(size: 60_000, windowStart: 0, deliveryId: "d1"): 5, WindowKey(size: 60_000, windowStart: 60_000, deliveryId: "d1"): 7])
        ]
        let out = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 4),   // evicted window, held by its final state
            Hits.input("d1", "b2", .impression, at: 2_000, offset: 6),   // evicted window, not held: judged too late
            Hits.input("d1", "b3", .impression, at: 70_000, offset: 7),  // window still open, held
            Hits.input("d1", "b4", .impression, at: 71_000, offset: 8),  // window still open, not held: too late then
            Hits.input("d2", "b1", .impression, at: 72_000, offset: 9),  // no state at all: too late then
            Hits.input("d1", "b5", .impression, at: 73_000, offset: 10), // past the reread: counted
        ], watermark: nil)
        #expect(out.rereadFinal.count == 2)
        #expect(out.tooLate.map(\.offset) == [6, 8, 9])
        #expect(out.hitsCounted == 1)
    }

    /// A state write cut short by a crash can keep some windows' heads, which counted hits past
    /// the task record the write never reached: up to the counted mark, a hit its window holds
    /// is dropped, even where its window has expired since (judging it too late would count it
    /// and dead-letter it); any other is judged as a live hit.
    @Test func hitsPastTheMarkThatACutWriteKeptAreNotCountedTwice() {
        var driver = Driver()
        driver.horizon = 180_000
        driver.restore = [
            0: RestorePoint(
                processedMark: 10, evictedBefore: 0, counted: [WindowKey(size: 60_000, windowStart: 0, deliveryId: "d1"): 14], countedMark: 15)
        ]
        let out = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 11),  // expired window, held by its head: counted before
            Hits.input("d2", "b1", .impression, at: 70_000, offset: 12), // no head: judged live, counted
            Hits.input("d3", "b1", .impression, at: 2_000, offset: 13),  // no head, expired window: too late
            Hits.input("d1", "b2", .impression, at: 1_000, offset: 16),  // past what its head holds: too late
        ], watermark: nil)
        #expect(out.rereadFinal.count == 1)
        #expect(out.tooLate.map(\.offset) == [13, 16])
        #expect(out.hitsCounted == 1)
    }

    @Test func flushAllEmitsOpenWindowsAndLaterHitsAreCorrections() {
        var driver = Driver()
        _ = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, offset: 0),
            Hits.input("d2", "b1", .impression, at: 61_000, offset: 1),
        ], watermark: 61_000)
        var out = StoreOutput()
        driver.store.flushAll(into: &out)
        #expect(out.emitted.count == 2 && out.emitted.allSatisfy { $0.revision == 1 })
        let later = driver.feed([Hits.input("d2", "b2", .impression, at: 62_000, offset: 2)], watermark: 62_000)
        #expect(later.emitted.map(\.revision) == [2])  // d2 now holds two hits
        // Nothing is emitted twice when the watermark finally passes.
        #expect(driver.feed([], watermark: 200_000).emitted.isEmpty)
    }

    /// The same hits, late ones included, under both emissions: `changes` writes a first record
    /// and a correction, `final` writes nothing until the window leaves retention and then one
    /// record, the same as the last one `changes` wrote.
    @Test func finalEmissionWritesEachWindowOnceAsItLeavesRetention() {
        func run(_ emission: WindowEmission) -> [[WindowAggregate]] {
            var config = Self.config
            config = config.emitting(emission)
            var driver = Driver(store: WindowStore(window: config.sizes[0], retention: config.retention))
            return [
                driver.feed([
                    Hits.input("d1", "b1", .impression, at: 1_000, offset: 0),
                    Hits.input("d1", "b1", .click, at: 2_000, offset: 1),
                ], watermark: 2_000).emitted,
                driver.feed([], watermark: 75_000).emitted,  // grace passed
                driver.feed([Hits.input("d1", "b2", .impression, at: 3_000, offset: 2)], watermark: 76_000).emitted,  // late
                driver.feed([], watermark: 180_000).emitted,  // retention passed: evicted
                driver.feed([], watermark: 400_000).emitted,
            ]
        }
        let changes = run(.changes)
        #expect(changes.map(\.count) == [0, 1, 1, 0, 0])
        let final = run(.final)
        #expect(final.map(\.count) == [0, 0, 0, 1, 0])
        #expect(final[3] == changes[2], "the final record is the last record of the default emission")
        #expect(final[3].first?.impressions == 2 && final[3].first?.revision == 3)

        // A bounded run's end writes the windows still retained, once.
        var config = Self.config
        config = config.emitting(.final)
        var driver = Driver(store: WindowStore(window: config.sizes[0], retention: config.retention))
        _ = driver.feed([Hits.input("d1", "b1", .impression, at: 1_000, offset: 0)], watermark: 75_000)
        var out = StoreOutput()
        driver.store.flushAll(into: &out)
        #expect(out.emitted.map(\.revision) == [1])
    }

    @Test func snapshotCountsEntriesPerWindowStart() {
        var driver = Driver()
        _ = driver.feed([
            Hits.input("d1", "b1", .impression, at: 1_000, partition: 0, offset: 5),
            Hits.input("d2", "b1", .impression, at: 61_000, partition: 0, offset: 6),
            Hits.input("d1", "b2", .impression, at: 2_000, partition: 1, offset: 40),
            Hits.input("d1", "b3", .impression, at: 3_000, partition: 1, offset: 30),
        ], watermark: nil)
        var snapshot = driver.store.snapshot()
        #expect(snapshot.entriesByWindowStart == [0: 3, 60_000: 1])
        #expect(snapshot.openWindows == 2)
        // Window 0 evicted: only window 60s is left, emitted and retained.
        _ = driver.feed([], watermark: 180_000)
        snapshot = driver.store.snapshot()
        #expect(snapshot.entriesByWindowStart == [60_000: 1])
        #expect(snapshot.entries == 1 && snapshot.retainedWindows == 1)
    }

    @Test func hitWithoutEventTimeIsRefusedNotCounted() {
        var driver = Driver()
        var out = StoreOutput()
        let input = WindowInput(event: Hits.event("d1", "b1", .open, at: nil), partition: 0, offset: 0)
        withUnsafePointer(to: input) { driver.store.ingest($0, restore: [:], into: &out) }
        #expect(out.tooLate.count == 1 && out.hitsCounted == 0)
    }
}
