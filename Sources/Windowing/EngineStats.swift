/// A snapshot for metrics and logs; cheap enough to take once per batch or per scrape.
public struct EngineStats: Sendable, Hashable {
    /// The windows in memory by size (ms), every size the engine counts: what the gauges show
    /// per size (`windows.total` for all of them).
    public var windows: [Int64: WindowFigures] = [:]
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

/// The windows of one size in memory (or of several, added up).
public struct WindowFigures: Sendable, Hashable {
    /// (delivery, window) records not emitted yet.
    public var openWindows = 0
    /// The event time at which the oldest of them is first emitted: its end plus the grace, or
    /// with final emission plus the retention (the watermark must reach it); nil without any.
    public var firstOpenDue: Int64?
    /// (delivery, window) records emitted and kept for late corrections.
    public var retainedWindows = 0
    /// Distinct window starts in memory (about retention / size + a few).
    public var windowStarts = 0
    /// Retained (window, delivery, broadlog) entries: the figure `maxEntries` caps.
    public var entries = 0

    public init() {}

    /// Adds another size's or another engine's: counts add up, the first due is the earliest.
    public mutating func add(_ other: WindowFigures) {
        openWindows += other.openWindows
        retainedWindows += other.retainedWindows
        windowStarts += other.windowStarts
        entries += other.entries
        if let due = other.firstOpenDue { firstOpenDue = Swift.min(firstOpenDue ?? due, due) }
    }
}

extension Dictionary where Key == Int64, Value == WindowFigures {
    /// Every size together.
    public var total: WindowFigures { values.reduce(into: WindowFigures()) { $0.add($1) } }
}
