import Windowing

/// A window task's side of its changelog: what to write for the state that changed since the
/// last commit (at most one write per window per commit interval, tombstones for evicted
/// windows, the task's own record last), and how to read the state back.
///
/// An evicted window's tombstone waits for a commit: the write of the commit that evicts it
/// carries its final state, and the tombstone goes with the first write after that commit's
/// records were released and the offsets committed past every hit the window may have counted
/// (past the state's mark, for a window evicted while a new owner replayed). Until then a new
/// owner replays from a commit older than the eviction: it needs the final state to send the
/// window's last record again and to tell the hits the window counted from those it judged
/// too late.
///
/// Kept per task: which large windows are stored in chunks, and in which of their two chunk
/// sets, so that a new write never overwrites the set the changelog's head points at, and an
/// evicted window's every record is deleted.
struct TaskChangelog: Sendable {
    /// Where a chunked window's records are: the set its head points at, and how many chunks
    /// each set holds (both are deleted when the window goes).
    struct Footprint: Sendable, Equatable {
        var set: UInt8?
        var chunks: [UInt16] = [0, 0]
    }

    /// The changelog partition's end, acknowledged, after the last write: what a commit records.
    private(set) var end: Int64?
    private var footprints: [WindowKey: Footprint] = [:]
    private var lastTask: ChangelogRecord.TaskState?
    private var restoring: RestoreBuffer?
    /// Where this line of owners began writing the partition: records before it were written
    /// by an earlier run of the group and are never read back.
    private(set) var lineage: Int64 = 0
    /// The input this task counts, named in its task records.
    private(set) var source: UInt64 = 0
    /// The group it counts for, named in its task records.
    private(set) var group = ""
    /// Evicted windows whose last records wait for the next release, then for the offsets to be
    /// committed, then tombstones to write.
    private var evictedAwaitingRelease: [(window: WindowKey, mark: Int64)] = []
    private var evictedAwaitingCommit: [(window: WindowKey, mark: Int64)] = []
    private var tombstonesDue: [WindowKey] = []

    // MARK: Writing

    /// The records for `changes` and the task's state, in the order they must be written.
    mutating func entries(for changes: StateChanges, task: ChangelogRecord.TaskState) -> [ChangelogRecord.Entry] {
        var entries: [ChangelogRecord.Entry] = []
        for key in tombstonesDue {
            entries.append(ChangelogRecord.Entry(key: ChangelogRecord.headKey(key), value: nil))
            if let footprint = footprints.removeValue(forKey: key) {
                for set in 0..<2 {
                    for index in 0..<footprint.chunks[set] {
                        entries.append(ChangelogRecord.Entry(key: ChangelogRecord.chunkKey(key, set: UInt8(set), index: index), value: nil))
                    }
                }
            }
        }
        tombstonesDue = []
        for state in changes.windows {
            let key = state.key
            let written = ChangelogRecord.entries(for: state, previousSet: footprints[key]?.set)
            entries += written.entries
            if let set = written.set {
                var footprint = footprints[key] ?? Footprint()
                footprint.set = set
                footprint.chunks[Int(set)] = max(footprint.chunks[Int(set)], written.chunks)
                footprints[key] = footprint
            } else if var footprint = footprints[key] {
                footprint.set = nil
                footprints[key] = footprint
            }
        }
        evictedAwaitingRelease += changes.evicted.map { ($0, task.processedMark) }
        var task = task
        task.lineage = lineage
        task.source = source
        task.group = group
        // Written whenever it changed, a watermark that moved alone included (a quiet input: at
        // most one small record per commit), so that a new owner goes on from the latest.
        if !entries.isEmpty || task != lastTask {
            entries.append(ChangelogRecord.Entry(key: ChangelogRecord.taskKey, value: ChangelogRecord.taskValue(task)))
            lastTask = task
        }
        return entries
    }

    /// The records written so far are acknowledged (the partition ends at `end`, if anything
    /// was written) and the records held for them released.
    mutating func released(end: Int64?) {
        if let end { self.end = max(self.end ?? end, end) }
        evictedAwaitingCommit += evictedAwaitingRelease
        evictedAwaitingRelease = []
    }

    /// The offsets are committed at `offset`: the tombstones of evicted windows released and
    /// whose hits all lie below it go with the next write.
    mutating func committed(through offset: Int64) {
        tombstonesDue += evictedAwaitingCommit.filter { $0.mark <= offset }.map(\.window)
        evictedAwaitingCommit.removeAll { $0.mark <= offset }
    }

    /// Windows read back as evicted, whose hits lie below `mark`: deleted after the records sent
    /// for them are released and the offsets committed past it.
    mutating func evictedOnRestore(_ keys: [WindowKey], mark: Int64) { evictedAwaitingRelease += keys.map { ($0, mark) } }

    // MARK: Reading back

    /// What a changelog partition gives back.
    struct Restored: Sendable {
        var windows: [WindowState] = []
        var task: ChangelogRecord.TaskState?
        /// Windows whose record was written after the last commit (at or after the changelog
        /// position it recorded) and that had been emitted: their last emission may not have
        /// reached the output before the previous owner stopped.
        var unconfirmed: [WindowKey] = []
        /// Records that could not be read (another writer, another version), skipped.
        var unreadable = 0
        var records = 0
        /// A task record of another line of owners after this one's start: the offset at which
        /// another run of the group wrote the partition (its state cannot be told from this one's).
        var foreign: Int64?
    }

