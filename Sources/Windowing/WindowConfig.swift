/// One size of window the engine counts in, with when its records go out. Grace and emission
/// are per size: a day's first record may wait for what a minute's would not.
public struct WindowSize: Sendable, Hashable, Comparable {
    /// Tumbling window length; windows are aligned to the Unix epoch so every worker and every
    /// `replay` cuts the same windows.
    public var size: Int64
    /// How long after a window's end the engine waits for stragglers before the first emission.
    public var grace: Int64
    /// When a window's record goes out.
    public var emission: WindowEmission

    public init(size: Int64, grace: Int64 = 10_000, emission: WindowEmission = .changes) {
        self.size = size
        self.grace = grace
        self.emission = emission
    }

    public static func < (a: WindowSize, b: WindowSize) -> Bool { a.size < b.size }

    /// A size as `--window` takes it, and as messages, summaries and the metrics' `window` label
    /// name it: `1m`, `5m`, `30s`, `1h`, `1d`, `1500ms`.
    public static func text(_ millis: Int64) -> String {
        if millis % 86_400_000 == 0 { return "\(millis / 86_400_000)d" }
        if millis % 3_600_000 == 0 { return "\(millis / 3_600_000)h" }
        if millis % 60_000 == 0 { return "\(millis / 60_000)m" }
        if millis % 1_000 == 0 { return "\(millis / 1_000)s" }
        return "\(millis)ms"
    }

    /// Several sizes as `--window` takes them: `1m,1h,1d`.
    public static func text(_ sizes: [Int64]) -> String { sizes.map { text($0) }.joined(separator: ",") }

    /// Counts by size (ms), smaller first, as summaries, progress lines and logs write them: `1m 12, 1h 3`.
    public static func text(counts: [Int64: Int]) -> String {
        counts.sorted { $0.key < $1.key }.map { "\(text($0.key)) \($0.value)" }.joined(separator: ", ")
    }
}

/// Tunables of the windowing engine, all in milliseconds of event time except `idleTimeout`
/// (wall-clock) and `maxEntries` (a count).
///
/// One value bundles them so the pipeline, the bench and the tests build engines the same way
/// and the defaults live in exactly one place (the contract's section 5). The sizes share one
/// event time, one retention and one memory cap: a hit is read, scanned and shuffled once and
/// counted into a window of each size.
public struct WindowConfig: Sendable, Hashable {
    /// The sizes counted, ascending and distinct; at least one.
    public private(set) var sizes: [WindowSize]
    /// How long after a window's end late hits still correct it (re-emission); beyond that a
    /// hit is too late for that window. Must be at least each size's grace.
    public var retention: Int64
    /// Wall-clock time without input after which a partition stops holding the watermark back.
    public var idleTimeout: Int64
    /// Upper bound on retained (window, delivery, broadlog) entries of every size together;
    /// reaching it evicts the windows that would expire first, early, instead of growing until
    /// the process is killed.
    public var maxEntries: Int

    /// One size (the contract's default emission, every change).
    public init(
        size: Int64 = 60_000,
        grace: Int64 = 10_000,
        retention: Int64 = 3_600_000,
        idleTimeout: Int64 = 30_000,
        maxEntries: Int = 20_000_000
    ) {
        self.init(sizes: [WindowSize(size: size, grace: grace)], retention: retention, idleTimeout: idleTimeout, maxEntries: maxEntries)
    }

    /// Traps on nonsensical combinations: they are configuration errors the CLI must reject
    /// up front, not conditions to survive at runtime.
    public init(sizes: [WindowSize], retention: Int64 = 3_600_000, idleTimeout: Int64 = 30_000, maxEntries: Int = 20_000_000) {
        let problem = Self.problem(sizes: sizes, retention: retention, idleTimeout: idleTimeout, maxEntries: maxEntries)
        precondition(problem == nil, problem ?? "")
        self.sizes = sizes.sorted()
        self.retention = retention
        self.idleTimeout = idleTimeout
        self.maxEntries = maxEntries
    }

    /// The sizes' lengths, ascending.
    public var lengths: [Int64] { sizes.map(\.size) }

    /// When the last of a hit's windows stops taking it (`EventTimeMath.lastExpiry`).
    public func lastExpiry(ofHitAt time: Int64) -> Int64 {
        EventTimeMath.lastExpiry(ofHitAt: time, sizes: lengths, retention: retention)
    }

    /// Every size emits `emission`.
    public func emitting(_ emission: WindowEmission) -> WindowConfig {
        var config = self
        for index in config.sizes.indices { config.sizes[index].emission = emission }
        return config
    }

    /// What is wrong with a combination, in words for the user; nil when it is usable. The CLI
    /// asks this before building a config, so bad flags are refused instead of trapping.
    public static func problem(sizes: [WindowSize], retention: Int64, idleTimeout: Int64, maxEntries: Int) -> String? {
        if sizes.isEmpty { return "at least one window size is needed" }
        if sizes.contains(where: { $0.size <= 0 }) { return "the window size must be longer than 0" }
        if Set(sizes.map(\.size)).count != sizes.count { return "each window size may be named once" }
        if sizes.contains(where: { $0.grace < 0 }) { return "the grace period must not be negative" }
        if sizes.contains(where: { retention < $0.grace }) {
            return "the retention must be at least the grace period: a window is kept until it is emitted"
        }
        if idleTimeout <= 0 { return "the idle timeout must be longer than 0" }
        if maxEntries <= 0 { return "the entry cap must be at least 1" }
        return nil
    }
}

/// When a window's record goes out.
public enum WindowEmission: String, Sendable, Hashable, CaseIterable {
    /// Once event time passes the window's end plus grace, then again with every correction
    /// until its end plus retention: the contract's default, for live dashboards. A sink keeps
    /// the last record (or the highest revision) per key.
    case changes
    /// Once, when nothing can change the window any more: event time past its end plus
    /// retention, or the end of a bounded input. A backfill then writes one record per window,
    /// the same records for the same input whatever the partitions, shards and timing (Kafka
    /// Streams' `suppress(untilWindowCloses)`, with the retention as the close). The record of a
    /// window comes a retention later than with `changes`.
    case final
}
