/// The hit counters of one (delivery, window), by name: what an aggregate record reports and a
/// changelog carries. 32-bit to keep a window small; 2^32 hits of one delivery in one window is
/// far beyond any real traffic, and they wrap rather than trap.
public struct WindowCounters: Sendable, Hashable {
    public var impressions: UInt32 = 0
    public var clicks: UInt32 = 0
    public var opens: UInt32 = 0
    public var uniqueImpressions: UInt32 = 0
    public var uniqueClicks: UInt32 = 0
    public var uniqueOpens: UInt32 = 0
    /// Distinct broadlogs clicked and not opened.
    public var dismissals: UInt32 = 0
    public var push: UInt32 = 0
    public var local: UInt32 = 0
    public var unknownChannel: UInt32 = 0
    public var ios: UInt32 = 0
    public var android: UInt32 = 0
    public var unknownPlatform: UInt32 = 0

    public init() {}

    /// Every counter with its name, in one fixed order: the one place an encoding that writes
    /// them one after the other (the changelog's) takes its order from.
    public static let all: [(name: String, keyPath: WritableKeyPath<WindowCounters, UInt32> & Sendable)] = [
        ("impressions", \.impressions), ("clicks", \.clicks), ("opens", \.opens),
        ("uniqueImpressions", \.uniqueImpressions), ("uniqueClicks", \.uniqueClicks), ("uniqueOpens", \.uniqueOpens),
        ("dismissals", \.dismissals), ("push", \.push), ("local", \.local), ("unknownChannel", \.unknownChannel),
        ("ios", \.ios), ("android", \.android), ("unknownPlatform", \.unknownPlatform),
    ]

    /// Hits counted: the revision a record of the window carries.
    public var hitCount: Int { Int(impressions) + Int(clicks) + Int(opens) }
}
