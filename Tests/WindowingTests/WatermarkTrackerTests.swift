import Testing
@testable import Windowing

@Suite struct WatermarkTrackerTests {
    @Test func isTheMinimumOverActivePartitions() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.observe(partition: 0, maxEventTime: 5_000, now: 0)
        tracker.observe(partition: 1, maxEventTime: 3_000, now: 0)
        #expect(tracker.advance(now: 1_000) == 3_000)
        tracker.observe(partition: 1, maxEventTime: 9_000, now: 2_000)
        #expect(tracker.advance(now: 2_000) == 5_000)
    }

    @Test func aSourceReportedIdleStopsHoldingBackAtOnceAndResumesWhenItDelivers() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.assign([0, 1], now: 0)
        tracker.observe(partition: 0, maxEventTime: 50_000, now: 1_000)
        tracker.observe(partition: 1, maxEventTime: 20_000, now: 1_000)
        #expect(tracker.advance(now: 1_000) == 20_000)
        // Source 1's reader says it went quiet: no need to wait for our own idle timeout.
        tracker.observe(partition: 1, maxEventTime: 20_000, now: 2_000, reportedIdle: true)
        #expect(tracker.advance(now: 2_000) == 50_000)
        // It delivers again, behind: it holds the watermark from here (which never retreats).
        tracker.observe(partition: 1, maxEventTime: 40_000, now: 3_000)
        tracker.observe(partition: 0, maxEventTime: 90_000, now: 3_000)
        #expect(tracker.advance(now: 3_000) == 50_000)
        tracker.observe(partition: 1, maxEventTime: 70_000, now: 4_000)
        #expect(tracker.advance(now: 4_000) == 70_000)
    }

    @Test func neverGoesBackwards() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.observe(partition: 0, maxEventTime: 5_000, now: 0)
        #expect(tracker.advance(now: 0) == 5_000)
        // A new partition with older data appears: the watermark holds, it does not retreat.
        tracker.observe(partition: 1, maxEventTime: 1_000, now: 10)
        #expect(tracker.advance(now: 10) == 5_000)
    }

    @Test func assignedButSilentPartitionHoldsUntilIdle() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.assign([0, 1], now: 0)
        tracker.observe(partition: 0, maxEventTime: 100_000, now: 1_000)
        #expect(tracker.advance(now: 1_000) == nil)
        #expect(tracker.advance(now: 29_999) == nil)
        // Partition 1 has been silent for the idle timeout: it no longer holds back.
        #expect(tracker.advance(now: 30_000) == 100_000)
    }

    @Test func idlePartitionIsExcludedAndReactivatedByInput() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.observe(partition: 0, maxEventTime: 10_000, now: 0)
        tracker.observe(partition: 1, maxEventTime: 50_000, now: 0)
        #expect(tracker.advance(now: 0) == 10_000)
        tracker.observe(partition: 1, maxEventTime: 60_000, now: 40_000)
        // Partition 0 is idle now: only partition 1 counts.
        #expect(tracker.advance(now: 40_000) == 60_000)
        // Partition 0 wakes up with older data: it counts again, but cannot pull the mark back.
        tracker.observe(partition: 0, maxEventTime: 20_000, now: 41_000)
        #expect(tracker.advance(now: 41_000) == 60_000)
        tracker.observe(partition: 1, maxEventTime: 90_000, now: 42_000)
        tracker.observe(partition: 0, maxEventTime: 70_000, now: 42_000)
        #expect(tracker.advance(now: 42_000) == 70_000)
    }

    @Test func allIdleFollowsTheWallClockFromWhereInputWentQuiet() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.observe(partition: 0, maxEventTime: 1_000_000, now: 500)
        tracker.observe(partition: 1, maxEventTime: 1_000_400, now: 1_000)
        let bothActive = tracker.advance(now: 1_000)
        let firstIdle = tracker.advance(now: 30_999)  // partition 0 idle, partition 1 active
        // Both idle: the slowest partition still delivering when the input went quiet, plus
        // the wall-clock time since the last hit (never below what was reached).
        let allIdle = tracker.advance(now: 31_000)
        let later = tracker.advance(now: 91_000)
        #expect(bothActive == 1_000_000)
        #expect(firstIdle == 1_000_400)
        #expect(allIdle == 1_030_000)
        #expect(later == 1_090_000)
    }

    @Test func allIdleGoesOnFromTheSlowestSoThatAPauseMakesNoLaggingHitLate() {
        var tracker = WatermarkTracker(idleTimeout: 2_000)
        let hour: Int64 = 3_600_000
        tracker.observe(partition: 0, maxEventTime: 10 * hour - 3 * hour, now: 0)  // three hours behind
        tracker.observe(partition: 1, maxEventTime: 10 * hour - hour, now: 0)  // one hour behind
        #expect(tracker.advance(now: 0) == 7 * hour)
        // A 5 s pause of both: event time moves 5 s from the slowest, not from the fastest.
        #expect(tracker.advance(now: 5_000) == 7 * hour + 5_000)
    }

    @Test func aPartitionQuietLongBeforeTheOthersDoesNotHoldAQuietTopicBack() {
        var tracker = WatermarkTracker(idleTimeout: 2_000)
        tracker.observe(partition: 0, maxEventTime: 1_000, now: 0)  // one old hit, then silence
        tracker.observe(partition: 1, maxEventTime: 900_000, now: 60_000)
        #expect(tracker.advance(now: 60_000) == 900_000)
        // Everyone quiet: partition 1 was the one still delivering.
        #expect(tracker.advance(now: 70_000) == 910_000)
    }

    /// Behind a shuffle, a new owner that took over after the input went quiet hears nothing but
    /// its sources' idle reports: event time must still move, or the windows it read back from
    /// the previous owner's state would never close.
    @Test func onlyIdleReportsFollowTheWallClockFromWhenTheTrackerStarted() {
        var tracker = WatermarkTracker(idleTimeout: 2_000)
        tracker.assign([0, 1], now: 10_000)
        tracker.observe(partition: 0, maxEventTime: 500_000, now: 10_500, reportedIdle: true)
        tracker.observe(partition: 1, maxEventTime: 480_000, now: 10_500, reportedIdle: true)
        #expect(tracker.advance(now: 10_500) == 480_500)
        #expect(tracker.advance(now: 70_000) == 540_000)
        // A source that delivers again holds the watermark as before (it never retreats).
        tracker.observe(partition: 1, maxEventTime: 490_000, now: 71_000)
        #expect(tracker.advance(now: 71_000) == 540_000)
    }

    @Test func nothingSeenMeansNoWatermark() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        #expect(tracker.advance(now: 0) == nil)
        tracker.assign([0], now: 0)
        #expect(tracker.advance(now: 100_000) == nil)
    }

    @Test func revokedPartitionStopsHoldingBack() {
        var tracker = WatermarkTracker(idleTimeout: 30_000)
        tracker.assign([0, 1], now: 0)
        tracker.observe(partition: 0, maxEventTime: 5_000, now: 0)
        #expect(tracker.advance(now: 0) == nil)
        tracker.revoke([1])
        #expect(tracker.advance(now: 0) == 5_000)
    }

    // MARK: On the writers' clock (behind a shuffle)

    @Test func onTheWritersClockEventTimeNeverPassesIt() {
        var tracker = WatermarkTracker(idleTimeout: 30_000, boundedByClock: true)
        // A source whose progress runs ahead of every writer's clock (another version's marks,
        // say): event time stops at the newest clock read.
        tracker.observe(partition: 0, maxEventTime: 900_000, now: 100_000)
        #expect(tracker.advance(now: 100_000) == 100_000)
        // Every source quiet: event time goes on from the slowest, never past the clock.
        tracker.observe(partition: 0, maxEventTime: 90_000, now: 200_000, reportedIdle: true, delivered: false, quietSince: 100_000)
        #expect(tracker.advance(now: 200_000) == 200_000)
        var wall = WatermarkTracker(idleTimeout: 30_000)
        wall.observe(partition: 0, maxEventTime: 900_000, now: 100_000)
        #expect(wall.advance(now: 100_000) == 900_000, "on the wall clock a producer ahead is let through, as before")
    }

    @Test func onTheWritersClockTimeDoesNotPassBetweenRecords() {
        // A task whose reading stalls (or that reads a backlog long after it was written) is
        // asked to advance at the same writers' clock: nothing moves, however long the wall
        // clock ran.
        var tracker = WatermarkTracker(idleTimeout: 30_000, boundedByClock: true)
        tracker.observe(partition: 0, maxEventTime: 50_000, now: 60_000)
        tracker.observe(partition: 1, maxEventTime: 40_000, now: 60_000, reportedIdle: true, delivered: false, quietSince: 41_000)
        #expect(tracker.advance(now: 60_000) == 50_000)
        for _ in 0..<3 { #expect(tracker.advance(now: 60_000) == 50_000) }
    }

    @Test func aTrackerThatHeardOnlyIdleReportsCountsTheQuietFromWhenTheSourcesSayTheyWentQuiet() {
        // The owner that saw the input go quiet and a new one that hears only the idle marks
        // afterwards reach the same event time at the same writers' clock.
        var old = WatermarkTracker(idleTimeout: 30_000, boundedByClock: true)
        old.assign([0, 1], now: 0)
        old.observe(partition: 0, maxEventTime: 58_000, now: 60_000)
        old.observe(partition: 1, maxEventTime: 55_000, now: 60_000)
        #expect(old.advance(now: 60_000) == 55_000)
        var new = WatermarkTracker(idleTimeout: 30_000, boundedByClock: true)
        new.assign([0, 1], now: 150_000)
        for tracker in [0, 1] {
            let quiet: [(Int32, Int64)] = [(0, 58_000), (1, 55_000)]
            for (source, progress) in quiet {
                if tracker == 0 {
                    old.observe(partition: source, maxEventTime: progress, now: 150_000, reportedIdle: true, delivered: false, quietSince: 60_000)
                } else {
                    new.observe(partition: source, maxEventTime: progress, now: 150_000, reportedIdle: true, delivered: false, quietSince: 60_000)
                }
            }
        }
        let before: Int64 = 55_000 + 90_000
        let byOld = old.advance(now: 150_000), byNew = new.advance(now: 150_000)
        #expect(byOld == before)
        #expect(byNew == before, "not from when the new one first heard of them (it would be 55,000)")
    }
}
