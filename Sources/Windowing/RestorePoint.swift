/// What the previous owner of a partition had settled, as a new owner's engine keeps it: its
/// processed mark, its horizon, and, for a task with a changelog, how far each window of the
/// state read back had counted.
///
/// A hit below `processedMark` whose window expires at or before `evictedBefore` was either in
/// a window the previous owner emitted for the last time or was dead-lettered by it; counting
/// it again would double it.
///
/// Without `counted`, the horizon alone judges a reread hit. With it (a task with a
/// changelog), the reread covers exactly the interval whose output the previous run held
/// back for its last commit and may have lost in a crash: `counted` then says how far each
/// window of the state read back had counted, so that the reread tells every hit the previous
/// owner counted (dropped silently, its record is sent again from the state) from one it judged
/// too late (its dead letter is sent again), whatever the horizon of the reread.
struct RestorePoint: Sendable, Hashable {
    var processedMark: Int64
    var evictedBefore: Int64
    /// `countedThrough` of each window of the state read back, evicted or not; nil when the
    /// reread's verdicts do not come from a state.
    var counted: [WindowKey: Int64]?
    /// Past `processedMark`, up to this offset (exclusive), windows read back may hold hits too:
    /// a state write cut short by a crash can keep some windows' heads, counting hits past the
    /// task record it never reached. Such a hit its window holds was counted (dropped silently);
    /// any other is judged afresh, since no verdict on it was settled or sent.
    var countedMark: Int64 = .min
}
