/// Recognises events the normalize stage sent twice, by their source position.
///
/// The normalize stage commits its input offsets only after its records are acknowledged, so a
/// crash between sending and committing makes the next owner send those events again. Records
/// of one source partition reach a repartition partition in source-offset order (one producer
/// at a time owns a source partition, and the idempotent producer keeps order), so an event
/// whose source offset is not above the highest one already seen from its source is a copy.
///
/// A source partition's floor belongs to one incarnation of it (`SourceKey`): an event of
/// another incarnation (another input topic under the same group, or the topic recreated) is
/// never a copy of the old positions; it starts a new floor, and `admit` says so.
///
/// A new owner begins with the map the previous owner checkpointed at its processed mark, where
/// it committed and the new owner starts reading (see `Checkpoint`).
struct SourceDedup: Sendable, Equatable {
    private(set) var live: [Int32: SourceFloor] = [:]

    enum Verdict: Equatable {
        case first
        case copy
        /// A first sighting, of an incarnation other than the one the floor belonged to.
        case firstOfNewIncarnation(previous: UInt64)
    }

    init() {}

    init(restored: [Int32: SourceFloor]) {
        live = restored
    }

    @inline(__always)
    mutating func admit(_ source: SourceKey, sourceOffset: Int64) -> Verdict {
        let floor = live[source.partition]
        if let floor, floor.incarnation == source.incarnation, sourceOffset <= floor.offset { return .copy }
        live[source.partition] = SourceFloor(incarnation: source.incarnation, offset: sourceOffset)
        if let floor, floor.incarnation != source.incarnation { return .firstOfNewIncarnation(previous: floor.incarnation) }
        return .first
    }

    /// The map to checkpoint at the current processed position.
    var checkpoint: [Int32: SourceFloor] { live }
}

/// The highest source offset counted from one source partition, and the incarnation it
/// belongs to.
struct SourceFloor: Sendable, Hashable {
    var incarnation: UInt64
    var offset: Int64

    init(incarnation: UInt64, offset: Int64) {
        self.incarnation = incarnation
        self.offset = offset
    }
}
