/// Recognises events the normalize stage sent twice, by their source position.
///
/// The normalize stage commits its input offsets only after its records are acknowledged, so a
/// crash between sending and committing makes the next owner send those events again. Records
/// of one source partition reach a repartition partition in source-offset order (one producer
/// at a time owns a source partition, and the idempotent producer keeps order), so an event
/// whose source offset is not above the highest one already seen from its source is a copy.
///
/// `restored` is the map the previous owner checkpointed at its processed mark; it applies only
/// from that mark on, because the replay below it rebuilds `live` (see `Checkpoint`).
struct SourceDedup: Sendable, Equatable {
    private(set) var live: [Int32: Int64] = [:]
    private(set) var restored: [Int32: Int64] = [:]
    private(set) var restoredAt: Int64 = .max

    init() {}

    init(restored: [Int32: Int64], at position: Int64) {
        self.restored = restored
        self.restoredAt = position
    }

    /// True for a first sighting (and remembers it), false for a copy.
    @inline(__always)
    mutating func admit(source: Int32, sourceOffset: Int64, position: Int64) -> Bool {
        var floor = live[source] ?? -1
        if position >= restoredAt, let restoredOffset = restored[source] { floor = max(floor, restoredOffset) }
        guard sourceOffset > floor else { return false }
        live[source] = sourceOffset
        return true
    }

    /// The map to checkpoint at the current processed position.
    var checkpoint: [Int32: Int64] {
        live.merging(restored) { max($0, $1) }
    }
}
