/// Report of windows dropped early because the engine reached `maxEntries`.
///
/// Running out of memory would lose everything; dropping the oldest windows loses only the
/// ability to correct them. The pipeline logs and counts this so the operator can raise the
/// cap or shorten retention.
public struct CapacityEviction: Sendable, Hashable {
    /// Retained entries just before the eviction, and the cap that was reached.
    public var entriesBefore: Int
    public var maxEntries: Int
    /// Entries released.
    public var entriesFreed: Int
    /// (delivery, window) records dropped, and how many of those had not yet reached their
    /// normal emission time and were therefore emitted early.
    public var windowsEvicted: Int
    public var windowsEmittedEarly: Int
    /// `windowsEvicted` by window size (ms): the sizes whose windows the cap finalized.
    public var windowsEvictedBySize: [Int64: Int] = [:]
    /// Range of window starts dropped (epoch ms).
    public var oldestWindowStart: Int64
    public var newestWindowStart: Int64
    /// The eviction horizon after this eviction: later hits for these windows are too late.
    public var newHorizon: Int64

    init(
        entriesBefore: Int, maxEntries: Int, entriesFreed: Int, windowsEvicted: Int,
        windowsEmittedEarly: Int, oldestWindowStart: Int64, newestWindowStart: Int64, newHorizon: Int64
    ) {
        self.entriesBefore = entriesBefore
        self.maxEntries = maxEntries
        self.entriesFreed = entriesFreed
        self.windowsEvicted = windowsEvicted
        self.windowsEmittedEarly = windowsEmittedEarly
        self.oldestWindowStart = oldestWindowStart
        self.newestWindowStart = newestWindowStart
        self.newHorizon = newHorizon
    }
}
