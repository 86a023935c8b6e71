import TrackingDomain

/// The record the pipeline publishes for one (delivery, window).
///
/// Every emission carries the complete counts of the window so far, never a delta: consumers
/// keep the last record per key and are done. `revision` is the number of hits counted in the
/// window (impressions + clicks + opens): every correction adds hits, so it grows with each
/// emission, and it depends only on the window's content, so a restart, a rebalance or another
/// instance rebuilding the window emits the same revision for the same counts. A sink may keep
/// the record with the highest revision per key (an upsert on revision, an external version).
public struct WindowAggregate: Sendable, Hashable {
    public var deliveryId: DeliveryID
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

    init(
        deliveryId: DeliveryID, windowStart: Int64, windowEnd: Int64,
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
