/// What one store (one shard) produced in one call; the engine merges these across shards.
struct StoreOutput: Sendable {
    var emitted: [WindowAggregate] = []
    /// Of `emitted`, the records of windows emitted for the first time (closed, not corrected).
    var windowsClosed = 0
    var tooLate: [LateHit] = []
    /// The `tag`s of reread hits this store had already counted (or finalized).
    var rereadFinalTags: [Int] = []
    var hitsProcessed = 0
    var hitsCounted = 0
    /// (delivery, window) records dropped from memory in this call.
    var windowsEvicted = 0
    /// Of those, records whose first emission was forced before the watermark reached
    /// end + grace (capacity or restored horizon).
    var windowsEmittedEarly = 0
    var entriesFreed = 0
    var oldestEvictedStart: Int64?
    var newestEvictedStart: Int64?
    /// Entries still retained after the call.
    var entries = 0
}
