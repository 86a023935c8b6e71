import TrackingDomain

/// A hit the engine refused because its window had already been finalised and dropped.
///
/// It is handed back rather than swallowed so the pipeline can dead-letter it as `too_late`
/// with its source position: nothing is lost silently.
public struct LateHit: Sendable, Hashable {
    public var event: TrackingEvent
    public var partition: Int32
    public var offset: Int64
    /// The `tag` of the `WindowInput` this hit came in.
    public var tag: Int
    /// Human-readable: the window, how far event time had moved, and what to do.
    public var detail: String

    public init(event: TrackingEvent, partition: Int32, offset: Int64, tag: Int = 0, detail: String) {
        self.event = event
        self.partition = partition
        self.offset = offset
        self.tag = tag
        self.detail = detail
    }

    /// Gives times in RFC 3339, and does not claim the window ever existed: a hit can be late
    /// for a window this worker never saw (a device offline for a day, or old input sent again).
    static func detail(eventTime: Int64, windowStart: Int64, windowEnd: Int64, retention: Int64, horizon: Int64) -> String {
        let closed = EventTimeMath.expiry(ofWindowEndingAt: windowEnd, retention: retention)
        return "event time \(RFC3339.format(epochMillis: eventTime)) belongs to the window "
            + "\(RFC3339.format(epochMillis: windowStart)) to \(RFC3339.format(epochMillis: windowEnd)), which stopped taking "
            + "corrections at \(RFC3339.format(epochMillis: closed)) (its end plus the retention of \(retention / 1000) s); "
            + "event time had already reached \(RFC3339.format(epochMillis: horizon)). The hit arrived too long after it "
            + "happened (a device that was offline, a wrong clock, or old input sent again to a live worker); "
            + "raise --retention to accept such hits, or backfill old input with trackpipe replay"
    }
}
