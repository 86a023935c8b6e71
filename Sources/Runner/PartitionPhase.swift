/// Where one assigned partition of a runner's input stands, from its assignment until it is
/// given away: whether its records may reach the stage, and what the runner still asks the
/// cluster for it. One value per partition, kept by the `PartitionTracker`, with its
/// transitions in one place (`transition`), in the manner of `TaskPhase`.
///
/// ```
/// starting ──taken──▶ running
///                       └──stateAwaited──▶ awaitingRestore ──restoreBegan──▶ restoring
///                                                 └────────────stateIn──────────┴──▶ running
/// ```
///
/// Every phase but `running` holds the partition back (its input paused); a running partition
/// is paused too while the output is behind, which holds for all of them at once
/// (`PartitionTracker.backpressured`).
enum PartitionPhase: Sendable, Equatable {
    /// Assigned, but the cluster did not say where it starts (its commit, its log's bounds):
    /// asked again at each turn. Not owned yet: a record of it is dropped like any other
    /// partition's that is not this runner's.
    case starting
    /// Owned from its start; its state must be read back before its records are processed,
    /// and the cluster did not let the reading begin: asked again at each turn. `slipped`: a
    /// record of it came through the pause and was dropped, so the consumer's position moved
    /// past its start.
    case awaitingRestore(slipped: Bool)
    /// Its state is being read back from the state topic.
    case restoring(slipped: Bool)
    /// Its records go to the stage.
    case running

    enum Event: Sendable, Equatable {
        /// The cluster said where it starts, and the runner took it over from there.
        case taken
        /// The stage asked for its state, at the assignment, before any record of it was polled.
        case stateAwaited
        case restoreBegan
        /// A record of it came while it was held back for its state, and was dropped.
        case recordDropped
        /// Its state is read back (or there was none to read).
        case stateIn
    }

    /// The phase after `event`; an event that does not apply in a phase leaves it.
    static func transition(_ phase: PartitionPhase, on event: Event) -> PartitionPhase {
        switch (phase, event) {
        case (.starting, .taken): .running
        case (.running, .stateAwaited): .awaitingRestore(slipped: false)
        case (.awaitingRestore(let slipped), .restoreBegan): .restoring(slipped: slipped)
        case (.awaitingRestore, .recordDropped): .awaitingRestore(slipped: true)
        case (.restoring, .recordDropped): .restoring(slipped: true)
        case (.awaitingRestore, .stateIn), (.restoring, .stateIn): .running
        default: phase
        }
    }

    /// Owned: taken over from a known start (every phase but `starting`).
    var isOwned: Bool { self != .starting }

    /// Held back until its state is read back.
    var awaitsState: Bool {
        switch self {
        case .awaitingRestore, .restoring: true
        case .starting, .running: false
        }
    }

    /// Waiting for the cluster to answer a question the runner asks again at each turn (where
    /// it starts, or whether its restore may begin): what readiness reports as held back.
    var waitsOnCluster: Bool {
        switch self {
        case .starting, .awaitingRestore: true
        case .restoring, .running: false
        }
    }

    /// Whether the consumer's position moved past its start while it was held back.
    var slipped: Bool {
        switch self {
        case .awaitingRestore(let slipped), .restoring(let slipped): slipped
        case .starting, .running: false
        }
    }
}
