import RecordFormats
import Windowing

/// A window task's side of its changelog: what to write for what changed since the last commit,
/// and how to read the state back (the format: `ChangelogRecord`).
///
/// **Each write adds what changed.** A window that changed writes new segments with the
/// broadlogs that are new or showed a new action since its last write, then its head, naming
/// every segment that holds it; a window whose broadlogs did not change writes its head alone.
/// So what a window costs the cluster grows with what happens in it, not with its size times
/// the commits it lives through.
///
/// **Merges.** A window's records cost what they hold plus a little per record; when they cost
/// more than twice what one complete write of the window would (many small segments, or
/// broadlogs repeated because they showed another action later), the next write of that window
/// is a complete one instead (`merges(for:)`): its whole state in fresh segments, then the head
/// naming them, then tombstones for every older segment. Restore then reads at most about twice
/// what the state needs, and a window whose changes are large is never rewritten. The order of
/// those writes is what makes a crash in the middle harmless: Kafka keeps a partition's records
/// in the order they were sent, so a crash leaves a prefix of them, and a head names only
/// segments written before it that nothing writes again. Before the new head, the old head and
/// every segment it names are intact (nothing is deleted before the new head); after it, the new
/// segments are complete. Segments no head names (left by a write or a merge cut short) are
/// deleted by the next owner's first write (docs/scale-out.md, "Window state in a changelog").
///
/// **Deletion.** An evicted window's records wait for a commit: the write of the commit that
/// evicts it carries its final change, and its tombstones (the head and every segment that may
/// hold a record) go with the first write after that commit's records were released and the
/// offsets committed past every hit the window may have counted (past the state's mark, for a
/// window evicted while a new owner reread). Until then a new owner rereads from a commit
/// older than the eviction: it needs the final state to send the window's last record again and
/// to tell the hits the window counted from those it judged too late.
struct TaskChangelog: Sendable {
    /// What a record costs beyond its key and value, in bytes, when the merge rule weighs a
    /// window's records: Kafka's own overhead per record, and the fixed work of reading one back.
    static let recordCost = 64

    init(identity: GroupIdentity, partition: Int32) {
        (self.identity, self.partition) = (identity, partition)
    }

    /// Where a window's records are, and what they cost.
    struct Footprint: Sendable, Equatable {
        /// The segments the window's latest head names.
        var named: Range<UInt32> = 0..<0
        /// Every record of the window lies at or above this segment number...
        var lowest: UInt32 = 0
        /// ...and below this one.
        var end: UInt32 = 0
        /// What the named segments take: keys, values and `recordCost` each.
        var bytes = 0
        /// Broadlogs in the named segments (one that is in two segments counts twice), and the
        /// bytes they take there.
        var entries = 0
        var entryBytes = 0
        /// The position its latest head counted through: its records are deleted only once the
        /// offsets are committed past it (a head of a write cut short can count past the task
        /// record's mark, and the next owner tells the hits it holds by it).
        var countedThrough: Int64 = .min

        /// The number the window's next segment gets: past those its head names. A number there
        /// may hold a segment of a write cut short, which no head names: writing it again is safe.
        var next: UInt32 { named.isEmpty ? end : named.upperBound }
    }

    /// The changelog partition's end, acknowledged, after the last write: what a commit records.
    private(set) var end: Int64?
    private var footprints: [WindowKey: Footprint] = [:]
    private var lastTask: ChangelogRecord.TaskState?
    private var restoring: RestoreBuffer?
    /// Where this line of owners began writing the partition: records before it were written
    /// by an earlier run of the group and are never read back.
    private(set) var lineage: Int64 = 0
    /// The pipeline the task counts for: its task records name its group and its input
    /// (`source`), and the judge says whether it goes on from a line it did not commit.
    let identity: GroupIdentity
    /// Its partition of the state topic, which the judge's refusal names.
    let partition: Int32
    private var source: UInt64 { identity.changelogSource }
    /// Evicted windows on their way out, each in its phase (`Deletion`), in the order they were
    /// evicted: their tombstones are written in that order.
    private var deletions: [(window: WindowKey, phase: Deletion)] = []

