import RecordFormats
import Kafka
import TrackingDomain
import Windowing

/// One step of the worker as a value: records in; records out (through a `RecordSink`), dead
/// letters, and per partition the offset it is safe to commit. It owns no Kafka handle, reads
/// no clock (time is passed in) and does no I/O, so every rule it keeps can be tested with
/// plain values. A `StageRunner` drives it against Kafka.
///
/// Calls come from one thread at a time, in this order: `assign` for partitions before their
/// records, `process` and `tick` any number of times, `commitPoints` before a commit,
/// `revoke` after the revoked partitions' last commit, `finish` once at the end of a bounded run.
public protocol Stage: Sendable {
    /// Whether the stage keeps state (`KeepsNoState` or `KeepsState`), set by conforming to
    /// `StatelessStage` or `StatefulStage`: one type cannot be both, which is what makes the
    /// runner's choice between them (`StageRunner.init`) safe.
    associatedtype StateKeeping

    /// A name for logs, metrics and the summary (`normalize`, `aggregate`).
    var name: String { get }

    /// Takes over partitions of the input topic; `starts` says what their previous owner
    /// committed, so that the stage can rebuild its state by rereading. Throws when it cannot
    /// resume from what it found (a commit another mode or tool made): the runner stops.
    mutating func assign(_ starts: [PartitionStart], now: Int64) throws

    /// Forgets partitions that moved to another owner; their commit has been made.
    mutating func revoke(_ partitions: [Int32])

    /// Handles one batch of records, in partition order within each partition.
    mutating func process(_ records: [PolledRecord], now: Int64, into sink: inout some RecordSink) throws

    /// Lets wall-clock time pass: idle sources release the watermark, windows close, marks go out.
    mutating func tick(now: Int64, into sink: inout some RecordSink) throws

    /// Emits everything still held, as a bounded run ends.
    mutating func finish(now: Int64, into sink: inout some RecordSink) throws

    /// Per owned partition, the offset (with metadata) that may be committed once everything
    /// sent so far is acknowledged; a partition without an entry keeps its previous commit.
    func commitPoints() -> [Int32: CommitPoint]

    /// What happened since the last call, for the summary and the metrics.
    mutating func drainReport() -> StageReport

    /// Point-in-time figures for gauges.
    func gauges() -> StageGauges

    /// Before a commit: sends what the commit points rely on (the window stage: what changed in
    /// its state, to the `.changelog` destination; the normalize stage: the marks of a source
    /// some repartition partition has not heard from this owner). The runner then waits for it
    /// to be acknowledged.
    mutating func prepareCommit(into sink: inout some RecordSink) throws

    /// A bounded run read `partition` to `end`: every offset below it was processed, judged
    /// lost, or never a record. A stage whose commit point is what it processed commits `end`
    /// then, so that a next run does not report the same lost offsets again; one whose commit
    /// names its state (a window task's processed mark) keeps its own.
    mutating func readToEnd(_ partition: Int32, end: Int64)
}

extension Stage {
    public mutating func readToEnd(_ partition: Int32, end: Int64) {}
}

/// What a `StatelessStage` keeps: nothing but its commits.
public enum KeepsNoState {}
/// What a `StatefulStage` keeps: its state, in a changelog.
public enum KeepsState {}

/// A stage that keeps nothing but its commits: its runner reads no state back.
public protocol StatelessStage: Stage where StateKeeping == KeepsNoState {}

/// A stage that keeps state in a changelog, the state topic (the window stage): what it must do
/// beyond `Stage`. Its runner is made with the state topic to read that state back from
/// (`StageRunner.init(stage:stateTopic:…)`), so a stateful stage without one does not compile.
public protocol StatefulStage: Stage where StateKeeping == KeepsState {
    /// Partitions assigned whose state must be read back from the changelog before any of their
    /// records is processed: the runner holds their input back meanwhile.
    var partitionsAwaitingState: [Int32] { get }

    /// Records of a partition's changelog, in order, from its beginning.
    mutating func restoreState(_ records: [StateRecord], partition: Int32)

    /// The partition's changelog has been read to its end: its records may come. Throws when
    /// the state read back cannot be trusted (the changelog behind the last commit).
    mutating func stateRestored(partition: Int32, now: Int64) throws

    /// The state written by `prepareCommit` is acknowledged, and each partition's changelog ends
    /// at `changelogEnds`: sends what was held back until it was (aggregate records).
    mutating func completeCommit(changelogEnds: [Int32: Int64], now: Int64, into sink: inout some RecordSink) throws

    /// The offsets of `partitions` are committed at their commit points: what the stage kept
    /// for a new owner that would reread from an older commit may go.
    mutating func committed(_ partitions: [Int32])

    /// A window closed and its record waits for a commit (it goes out once the state it carries
    /// is written): the runner commits now rather than at the next interval, so that a closed
    /// window is readable within about a second of event time passing it.
    var holdsClosedWindows: Bool { get }
}

/// One record of a stage's changelog, read back.
public struct StateRecord: Sendable {
    public var offset: Int64
    public var key: [UInt8]
    /// nil: a tombstone.
    public var value: [UInt8]?

    public init(offset: Int64, key: [UInt8], value: [UInt8]?) {
        self.offset = offset
        self.key = key
        self.value = value
    }
}

