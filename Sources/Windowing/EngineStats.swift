/// A snapshot for metrics and logs; cheap enough to take once per batch or per scrape.
public struct EngineStats: Sendable, Hashable {
    /// (delivery, window) records not emitted yet.
    public var openWindows: Int = 0
    /// The event time at which the oldest of them is first emitted: its end plus the grace, or
    /// with final emission plus the retention (the watermark must reach it); nil without any.
    public var firstOpenDue: Int64?
    /// (delivery, window) records emitted and kept for late corrections.
    public var retainedWindows: Int = 0
    /// Distinct window starts in memory (about retention / size + a few).
    public var windowStarts: Int = 0
    /// Retained (window, delivery, broadlog) entries: the figure `maxEntries` caps.
    public var entries: Int = 0
    /// Lifetime totals of this engine.
    public var hitsProcessed: Int = 0
    public var hitsCounted: Int = 0
    public var recordsEmitted: Int = 0
    public var tooLateHits: Int = 0
    public var rereadFinalHits: Int = 0
    public var windowsEvicted: Int = 0
    public var capacityEvictions: Int = 0
    public var capacityEvictedWindows: Int = 0

    public init() {}
}