    /// Where the line of owners this one continues began writing the partition.
    enum Lineage: Sendable, Equatable {
        /// As the last commit's checkpoint names it.
        case committed(since: Int64)
        /// No commit: the line whose task record was written last, if it was a task of the same
        /// input and group (`ChangelogRecord.TaskState.source` and `group`; an owner that died
        /// before its first commit), or else a new one at the partition's end.
        case lastWritten
        /// A commit that names none (an offset reset, a recreated topic): a new line at the
        /// partition's end.
        case new
    }

    /// The latest record per key, as compaction would keep it, with its offset: which line of
    /// owners counts is known only once the last task record has been read.
    private struct RestoreBuffer {
        var lineage: Lineage
        var heads: [WindowKey: (offset: Int64, head: ChangelogRecord.Head)] = [:]
        var chunks: [WindowKey: [UInt8: [UInt16: [WindowState.BroadlogActions]]]] = [:]
        /// Each run of task records of one line: its lineage, input, and last record's offset.
        var runs: [(lineage: Int64, source: UInt64, last: Int64, task: ChangelogRecord.TaskState)] = []
        var unreadable = 0
        var records = 0
        var end: Int64?
    }

    /// `source`: the input this task counts (`ChangelogRecord.source`); `group`: the group it
    /// counts for.
    mutating func beginRestore(_ lineage: Lineage, source: UInt64, group: String) {
        self.source = source
        self.group = group
        restoring = RestoreBuffer(lineage: lineage)
        footprints = [:]
    }

    /// One changelog record, in partition order.
    mutating func apply(offset: Int64, key: [UInt8], value: [UInt8]?) {
        guard var buffer = restoring else { return }
        restoring = nil
        defer { restoring = buffer }
        buffer.records += 1
        buffer.end = offset + 1
        guard let decoded = ChangelogRecord.decodeKey(key) else {
            buffer.unreadable += 1
            return
        }
        do {
            switch decoded {
            case .task:
                if let value {
                    let task = try ChangelogRecord.decodeTask(value)
                    if let last = buffer.runs.last, last.lineage == task.lineage, last.source == task.source {
                        buffer.runs[buffer.runs.count - 1].last = offset
                        buffer.runs[buffer.runs.count - 1].task = task
                    } else {
                        buffer.runs.append((task.lineage, task.source, offset, task))
                    }
                }
            case .head(let window):
                if let value {
                    buffer.heads[window] = (offset, try ChangelogRecord.decodeHead(value))
                } else {
                    buffer.heads[window] = nil
                    buffer.chunks[window] = nil
                    footprints[window] = nil
                }
            case .chunk(let window, let set, let index):
                var footprint = footprints[window] ?? Footprint()
                footprint.chunks[Int(set & 1)] = max(footprint.chunks[Int(set & 1)], index + 1)
                footprints[window] = footprint
                if let value {
                    buffer.chunks[window, default: [:]][set, default: [:]][index] = try ChangelogRecord.decodeChunk(value)
                } else {
                    buffer.chunks[window]?[set]?[index] = nil
                }
            }
        } catch {
            buffer.unreadable += 1
        }
    }

    /// The state read back. `committedChangelog` is the changelog position the last commit
    /// recorded (nil: none).
    mutating func finishRestore(committedChangelog: Int64?) -> Restored {
        guard let buffer = restoring else { return Restored() }
        restoring = nil
        let since: Int64
        switch buffer.lineage {
        case .committed(let named): since = named
        case .lastWritten:
            if let last = buffer.runs.last, last.source == source, last.task.group == group { since = last.lineage } else { since = buffer.end ?? 0 }
        case .new: since = buffer.end ?? 0
        }
        lineage = since
        let mine = buffer.runs.filter { $0.last >= since }
        let source = source
        var restored = Restored(
            task: mine.last(where: { $0.lineage == since && $0.source == source })?.task, unreadable: buffer.unreadable,
            records: buffer.records, foreign: mine.first { $0.lineage != since || $0.source != source }?.last)
        for (window, entry) in buffer.heads.sorted(by: { ($0.key.windowStart, $0.key.deliveryId) < ($1.key.windowStart, $1.key.deliveryId) }) {
            // Written before the lineage's start, by an earlier run of the group.
            guard entry.offset >= since else { continue }
            let head = entry.head
            var broadlogs = head.broadlogs ?? []
            if let chunks = head.chunks {
                let stored = buffer.chunks[window]?[chunks.set] ?? [:]
                guard (0..<chunks.count).allSatisfy({ stored[$0] != nil }) else {
                    restored.unreadable += 1
                    continue
                }
                for index in 0..<chunks.count { broadlogs += stored[index]! }
                var footprint = footprints[window] ?? Footprint()
                footprint.set = chunks.set
                footprints[window] = footprint
            }
            restored.windows.append(
                WindowState(
                    deliveryId: window.deliveryId, windowStart: window.windowStart, counters: head.counters, broadlogs: broadlogs,
                    countedThrough: head.countedThrough, emittedRevision: head.emittedRevision))
            if head.emittedRevision > 0, entry.offset >= (committedChangelog ?? 0) { restored.unconfirmed.append(window) }
        }
        end = buffer.end ?? committedChangelog
        lastTask = restored.task
        return restored
    }

    var isRestoring: Bool { restoring != nil }
}
