import Windowing

/// Which hits carry their original message across the shuffle: those the aggregate stage may
/// judge `too_late`, so that their dead letter is the message as it arrived.
///
/// A window task judges a hit too late when its window's end plus the retention is at or below
/// the task's eviction horizon. Behind the shuffle that horizon never passes the newest
/// writer's clock the task has read (every mark is at or below the clock of the record that
/// carries it, and event time never passes that clock: `WindowEngine`'s writers' clock), and
/// every record the task reads before a hit's record was in the log before it. So when a record
/// written at `writerClock` is overtaken by no record written more than `delayAllowance` later
/// (the writer's delay in producing it, and the clocks' disagreement between instances, within
/// the allowance), no hit of it whose window expires after `writerClock + delayAllowance` can
/// be too late: those travel without their original. The proof, its assumptions and what
/// happens beyond them are in docs/scale-out.md.
///
/// The rule depends on nothing but the hit and the writer's clock, so each lane decides it for
/// its own events, and another run over the same records gives the same verdicts with the same
/// originals.
package struct OriginalRule: Sendable, Hashable {
    /// The window sizes: a hit is dead-lettered only when it is too late for every size.
    package let windowSizes: [Int64]
    package let retention: Int64
    /// How late a record may reach a repartition partition compared with another writer's
    /// record written at the same time, clock differences included.
    package let delayAllowance: Int64

    package init(windowSizes: [Int64], retention: Int64, delayAllowance: Int64) {
        self.windowSizes = windowSizes.map { max(1, $0) }
        self.retention = retention
        self.delayAllowance = max(0, delayAllowance)
    }

    /// The rule for windows of `window`: the allowance is the idle timeout (a writer silent that
    /// long is taken for dead anyway) or half the retention, whichever is longer, so that an
    /// outage of a writer shorter than that never costs an original.
    package init(window: WindowConfig) {
        self.init(windowSizes: window.lengths, retention: window.retention, delayAllowance: Self.defaultAllowance(window))
    }

    package static func defaultAllowance(_ window: WindowConfig) -> Int64 {
        max(window.idleTimeout, window.retention / 2)
    }

    /// Whether a hit of `eventTime`, in a record written at `writerClock`, may be judged too late
    /// downstream.
    @inline(__always)
    package func carries(eventTime: Int64, writerClock: Int64) -> Bool {
        EventTimeMath.lastExpiry(ofHitAt: eventTime, sizes: windowSizes, retention: retention) <= EventTimeMath.add(writerClock, delayAllowance)
    }

    /// The earliest event time a record written at `writerClock` sends without its original (nil:
    /// none, every hit carries it), so that `carries` is `eventTime < it` for the whole batch.
    ///
    /// Why: `carries` works out each size's window of the hit (a division each), about 60
    /// instructions a hit (callgrind); it is monotone in the event time (a later hit's windows
    /// end no sooner, and saturating sums keep the order), so a batch finds where it turns by
    /// bisection, 64 calls, once.
    package func firstUncarried(writerClock: Int64) -> Int64? {
        guard carries(eventTime: .min, writerClock: writerClock) else { return .min }
        guard !carries(eventTime: .max, writerClock: writerClock) else { return nil }
        // carries(low) and not carries(high), all along.
        var (low, high) = (Int64.min, Int64.max)
        while UInt64(bitPattern: high) &- UInt64(bitPattern: low) > 1 {
            let middle = Int64(bitPattern: UInt64(bitPattern: low) &+ (UInt64(bitPattern: high) &- UInt64(bitPattern: low)) / 2)
            if carries(eventTime: middle, writerClock: writerClock) { low = middle } else { high = middle }
        }
        return high
    }
}