/// What the previous owner of a partition left in the group: its committed offset and the
/// commit metadata (a `Checkpoint`), or nothing; and where the partition's log begins and ends
/// now, which tells a commit beyond the end (the topic was recreated since) from one within it.
public struct PartitionStart: Sendable, Hashable {
    public var partition: Int32
    /// The next offset to read, as committed; nil when nothing was committed.
    public var committedOffset: Int64?
    public var metadata: String?
    /// The first offset the partition still holds, and the next one to be written, when the
    /// runner asked (nil: not known).
    public var logStart: Int64?
    public var logEnd: Int64?

    public init(partition: Int32, committedOffset: Int64? = nil, metadata: String? = nil, logStart: Int64? = nil, logEnd: Int64? = nil) {
        self.partition = partition
        self.committedOffset = committedOffset
        self.metadata = metadata
        self.logStart = logStart
        self.logEnd = logEnd
    }

    /// The commit lies beyond the partition's end: the topic was deleted and created again (or
    /// truncated) since it was made, and its offsets mean nothing in the log there is now.
    public var commitIsBeyondTheLog: Bool {
        guard let committedOffset, let logEnd else { return false }
        return committedOffset > logEnd
    }
}

/// An offset to commit for a partition, with the metadata that lets the next owner resume from
/// it exactly (a `Checkpoint` behind windows, a `SourceCheckpoint` in the normalize stage).
public struct CommitPoint: Sendable, Hashable {
    public var offset: Int64
    public var metadata: String?

    public init(offset: Int64, metadata: String? = nil) {
        self.offset = offset
        self.metadata = metadata
    }
}

/// Gauges a stage reports; zero or nil where they do not apply.
public struct StageGauges: Sendable, Equatable {
    /// The stage's windows in memory by size (ms): every size it counts, at zero before its
    /// first window or partition; none for a stage without windows (normalize). Open and
    /// retained together are `trackpipe_windows_open`; open ones, not written yet, are pending.
    /// A live `--emit final` worker holds every window for its retention, and says so, or its
    /// output would look stalled.
    public var windows: [Int64: WindowFigures] = [:]
    /// Lowest event-time watermark over the stage's window tasks (epoch ms).
    public var watermark: Int64?
    /// The sizes whose windows go out once, final (`--emit final`), for saying what their open
    /// windows wait for; another size's wait only for its grace.
    public var finalSizes: Set<Int64> = []

    public init() {}

    /// A window stage's, before its tasks are added: each size it counts, at zero, so that its
    /// series exist before its first window.
    package init(counting config: WindowConfig) {
        for size in config.sizes { windows[size.size] = WindowFigures() }
        finalSizes = Set(config.sizes.filter { $0.emission == .final }.map(\.size))
    }

    /// Adds a window task's engine: its windows, and its watermark to the lowest.
    package mutating func add(_ engine: WindowEngine) {
        for (size, figures) in engine.stats.windows { windows[size, default: WindowFigures()].add(figures) }
        if let mark = engine.watermark { watermark = min(watermark ?? mark, mark) }
    }

    /// The windows that wait for their final record, by size: those of `finalSizes`.
    var pendingBySize: [Int64: WindowFigures] { windows.filter { finalSizes.contains($0.key) } }

    /// When event time lets the first pending window go (`pendingText`'s), nil without any.
    public var firstPendingDue: Int64? { pendingBySize.total.firstOpenDue }

    /// With `--emit final`, what the pending windows wait for, in words for the progress line
    /// and the summary: `482 windows pending (1m 2, 1h 480; --emit final: written once event
    /// time passes their end plus the retention); the first (1m) is due when event time reaches
    /// …, now at …`, of the sizes that emit final only. Nil without any, and with `changes`,
    /// whose windows wait only for the grace.
    public func pendingText() -> String? {
        let held = pendingBySize
        let total = held.total, pending = total.openWindows
        guard pending > 0 else { return nil }
        let sizes = held.keys.sorted()
        let bySize = sizes.count == 1 ? "" : WindowSize.text(counts: held.mapValues(\.openWindows)) + "; "
        var text = "\(pending) window\(pending == 1 ? "" : "s") pending (\(bySize)--emit final: written once event time passes their end plus the retention)"
        if let due = total.firstOpenDue {
            let first = sizes.count == 1 ? "" : sizes.first { held[$0]!.firstOpenDue == due }.map { " (\(WindowSize.text($0)))" } ?? ""
            text += "; the first\(first) is due when event time reaches \(RFC3339.format(epochMillis: due))"
            text += watermark.map { ", now at \(RFC3339.format(epochMillis: $0))" } ?? ", which has not started (a partition without any hit yet)"
        }
        return text
    }
}

/// What a stage did between two `drainReport` calls.
public struct StageReport: Sendable {
    public var accounting = Accounting()
    /// Per emitted record, wall-clock seconds from its window's end to the emission (never
    /// negative: a bounded run may emit a window before its end comes on the clock).
    public var emitDelays: [Double] = []
    /// Windows finalized early because window state reached its cap.
    public var capacityEvictions: [CapacityEviction] = []
    /// What the operator should read in the log: something the stage recognised and handled
    /// (input from a new incarnation of a topic, say).
    public var notices: [String] = []
    /// Offsets of its input the stage found its group never read (`FirstRead`): the runner
    /// judges what of them is lost (`InputLoss`).
    public var unread: [InputSpan] = []

    public init() {}

    /// Adds what a window task made of its share of a batch.
    package mutating func add(_ other: StageReport) {
        accounting.add(other.accounting)
        emitDelays += other.emitDelays
        capacityEvictions += other.capacityEvictions
        notices += other.notices
        unread += other.unread
    }

    /// The report so far, leaving an empty one in its place: a stage's `drainReport`.
    package mutating func drain() -> StageReport {
        defer { self = StageReport() }
        return self
    }
}

