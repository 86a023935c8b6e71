/// The record the pipeline publishes for one (delivery, window).
///
/// Every emission carries the complete counts of the window so far, never a delta: consumers
/// keep the last record per key and are done. `revision` grows with each correction within
/// one engine's lifetime (it restarts at 1 after a process restart, so "last record wins",
/// not "highest revision wins").
public struct WindowAggregate: Sendable, Hashable {
    public var deliveryId: String
    /// Epoch milliseconds, inclusive.
    public var windowStart: Int64
    /// Epoch milliseconds, exclusive.
    public var windowEnd: Int64
    public var impressions: Int
    public var clicks: Int
    public var opens: Int
    public var uniqueImpressions: Int
    public var uniqueClicks: Int
    public var uniqueOpens: Int
    /// Distinct broadlogs clicked and not opened in this window: a click alone is a dismissal.
    public var dismissals: Int
    public var channels: ChannelCounts
    public var platforms: PlatformCounts
    public var revision: Int

    public init(
        deliveryId: String, windowStart: Int64, windowEnd: Int64,
        impressions: Int = 0, clicks: Int = 0, opens: Int = 0,
        uniqueImpressions: Int = 0, uniqueClicks: Int = 0, uniqueOpens: Int = 0, dismissals: Int = 0,
        channels: ChannelCounts = .init(), platforms: PlatformCounts = .init(), revision: Int = 1
    ) {
        self.deliveryId = deliveryId
        self.windowStart = windowStart
        self.windowEnd = windowEnd
        self.impressions = impressions
        self.clicks = clicks
        self.opens = opens
        self.uniqueImpressions = uniqueImpressions
        self.uniqueClicks = uniqueClicks
        self.uniqueOpens = uniqueOpens
        self.dismissals = dismissals
        self.channels = channels
        self.platforms = platforms
        self.revision = revision
    }
}
