import RecordFormats
import Windowing

/// What a task makes of the sources of its events, the one thing that differs on either side
/// of the shuffle: the input chooses it (`AggregateInput.taskSources`), so the task never asks
/// which input it reads. A struct over an optional rather than an enum with the filter as its
/// payload: the filter is touched once per event, and must change in place. Public only so
/// that inputs can name it; what it holds and does stays inside the module.
public struct TaskSources: Sendable {
    /// The input partitions upstream, which the records name and count (the repartition
    /// topic): an upstream that crashed before its commit sends events again, recognised by
    /// their source position. Nil: each partition read is its own only source (raw hits, read
    /// where they were produced), nothing arrives twice, and nothing but the partition's hits
    /// tells the task its event time.
    private var upstream: UpstreamSources?

    static let partitionRead = TaskSources(upstream: nil)

    static let upstream = TaskSources(upstream: UpstreamSources())

    /// The sources the engine waits for from the task's creation: the partition read, if it is
    /// one; upstream sources are declared as the records name them.
    func initial(partition: Int32) -> [Int32] {
        upstream == nil ? [partition] : []
    }

    /// Whether the records name the sources upstream (and so say where the group's records of
    /// each begin: `FirstRead`).
    var namesSources: Bool { upstream != nil }

    /// Whether a new owner goes on from the event time the previous one reached (the task
    /// record's watermark): needed only where the partition is the task's only source, since
    /// nothing else would tell it time passes while its input stays quiet.
    var resumesWatermark: Bool { upstream == nil }

    /// What drives the task's engine: behind the shuffle, the writers' clocks its records carry
    /// (so that its verdicts depend on what it read, never on when, and its horizon stays below
    /// the clock of any record it has not read yet: the originals rule); before it, this
    /// process's wall clock.
    var clock: EngineClock { upstream == nil ? .wall : .writers }

    /// Takes the duplicate filter's floors from a checkpoint.
    mutating func restore(_ floors: [Int32: SourceFloor]) {
        upstream?.restore(floors)
    }

    /// The filter's verdict on an event, by its source position.
    @inline(__always)
    mutating func admit(_ source: SourceKey, sourceOffset: Int64) -> SourceDedup.Verdict {
        upstream?.dedup.admit(source, sourceOffset: sourceOffset) ?? .first
    }

    /// The engine's number for a source.
    mutating func engineId(_ source: SourceKey) -> Int32 {
        upstream?.engineId(source) ?? source.partition
    }

    /// The sources a batch names for the first time, each with when it began holding the
    /// watermark back.
    mutating func declare(_ counts: [UInt64: Int], createdAt: Int64, now: Int64) -> [(ids: [Int32], since: Int64)] {
        guard !counts.isEmpty else { return [] }
        return upstream?.declare(counts, createdAt: createdAt, now: now) ?? []
    }

    /// The `seen` map of the checkpoint.
    var checkpoint: [Int32: SourceFloor] { upstream?.dedup.checkpoint ?? [:] }
}

/// The sources behind the shuffle: each upstream partition of each incarnation of the input.
struct UpstreamSources: Sendable {
    var dedup = SourceDedup()
    /// The engine's number for each source (an input partition of one incarnation), and how many
    /// partitions of each incarnation have been declared to the engine.
    private var incarnations: [UInt64: Int] = [:]
    private var declared: [UInt64: Int] = [:]

    mutating func restore(_ floors: [Int32: SourceFloor]) {
        dedup = SourceDedup(restored: floors)
    }

    /// The engine's number for a source: its partition for the first incarnation seen, a number
    /// of its own for any later one.
    mutating func engineId(_ source: SourceKey) -> Int32 {
        let index: Int
        if let known = incarnations[source.incarnation] {
            index = known
        } else {
            index = incarnations.count
            incarnations[source.incarnation] = index
        }
        return Int32(truncatingIfNeeded: index << 16 | Int(UInt16(truncatingIfNeeded: source.partition)))
    }

    /// Declares the partitions of each incarnation the batch names, the first time their count
    /// is known: a source that has not reported holds the watermark back until the idle
    /// timeout, counted from the task's creation for the first input, from now for a later one
    /// (another topic switched to under the same group).
    mutating func declare(_ counts: [UInt64: Int], createdAt: Int64, now: Int64) -> [(ids: [Int32], since: Int64)] {
        var declarations: [(ids: [Int32], since: Int64)] = []
        for (incarnation, count) in counts.sorted(by: { $0.key < $1.key }) where count > (declared[incarnation] ?? 0) {
            let since = declared.isEmpty || declared[incarnation] != nil ? createdAt : now
            let first = declared[incarnation] ?? 0
            declared[incarnation] = count
            declarations.append(((first..<count).map { engineId(SourceKey(incarnation: incarnation, partition: Int32($0))) }, since))
        }
        return declarations
    }
}
