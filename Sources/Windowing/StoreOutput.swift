/// What one store (one shard) produced in one call; the engine merges these across shards.
struct StoreOutput: Sendable {
    var emitted: [WindowAggregate] = []
    /// Of `emitted`, the records of windows emitted for the first time (closed, not corrected).
    var windowsClosed = 0
    var tooLate: [LateHit] = []
    /// The reread hits this store had already counted (or finalized).
    var rereadFinal: [HitPlace] = []
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

/// Where a hit came in: its partition, offset and `tag` (several hits of one record behind a
/// shuffle share its offset): what tells one hit from another across the sizes' stores.
struct HitPlace: Hashable, Sendable {
    var partition: Int32
    var offset: Int64
    var tag: Int

    init(_ input: WindowInput) { (partition, offset, tag) = (input.partition, input.offset, input.tag) }
    init(_ hit: LateHit) { (partition, offset, tag) = (hit.partition, hit.offset, hit.tag) }
}
