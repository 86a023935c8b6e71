/// Where a window task stands between its assignment and normal counting, in the spirit of
/// Kafka Streams' `Task.State`: what it may do with a record, an emission or a commit depends
/// on it, so it is one value with its transitions in one place (`transition`), not flags that
/// could disagree.
///
/// ```
/// restoring ──stateRead──▶ rereading ──processed past the mark──▶ settling ──past the heads──▶ running
///     │                        └──────processed past the mark and the heads────────────────────▲
///     └──stateRead, nothing to reread (to settling, or straight to running)────────────────────┘
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
    /// owner held for it may be lost, so the reread sends its dead letters again, and the state
    /// read back its records. Carries `countedPast`, as `settling` does, for after the reread.
    case rereading(countedPast: Int64?)
    /// Counting as when running, but windows read back hold hits up to this input offset past
    /// the processed mark (heads of a state write a crash cut short, ahead of its task record):
    /// the engine keeps what recognises them until the input passes it.
    case settling(countedPast: Int64)
    /// Counting; the engine has let go of what judged the reread and the windows read back.
    case running

    enum Event: Sendable, Equatable {
        /// The changelog was read to its end: whether the task is below the previous owner's
        /// processed mark, as the task record read back says; the furthest input offset the
        /// windows read back counted past that mark (nil: none); and what has been processed.
        case stateRead(belowMark: Bool, countedPast: Int64?, processed: Int64)
        /// A batch was counted, the input processed up to `processed`; whether the task is still
        /// below the mark.
        case processed(belowMark: Bool, processed: Int64)
    }

    /// The phase of a partition's task when it is created: its state is read back first.
    static func initial(start: TaskStart) -> TaskPhase { .restoring(committedChangelog: start.committedChangelog) }

    /// The phase after `event`. Events that do not apply in a phase leave it: records of a
    /// restoring partition are held back by the runner, and a restore happens once.
    static func transition(_ phase: TaskPhase, on event: Event) -> TaskPhase {
        switch (phase, event) {
        case (.restoring, .stateRead(let belowMark, let countedPast, let processed)):
            return belowMark ? .rereading(countedPast: countedPast) : settled(countedPast: countedPast, processed: processed)
        case (.rereading(let countedPast), .processed(let belowMark, let processed)):
            return belowMark ? phase : settled(countedPast: countedPast, processed: processed)
        case (.settling(let countedPast), .processed(_, let processed)):
            return settled(countedPast: countedPast, processed: processed)
        case (.restoring, .processed), (.rereading, .stateRead), (.settling, .stateRead), (.running, _):
            return phase
        }
    }

    /// Past the mark: settling until the input passes what the windows read back counted.
    private static func settled(countedPast: Int64?, processed: Int64) -> TaskPhase {
        guard let countedPast, processed < countedPast else { return .running }
        return .settling(countedPast: countedPast)
    }

    /// Applies `event`; returns whether the task has just begun running: the engine may let go
    /// of what judged the reread and the windows read back.
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