    /// An evicted window's way out of the changelog. Its last records wait for the next release
    /// (the write of the commit that evicted it carries its final change); then for the offsets
    /// to be committed past `mark`, every hit it may have counted; then its tombstones go with
    /// the next write. Until then a new owner rereads from a commit older than the eviction and
    /// needs the final state.
    enum Deletion: Sendable, Equatable {
        case awaitingRelease(mark: Int64)
        case awaitingCommit(mark: Int64)
        case tombstonesDue

        enum Event: Sendable, Equatable {
            /// The records written so far were acknowledged and what was held for them released.
            case released
            /// The offsets were committed at this offset.
            case committed(through: Int64)
        }

        /// The one transition.
        static func transition(_ phase: Deletion, on event: Event) -> Deletion {
            switch (phase, event) {
            case (.awaitingRelease(let mark), .released): .awaitingCommit(mark: mark)
            case (.awaitingCommit(let mark), .committed(let offset)) where mark <= offset: .tombstonesDue
            default: phase
            }
        }
    }

    private mutating func advanceDeletions(on event: Deletion.Event) {
        for index in deletions.indices { deletions[index].phase = Deletion.transition(deletions[index].phase, on: event) }
    }
    /// Segments no head names, and heads naming a segment that is gone, found reading the state
    /// back: deleted with the next write.
    private var orphans: [ChangelogRecord.Key] = []

    // MARK: Writing

    /// The windows of `changes` whose next write should be a complete one: those whose records,
    /// with this change, would cost more than twice a complete write of them. Windows evicted in
    /// `changes` are left out (their records go soon).
    func merges(for changes: StateChanges) -> [WindowKey] {
        let evicted = Set(changes.evicted)
        return changes.windows.compactMap { change in
            guard let footprint = footprints[change.window], !footprint.named.isEmpty, !evicted.contains(change.window) else { return nil }
            return shouldMerge(footprint, change) ? change.window : nil
        }
    }

    /// The rule: a window's records, after this change, against one complete write of it.
    func shouldMerge(_ footprint: Footprint, _ change: WindowChange) -> Bool {
        let perRecord = segmentOverhead(change.window)
        let broadlogs = change.broadlogs
        var added = 0
        for index in broadlogs.indices { added += ChangelogRecord.encodedSize(idBytes: broadlogs[index].id.utf8Count) }
        let addedSegments = Self.segmentCount(bytes: added, entries: change.broadlogs.count)
        let live = footprint.bytes + added + addedSegments * perRecord
        let entries = footprint.entries + change.broadlogs.count
        let average = Double(footprint.entryBytes + added) / Double(max(1, entries))
        let completeBytes = Int((average * Double(change.broadlogCount)).rounded(.up))
        let completeSegments = max(1, Self.segmentCount(bytes: completeBytes, entries: change.broadlogCount))
        let complete = completeBytes + completeSegments * perRecord
        return footprint.named.count + addedSegments > completeSegments && live > 2 * complete
    }

    /// What one segment of `window` costs beyond its broadlogs' bytes: its key (as written), its
    /// value's version and tag, and `recordCost`. The one formula the merge rule, the writes and
    /// the restore weigh records by.
    private func segmentOverhead(_ window: WindowKey) -> Int { 1 + ChangelogRecord.windowKeyBytes(recordForm(window)) + 4 + 2 + Self.recordCost }

    /// A window as its records name it: a one-size pipeline's keys name no size
    /// (`ChangelogRecord.unsized`), as they did before a pipeline could count several.
    private func recordForm(_ window: WindowKey) -> WindowKey {
        guard identity.windowSizes.count == 1 else { return window }
        return WindowKey(size: ChangelogRecord.unsized, windowStart: window.windowStart, deliveryId: window.deliveryId)
    }

    /// A window as the engine knows it, from the key of its records; nil: the key of a pipeline of
    /// other sizes.
    private func engineForm(_ window: WindowKey) -> WindowKey? {
        let sizes = identity.windowSizes
        if window.size == ChangelogRecord.unsized {
            return sizes.count == 1 ? WindowKey(size: sizes[0], windowStart: window.windowStart, deliveryId: window.deliveryId) : nil
        }
        return sizes.count > 1 && sizes.contains(window.size) ? window : nil
    }

    private func inRecordForm(_ key: ChangelogRecord.Key) -> ChangelogRecord.Key {
        switch key {
        case .head(let window): .head(recordForm(window))
        case .segment(let window, let number): .segment(recordForm(window), number: number)
        case .task: .task
        }
    }

