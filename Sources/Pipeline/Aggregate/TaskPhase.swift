/// Where a window task stands between its assignment and normal counting, in the spirit of
/// Kafka Streams' `Task.State`: what it may do with a record, an emission or a commit depends
/// on it, so it is one value with its transitions in one place (`transition`), not flags that
/// could disagree.
///
/// ```
/// restoring ──stateRead──▶ replaying ──processed past the mark──▶ running
///     └──────stateRead, nothing to replay──────────────────────────▶ running
/// ```
///
/// A changelog that contradicts the commit is refused before any event: the stage throws, the
/// worker stops, and the task stays `restoring`, so nothing of it is counted or committed.
///
/// A partition's task begins `restoring` (`initial`). `replay`'s task (`ReplayTask`), which
/// keeps no changelog, has no phase.
enum TaskPhase: Sendable, Equatable {
    /// The state is being read back from the changelog: no record may be processed, nothing
    /// is committed or written. Carries the changelog position the last commit recorded, which
    /// the state read back must reach (nil: no commit).
    case restoring(committedChangelog: Int64?)
    /// Re-reading input the previous owner had processed, below its processed mark (in the
    /// changelog's task record, written ahead of a commit that was never made): the output that
    /// owner held for it may be lost, so the replay sends its dead letters again, and the state
    /// read back its records.
    case replaying
    case running

    enum Event: Sendable, Equatable {
        /// The changelog was read to its end: whether the task is below the previous owner's
        /// processed mark, as the task record read back says.
        case stateRead(belowMark: Bool)
        /// A batch was counted; whether the task is still below the mark.
        case processed(belowMark: Bool)
    }

    /// The phase of a partition's task when it is created: its state is read back first.
    static func initial(start: TaskStart) -> TaskPhase { .restoring(committedChangelog: start.committedChangelog) }

    /// The phase after `event`. Events that do not apply in a phase leave it: records of a
    /// restoring partition are held back by the runner, and a restore happens once.
    static func transition(_ phase: TaskPhase, on event: Event) -> TaskPhase {
        switch (phase, event) {
        case (.restoring, .stateRead(let belowMark)):
            return belowMark ? .replaying : .running
        case (.replaying, .processed(let belowMark)):
            return belowMark ? phase : .running
        case (.restoring, .processed), (.replaying, .stateRead), (.running, _):
            return phase
        }
    }

    /// Applies `event`; returns whether the task has just begun running, having restored or
    /// replayed.
    mutating func handle(_ event: Event) -> Bool {
        let next = Self.transition(self, on: event)
        defer { self = next }
        return next == .running && self != .running
    }

    var isRestoring: Bool {
        if case .restoring = self { return true }
        return false
    }
}
