/// What the `now` a `WindowEngine` is given means: the clock idleness is timed by, and what the
/// watermark goes on with when every source is idle.
public enum EngineClock: Sendable, Hashable {
    /// This process's wall clock (a window task reading raw hits, one stage or `replay`): a
    /// source's progress may run ahead of it (a producer whose clock is ahead, within
    /// `--max-future-skew`).
    case wall
    /// Behind a shuffle: the newest clock of the writers whose records the caller has read (each
    /// record says when it was written). Every source's progress is at or below it, and so is
    /// event time: the watermark never passes it. The engine's decisions are then a function of
    /// what it read, not of when it read it: a backlog read hours later, or after a stall,
    /// gives the verdicts it would have given live, and a task's horizon never passes the clock
    /// of a record written after the ones it has read (the originals rule, docs/scale-out.md).
    case writers
}
