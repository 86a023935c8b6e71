import RecordFormats
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
    /// Every source's floor but the current run's.
    private var floors: [Int32: SourceFloor] = [:]
    /// The source of the latest events and its floor, kept out of `floors` until another
    /// source's event comes: a record's events come in runs of one source, so the table is
    /// read and written once a run rather than twice an event.
    private var run: (partition: Int32, floor: SourceFloor?)?

    enum Verdict: Equatable {
        case first
        case copy
        /// A first sighting, of an incarnation other than the one the floor belonged to.
        case firstOfNewIncarnation(previous: UInt64)
    }

    init() {}

    init(restored: [Int32: SourceFloor]) {
        floors = restored
    }

    @inline(__always)
    mutating func admit(_ source: SourceKey, sourceOffset: Int64) -> Verdict {
        if run?.partition != source.partition {
            settleRun()
            run = (source.partition, floors[source.partition])
        }
        let floor = run?.floor
        if let floor, floor.incarnation == source.incarnation {
            if sourceOffset <= floor.offset { return .copy }
            // Raised in place: a floor made anew cost a call into RecordFormats a hit.
            run?.floor?.offset = sourceOffset
            return .first
        }
        run = (source.partition, SourceFloor(incarnation: source.incarnation, offset: sourceOffset))
        if let floor, floor.incarnation != source.incarnation { return .firstOfNewIncarnation(previous: floor.incarnation) }
        return .first
    }

    private mutating func settleRun() {
        if let run, let floor = run.floor { floors[run.partition] = floor }
    }

    /// The map to checkpoint at the current processed position.
    var checkpoint: [Int32: SourceFloor] {
        var all = floors
        if let run, let floor = run.floor { all[run.partition] = floor }
        return all
    }

    static func == (a: SourceDedup, b: SourceDedup) -> Bool { a.checkpoint == b.checkpoint }
}
