/// Everything one engine call produced, for the pipeline to publish, dead-letter and count.
public struct EngineOutput: Sendable {
    /// Window records to publish, sorted by (windowStart, deliveryId, revision) so the output
    /// does not depend on the shard count or on hash seeds.
    public var emitted: [WindowAggregate]
    /// Of `emitted`, the records of windows emitted for the first time: windows that closed,
    /// as opposed to corrections of windows already out.
    public var windowsClosed = 0
    /// Hits to dead-letter as `too_late`, sorted by (partition, offset): too late for every size.
    public var tooLate: [LateHit]
    /// Hits too late for some sizes and counted in another, by the size (ms) they were too late
    /// for: accepted, and reported per size.
    public var lateInSomeSizes: [Int64: Int] = [:]
    /// Reread hits that the previous run had already accounted for; dropped, only counted.
    public var rereadFinal: Int
    /// Early evictions caused by the memory cap (empty in normal operation).
    public var capacityEvictions: [CapacityEviction]

    public init(
        emitted: [WindowAggregate] = [], tooLate: [LateHit] = [], rereadFinal: Int = 0,
        capacityEvictions: [CapacityEviction] = []
    ) {
        self.emitted = emitted
        self.tooLate = tooLate
        self.rereadFinal = rereadFinal
        self.capacityEvictions = capacityEvictions
    }
}
