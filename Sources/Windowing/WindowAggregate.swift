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
    public var impressions = 0
    public var clicks = 0
    public var opens = 0
    public var uniqueImpressions = 0
    public var uniqueClicks = 0
    public var uniqueOpens = 0
    /// Distinct broadlogs clicked and not opened in this window: a click alone is a dismissal.
    public var dismissals = 0
    public var channels = ChannelCounts()
    public var platforms = PlatformCounts()
    public var revision = 1

    /// The window this record is of.
    public var key: WindowKey { WindowKey(size: windowEnd - windowStart, windowStart: windowStart, deliveryId: deliveryId) }
}