    private func inRecordForm(_ entry: ChangelogRecord.Entry) -> ChangelogRecord.Entry {
        switch entry {
        case .head(let window, let head): .head(recordForm(window), head)
        case .segment(let window, let number, let broadlogs): .segment(recordForm(window), number: number, broadlogs: broadlogs)
        case .task: entry
        case .tombstone(let key): .tombstone(inRecordForm(key))
        }
    }

    private static func segmentCount(bytes: Int, entries: Int) -> Int {
        entries == 0 ? 0 : (bytes + ChangelogRecord.segmentBytes - 1) / ChangelogRecord.segmentBytes
    }

    /// The records for `changes` and the task's state, in the order they must be written.
    /// `complete` holds the whole state of the windows to merge (`merges(for:)`); the others write
    /// what changed.
    mutating func entries(for changes: StateChanges, complete: [WindowState] = [], task: ChangelogRecord.TaskState) -> [ChangelogRecord.Entry] {
        var entries: [ChangelogRecord.Entry] = orphans.map { .tombstone($0) }
        orphans = []
        for (window, phase) in deletions where phase == .tombstonesDue {
            entries.append(.tombstone(.head(window)))
            if let footprint = footprints.removeValue(forKey: window) {
                for number in footprint.lowest..<footprint.end { entries.append(.tombstone(.segment(window, number: number))) }
            }
        }
        deletions.removeAll { $0.phase == .tombstonesDue }
        let whole = Dictionary(complete.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        for change in changes.windows {
            let window = change.window
            var footprint = footprints[window] ?? Footprint()
            footprint.countedThrough = max(footprint.countedThrough, change.countedThrough)
            let first = footprint.next
            if let state = whole[window] {
                let written = segments(of: state.broadlogs, window: window, from: first)
                entries += written.entries
                let replaced = footprint.lowest..<first
                footprint.named = first..<(first + UInt32(written.entries.count))
                footprint.lowest = first
                footprint.bytes = written.bytes
                footprint.entries = state.broadlogs.count
                footprint.entryBytes = written.entryBytes
                entries.append(.head(window, head(change, naming: footprint.named)))
                // Only once the head names the new segments: until then the old ones hold the window.
                for number in replaced { entries.append(.tombstone(.segment(window, number: number))) }
            } else {
                let written = segments(of: change.broadlogs, window: window, from: first)
                entries += written.entries
                let upper = first + UInt32(written.entries.count)
                footprint.named = (footprint.named.isEmpty ? first : footprint.named.lowerBound)..<upper
                footprint.bytes += written.bytes
                footprint.entries += change.broadlogs.count
                footprint.entryBytes += written.entryBytes
                entries.append(.head(window, head(change, naming: footprint.named)))
            }
            footprint.end = max(footprint.end, footprint.named.upperBound)
            footprints[window] = footprint
        }
        deletions += changes.evicted.map { ($0, .awaitingRelease(mark: releaseMark($0, processedMark: task.processedMark))) }
        var task = task
        task.lineage = lineage
        task.source = source
        task.group = identity.group
        // Written whenever it changed, a watermark that moved alone included (a quiet input: at
        // most one small record per commit), so that a new owner goes on from the latest.
        if !entries.isEmpty || task != lastTask {
            entries.append(.task(task))
            lastTask = task
        }
        return entries.map(inRecordForm)
    }

    private func head(_ change: WindowChange, naming segments: Range<UInt32>) -> ChangelogRecord.Head {
        ChangelogRecord.Head(
            counters: change.counters, countedThrough: change.countedThrough, emittedRevision: change.emittedRevision, segments: segments,
            broadlogCount: change.broadlogCount)
    }

    /// `broadlogs` in segments numbered from `first`, each at most `ChangelogRecord.segmentBytes`
    /// of broadlogs; with what they take (`Footprint.bytes`) and their broadlogs' bytes.
    private func segments(of broadlogs: [BroadlogActions], window: WindowKey, from first: UInt32)
        -> (entries: [ChangelogRecord.Entry], bytes: Int, entryBytes: Int)
    {
        guard !broadlogs.isEmpty else { return ([], 0, 0) }
        let perRecord = segmentOverhead(window)
        var entries: [ChangelogRecord.Entry] = []
        var start = 0
        var size = 0
        var total = 0
        for index in broadlogs.indices {
            let bytes = ChangelogRecord.encodedSize(idBytes: broadlogs[index].id.utf8Count)
            if size + bytes > ChangelogRecord.segmentBytes && index > start {
                entries.append(.segment(window, number: first + UInt32(entries.count), broadlogs: broadlogs[start..<index]))
                start = index
                size = 0
            }
            size += bytes
            total += bytes
        }
        entries.append(.segment(window, number: first + UInt32(entries.count), broadlogs: broadlogs[start...]))
        return (entries, total + entries.count * perRecord, total)
    }

    /// The records written so far are acknowledged (the partition ends at `end`, if anything
    /// was written) and the records held for them released.
    mutating func released(end: Int64?) {
        if let end { self.end = max(self.end ?? end, end) }
        advanceDeletions(on: .released)
    }

    /// The offsets are committed at `offset`: the tombstones of evicted windows released and
    /// whose hits all lie below it go with the next write.
    mutating func committed(through offset: Int64) {
        advanceDeletions(on: .committed(through: offset))
    }

    /// Windows read back as evicted, whose hits lie below `mark`: deleted after the records sent
    /// for them are released and the offsets committed past it.
    mutating func evictedOnRestore(_ keys: [WindowKey], mark: Int64) {
        deletions += keys.map { ($0, .awaitingRelease(mark: releaseMark($0, processedMark: mark))) }
    }

    /// The offset the commit must pass before an evicted window's records go: past the task's
    /// processed mark and past every hit its head counted.
    private func releaseMark(_ window: WindowKey, processedMark: Int64) -> Int64 {
        guard let counted = footprints[window]?.countedThrough, counted != .min else { return processedMark }
        return max(processedMark, RecordPosition.offsetPast(counted))
    }

    /// Where a window's records are (nil: it has none), for tests and the benchmark.
    func footprint(of window: WindowKey) -> Footprint? { footprints[window] }

    // MARK: Reading back

    /// What a changelog partition gives back.
    struct Restored: Sendable {
        var windows: [WindowState] = []
        var task: ChangelogRecord.TaskState?
        /// Windows whose head was written after the last commit (at or after the changelog
        /// position it recorded) and that had been emitted: their last emission may not have
        /// reached the output before the previous owner stopped.
        var unconfirmed: [WindowKey] = []
        /// Records that could not be read (another writer, another version), and windows whose
        /// head names a segment the partition does not hold: skipped.
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
        /// No commit: the line whose task record was written last, if the judge lets the task go
        /// on from it (a task of the same input and group; an owner that died before its first
        /// commit), or else a new one at the partition's end.
        case lastWritten
        /// A commit that names none (an offset reset, a recreated topic): a new line at the
        /// partition's end.
        case new
    }

    /// The latest record per key, as compaction would keep it, with its offset: which line of
    /// owners counts is known only once the last task record has been read. Segments are kept as
    /// they were read (checked for their version) and decoded only if a head names them.
    private struct RestoreBuffer {
        var lineage: Lineage
        /// nil: deleted.
        var heads: [WindowKey: (offset: Int64, head: ChangelogRecord.Head?)] = [:]
        var segments: [WindowKey: [UInt32: (offset: Int64, value: [UInt8]?)]] = [:]
        /// Each run of task records of one line: its lineage, input, and last record's offset.
        var runs: [(lineage: Int64, source: UInt64, last: Int64, task: ChangelogRecord.TaskState)] = []
        var unreadable = 0
        var records = 0
        var end: Int64?
    }

    mutating func beginRestore(_ lineage: Lineage) {
        restoring = RestoreBuffer(lineage: lineage)
        footprints = [:]
        orphans = []
    }

    /// One changelog record, in partition order.
    mutating func apply(offset: Int64, key: [UInt8], value: [UInt8]?) {
        guard var buffer = restoring else { return }
        restoring = nil
        defer { restoring = buffer }
        buffer.records += 1
        buffer.end = offset + 1
        let decoded: ChangelogRecord.Key
        switch ChangelogRecord.decodeKey(key) {
        case .task?: decoded = .task
        case .head(let window)?:
            guard let window = engineForm(window) else { return buffer.unreadable += 1 }
            decoded = .head(window)
        case .segment(let window, let number)?:
            guard let window = engineForm(window) else { return buffer.unreadable += 1 }
            decoded = .segment(window, number: number)
        case nil: return buffer.unreadable += 1
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
                buffer.heads[window] = (offset, try value.map { value throws(ChangelogRecord.DecodingError) in try ChangelogRecord.decodeHead(value) })
            case .segment(let window, let number):
                // Decoded only if a head names it; one of another version or kind is refused now,
                // as any record is.
                if let value { try ChangelogRecord.checkHeader(value, tag: .segment) }
                buffer.segments[window, default: [:]][number] = (offset, value)
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
            if let last = buffer.runs.last, identity.judge(.stateTask(last.task, partition: partition, offset: last.last)) == .resume { since = last.lineage } else { since = buffer.end ?? 0 }
        case .new: since = buffer.end ?? 0
        }
        lineage = since
        let mine = buffer.runs.filter { $0.last >= since }
        let source = source
        var restored = Restored(
            task: mine.last(where: { $0.lineage == since && $0.source == source })?.task, unreadable: buffer.unreadable,
            records: buffer.records, foreign: mine.first { $0.lineage != since || $0.source != source }?.last)
        // Every window this line wrote a record of, in a stable order.
        var windows = Set(buffer.heads.filter { $0.value.offset >= since }.keys)
        for (window, segments) in buffer.segments where segments.values.contains(where: { $0.offset >= since }) { windows.insert(window) }
        for window in windows.sorted(by: { ($0.windowStart, $0.size, $0.deliveryId) < ($1.windowStart, $1.size, $1.deliveryId) }) {
            // Segments of this line that hold a value: written, and not deleted since.
            let held = (buffer.segments[window] ?? [:]).filter { $0.value.offset >= since && $0.value.value != nil }
            var footprint: Footprint?
            if let entry = buffer.heads[window], entry.offset >= since, let head = entry.head {
                var named = Footprint()
                if let state = Self.window(window, head: head, held: held, overhead: segmentOverhead(window), into: &named) {
                    restored.windows.append(state)
                    if head.emittedRevision > 0, entry.offset >= (committedChangelog ?? 0) { restored.unconfirmed.append(window) }
                    footprint = named
                } else {
                    // A segment it names is gone (lost, or a tombstone's deletion raced the read):
                    // the window cannot be read back, and its head goes with its segments.
                    restored.unreadable += 1
                    orphans.append(.head(window))
                }
            }
            // Every held segment no head names is left over from a write cut short (a window's
            // first write, a merge, an eviction's deletions): deleted with the next write. A window
            // without a head then has no record left, and numbers its segments afresh if it comes
            // back (a reread window whose first write was cut short), after those deletions.
            for number in held.keys.sorted() where !(footprint?.named.contains(number) ?? false) {
                orphans.append(.segment(window, number: number))
            }
            footprints[window] = footprint
        }
        end = buffer.end ?? committedChangelog
        lastTask = restored.task
        return restored
    }

    /// A window as its head and the segments it names hold it; nil if one of them is missing or
    /// unreadable. `footprint` learns what the named segments take.
    private static func window(
        _ window: WindowKey, head: ChangelogRecord.Head, held: [UInt32: (offset: Int64, value: [UInt8]?)], overhead: Int,
        into footprint: inout Footprint
    ) -> WindowState? {
        var broadlogs: [BroadlogActions] = []
        var bytes = 0
        var entryBytes = 0
        for number in head.segments {
            guard let value = held[number]?.value, let segment = try? ChangelogRecord.decodeSegment(value) else { return nil }
            broadlogs += segment
            bytes += value.count - 2 + overhead
            entryBytes += value.count - 2
        }
        footprint = Footprint(
            named: head.segments, lowest: head.segments.lowerBound, end: head.segments.upperBound, bytes: bytes, entries: broadlogs.count,
            entryBytes: entryBytes, countedThrough: head.countedThrough)
        return WindowState(
            size: window.size, deliveryId: window.deliveryId, windowStart: window.windowStart, counters: head.counters, broadlogs: broadlogs,
            broadlogCount: head.broadlogCount, countedThrough: head.countedThrough, emittedRevision: head.emittedRevision)
    }
}
