/// Event-time progress across input partitions.
///
/// Each partition's watermark is the highest event time it delivered; the global watermark is
/// the lowest among partitions that are still active, so a lagging partition holds windows
/// open instead of having its hits arrive late. A partition that delivered nothing for
/// `idleTimeout` of wall-clock time stops holding back; when every partition is idle the
/// watermark follows the wall clock from the slowest partition that was still delivering when
/// the input went quiet, so a quiet topic still gets its windows and a pause makes no lagging
/// partition's hits late. Wall-clock time is always passed in, never read.
struct WatermarkTracker: Sendable {
    struct PartitionClock: Sendable, Hashable {
        /// Highest event time seen; nil while the partition has delivered nothing with a time.
        var maxEventTime: Int64?
        /// Wall-clock ms of the last hit, or of the assignment if nothing arrived yet.
        var lastActivity: Int64
        /// The source's own reader said it went quiet (a mark carried through a shuffle).
        var reportedIdle = false
        /// Activity comes from deliveries seen (or reported), not only from when the partition
        /// was first declared.
        var delivered = false
    }

    let idleTimeout: Int64
    /// The `now` given is the newest writer's clock read (`EngineClock.writers`): event time
    /// never passes it.
    let boundedByClock: Bool
    private(set) var partitions: [Int32: PartitionClock] = [:]
    /// Never goes backwards.
    private(set) var current: Int64?
    /// Wall-clock ms of the most recent hit on any partition.
    private(set) var lastInputAt: Int64?

    init(idleTimeout: Int64, boundedByClock: Bool = false) {
        self.idleTimeout = idleTimeout
        self.boundedByClock = boundedByClock
    }

    /// Assigned partitions that have sent nothing hold the watermark until they go idle, which
    /// is what keeps a reread from declaring windows final before their partition caught up.
    mutating func assign(_ assigned: [Int32], now: Int64) {
        for partition in assigned where partitions[partition] == nil {
            partitions[partition] = PartitionClock(maxEventTime: nil, lastActivity: now)
        }
    }

    mutating func revoke(_ revoked: [Int32]) {
        for partition in revoked { partitions[partition] = nil }
    }

    /// Records that `partition` delivered hits up to `maxEventTime` (nil: hits without time).
    /// `reportedIdle` is the source reader's own judgement, carried through a shuffle: an idle
    /// report keeps the watermark it brings but does not count as activity, unless the source
    /// `delivered` in the same batch (its events, then its reader saying it went quiet: a
    /// backlog read at once).
    ///
    /// An idle report may say when the source last delivered (`quietSince`, its reader's clock):
    /// that is its last activity as far as the "every partition idle" rule goes, so that a
    /// tracker that only ever heard the source idle (a new owner) counts the quiet from when the
    /// input really went quiet, as the one before it did.
    mutating func observe(
        partition: Int32, maxEventTime: Int64?, now: Int64, reportedIdle: Bool = false, delivered: Bool? = nil, quietSince: Int64? = nil
    ) {
        var clock = partitions[partition] ?? PartitionClock(maxEventTime: nil, lastActivity: now)
        clock.maxEventTime = EventTimeMath.latest(clock.maxEventTime, maxEventTime)
        clock.reportedIdle = reportedIdle
        if delivered ?? !reportedIdle {
            clock.lastActivity = Swift.max(clock.lastActivity, now)
            clock.delivered = true
            lastInputAt = Swift.max(lastInputAt ?? now, now)
        } else if reportedIdle, let reported = quietSince {
            let quietSince = Swift.min(reported, now)
            clock.lastActivity = clock.delivered ? Swift.max(clock.lastActivity, quietSince) : quietSince
            clock.delivered = true
            lastInputAt = Swift.max(lastInputAt ?? quietSince, quietSince)
        }
        partitions[partition] = clock
    }

    func isIdle(_ clock: PartitionClock, now: Int64) -> Bool {
        clock.reportedIdle || now - clock.lastActivity >= idleTimeout
    }

    /// Recomputes the global watermark for wall-clock `now` and returns it.
    ///
    /// When every partition is idle, event time goes on from the slowest of the partitions that
    /// were still delivering when the input went quiet (within the idle timeout of the last
    /// hit), plus the wall-clock time since: a quiet topic still closes its windows, and a pause
    /// of everyone (backpressure, a fetch outage, a slow producer) never makes a lagging
    /// partition's hits late. A partition that went quiet long before the others does not hold
    /// a quiet topic back for ever. A tracker that has only heard its sources say they are idle
    /// (a new owner behind a shuffle, taking over after the input went quiet) goes on from the
    /// slowest of them from when it first heard of them: later than its previous owner would have, never
    /// earlier, and without it the windows it read back would never close. Bounded by the clock,
    /// the watermark never passes `now`.
    @discardableResult
    mutating func advance(now: Int64) -> Int64? {
        guard !partitions.isEmpty else { return current }
        var candidate: Int64?
        var anyActive = false
        var activeHoldsBack = false
        var lowestActive = Int64.max
        for clock in partitions.values {
            guard !isIdle(clock, now: now) else { continue }
            anyActive = true
            if let seen = clock.maxEventTime {
                lowestActive = Swift.min(lowestActive, seen)
            } else {
                activeHoldsBack = true
            }
        }
        if anyActive {
            candidate = activeHoldsBack ? nil : lowestActive
        } else if let quietSince = lastInputAt ?? partitions.values.map(\.lastActivity).min() {
            // With nothing delivered yet, each partition's activity is when it was first heard of.
            let stillDelivering = partitions.values.filter { $0.lastActivity >= quietSince - idleTimeout }.compactMap(\.maxEventTime)
            if let slowest = stillDelivering.min() {
                candidate = EventTimeMath.add(slowest, Swift.max(0, now - quietSince))
            }
        }
        if boundedByClock, let bound = candidate { candidate = Swift.min(bound, now) }
        if let candidate {
            current = Swift.max(current ?? candidate, candidate)
        }
        return current
    }
}
