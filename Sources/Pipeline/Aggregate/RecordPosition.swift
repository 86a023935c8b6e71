/// Where a hit sits in a window task's input, as the engine orders hits and remembers, per
/// window, the one it counted through (`countedThrough`): its record's offset in the high bits
/// and its place among the record's events in the low 16, since several events can share a
/// record. One encoding for the task that makes positions and for those that read offsets back
/// out of what a window counted.
enum RecordPosition {
    static func of(offset: Int64, event: Int) -> Int64 {
        offset << 16 | Int64(UInt16(truncatingIfNeeded: event))
    }

    /// The first offset past the record of `position`: a commit there lies past every hit at or
    /// before it.
    static func offsetPast(_ position: Int64) -> Int64 {
        (position >> 16) + 1
    }
}
