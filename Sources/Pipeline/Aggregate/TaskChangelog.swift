import Windowing

/// A window task's side of its changelog: what to write for the state that changed since the
/// last commit (at most one write per window per commit interval, tombstones for evicted
/// windows, the task's own record last), and how to read the state back.
///
/// Kept per task: which large windows are stored in chunks, and in which of their two chunk
/// sets, so that a new write never overwrites the set the changelog's head points at, and an
/// evicted window's every record is deleted.
struct TaskChangelog: Sendable {
    typealias WindowKey = ChangelogRecord.WindowKey

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

    // MARK: Writing

    /// The records for `changes` and the task's state, in the order they must be written.
    mutating func entries(for changes: StateChanges, task: ChangelogRecord.TaskState) -> [ChangelogRecord.Entry] {
        var entries: [ChangelogRecord.Entry] = []
        for state in changes.windows {
            let key = WindowKey(windowStart: state.windowStart, deliveryId: state.deliveryId)
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
        for evicted in changes.evicted {
            let key = WindowKey(windowStart: evicted.windowStart, deliveryId: evicted.deliveryId)
            entries.append(ChangelogRecord.Entry(key: ChangelogRecord.headKey(key), value: nil))
            if let footprint = footprints.removeValue(forKey: key) {
                for set in 0..<2 {
                    for index in 0..<footprint.chunks[set] {
                        entries.append(ChangelogRecord.Entry(key: ChangelogRecord.chunkKey(key, set: UInt8(set), index: index), value: nil))
                    }
                }
            }
        }
        if !entries.isEmpty || task != lastTask {
            entries.append(ChangelogRecord.Entry(key: ChangelogRecord.taskKey, value: ChangelogRecord.taskValue(task)))
            lastTask = task
        }
        return entries
    }

    /// The records written so far are acknowledged; the partition ends at `end`.
    mutating func written(end: Int64) { self.end = max(self.end ?? end, end) }

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
    }

    /// The latest record per key, as compaction would keep it.
    private struct RestoreBuffer {
        var heads: [WindowKey: (offset: Int64, head: ChangelogRecord.Head)] = [:]
        var chunks: [WindowKey: [UInt8: [UInt16: [WindowState.BroadlogActions]]]] = [:]
        var task: ChangelogRecord.TaskState?
        var unreadable = 0
        var records = 0
        var end: Int64?
    }

    mutating func beginRestore() {
        restoring = RestoreBuffer()
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
                if let value { buffer.task = try ChangelogRecord.decodeTask(value) }
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
        var restored = Restored(task: buffer.task, unreadable: buffer.unreadable, records: buffer.records)
        for (window, entry) in buffer.heads.sorted(by: { ($0.key.windowStart, $0.key.deliveryId) < ($1.key.windowStart, $1.key.deliveryId) }) {
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
        lastTask = buffer.task
        return restored
    }

    var isRestoring: Bool { restoring != nil }
}
