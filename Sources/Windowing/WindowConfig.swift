/// Tunables of the windowing engine, all in milliseconds of event time except `idleTimeout`
/// (wall-clock) and `maxEntries` (a count).
///
/// One value bundles them so the pipeline, the bench and the tests build engines the same way
/// and the defaults live in exactly one place (the contract's section 5).
public struct WindowConfig: Sendable, Hashable {
    /// Tumbling window length; windows are aligned to the Unix epoch so every worker and every
    /// replay cuts the same windows.
    public var size: Int64
    /// How long after a window's end the engine waits for stragglers before the first emission.
    public var grace: Int64
    /// How long after a window's end late hits still correct it (re-emission); beyond that a
    /// hit is dead-lettered as `too_late`. Must be at least `grace`.
    public var retention: Int64
    /// Wall-clock time without input after which a partition stops holding the watermark back.
    public var idleTimeout: Int64
    /// Upper bound on retained (window, delivery, broadlog) entries; reaching it evicts the
    /// oldest windows early instead of growing until the process is killed.
    public var maxEntries: Int

    /// Traps on nonsensical combinations: they are configuration errors the CLI must reject
    /// up front, not conditions to survive at runtime.
    public init(
        size: Int64 = 60_000,
        grace: Int64 = 10_000,
        retention: Int64 = 3_600_000,
        idleTimeout: Int64 = 30_000,
        maxEntries: Int = 20_000_000
    ) {
        precondition(size > 0, "window size must be positive")
        precondition(grace >= 0, "grace must not be negative")
        precondition(retention >= grace, "retention must be at least the grace period")
        precondition(idleTimeout > 0, "idle timeout must be positive")
        precondition(maxEntries > 0, "maxEntries must be positive")
        self.size = size
        self.grace = grace
        self.retention = retention
        self.idleTimeout = idleTimeout
        self.maxEntries = maxEntries
    }
}
