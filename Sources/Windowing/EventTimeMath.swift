/// Window arithmetic in one place, saturating so that absurd event times from the input (the
/// worker never crashes on input) cannot trap on overflow.
public enum EventTimeMath {
    /// Start of the epoch-aligned window holding `time`, rounding toward negative infinity so
    /// times before 1970 land in the window that contains them.
    @inline(__always)
    public static func windowStart(of time: Int64, size: Int64) -> Int64 {
        let quotient = time / size
        let floored = (time % size < 0) ? quotient - 1 : quotient
        let (start, overflow) = floored.multipliedReportingOverflow(by: size)
        return overflow ? .min : start
    }

    @inline(__always)
    public static func add(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        if overflow { return b > 0 ? .max : .min }
        return sum
    }

    /// When the last of the windows of a hit at `time` stops taking corrections: the latest end
    /// over `sizes`, plus the retention. Past it, for the horizon, the hit is too late for every
    /// size (the one rule of what the pipeline dead-letters as too late, and so of which hits
    /// carry their originals across the shuffle).
    @inline(__always)
    public static func lastExpiry(ofHitAt time: Int64, sizes: [Int64], retention: Int64) -> Int64 {
        var last = Int64.min
        for size in sizes { last = Swift.max(last, expiry(ofWindowEndingAt: add(windowStart(of: time, size: size), size), retention: retention)) }
        return last
    }

    /// When the window ending at `end` stops taking corrections: its end plus the retention. A
    /// horizon at or past it has evicted the window; a hit of it arriving later is too late.
    @inline(__always)
    public static func expiry(ofWindowEndingAt end: Int64, retention: Int64) -> Int64 {
        add(end, retention)
    }

    /// The later of a watermark and a newly seen time: a watermark never goes backwards, and nil
    /// (nothing seen yet) gives way to any time.
    @inlinable
    public static func latest(_ watermark: Int64?, _ seen: Int64?) -> Int64? {
        guard let watermark else { return seen }
        guard let seen else { return watermark }
        return Swift.max(watermark, seen)
    }

    /// `latest(_:_:)` for a time that is known.
    @inlinable
    public static func latest(_ watermark: Int64?, _ seen: Int64) -> Int64 {
        guard let watermark else { return seen }
        return Swift.max(watermark, seen)
    }
}
