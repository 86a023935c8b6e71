import TrackingDomain
import Windowing

/// The window state of one task of the aggregate stage, as Kafka Streams keeps a task per
/// partition: its own engine (watermark, eviction horizon, restore point), its own duplicate
/// filter and its own offsets. Partitions hold disjoint deliveries (the input is keyed by
/// delivery), so one partition's checkpoint can never make another's replayed hits late.
struct AggregateTask: Sendable {
    let key: TaskKey
    var engine: WindowEngine
    /// Wall-clock ms of the task's creation: the first input's sources hold the watermark back
    /// from then, not from when they were declared.
    let createdAt: Int64
    /// Whether the task keeps its windows in a changelog: every partition's task does (only
    /// `replay`'s global task does not). It reads them back when it is assigned, commits at its
    /// processed mark, and holds its aggregate records back until the state they carry is
    /// written (see `prepareCommit`), so that no restart can step a key back. Not a phase: fixed
    /// for the task's life, it decides what each phase does with an emission and a commit.
    var keepsChangelog: Bool { key.partition != nil }
    /// Restoring, replaying or running: decides what a record, an emission and a commit do.
    /// A task without a partition (`replay`'s) only ever runs.
    private(set) var phase: TaskPhase = .running
    var offsets = PartitionOffsets()
    /// The sources of event time and the duplicate filter, as the input has them.
    private var sources: TaskSources
    var changelog = TaskChangelog()
    /// Records waiting for the next commit, latest per key (tasks with a changelog).
    private var held: [WindowKey: WindowAggregate] = [:]
    /// `held` has a window's first record: a window closed and nobody can read it until the
    /// next commit, so the runner commits early for it.
    private(set) var holdsClosedWindow = false

    /// What the task made of its share of a batch, for the stage to send in partition order.
    struct Result {
        var report = StageReport()
        var emitted: [WindowAggregate] = []
        /// Dead letters to send, in record order.
        var deadLetters: [PendingDeadLetter] = []
        /// The batch was routed by another partition count: nothing was counted.
        var misrouted: (routed: Int, expected: Int)?
    }

    struct PendingDeadLetter {
        var reference: DeadLetterReference
        var reason: String
        var detail: String
    }

    /// `changelogSource`: the input the task counts, as its changelog's task records name it.
    init(
        key: TaskKey, config: WindowConfig, start: PartitionStart?, sources: TaskSources, changelogSource: UInt64 = 0, now: Int64,
        shards: Int = 1
    ) {
        self.key = key
        self.engine = WindowEngine(config: config, shards: shards, tracksState: key.partition != nil)
        self.createdAt = now
        self.sources = sources
        guard let partition = key.partition else { return }
        let begin = TaskStart(start ?? PartitionStart(partition: partition), checkpoint: Checkpoint(decoding: start?.metadata))
        changelog.beginRestore(begin.lineage, source: changelogSource)
        let own = sources.initial(partition: partition)
        if !own.isEmpty { engine.assign(partitions: own, now: now) }
        if let point = begin.restorePoint {
            engine.restore(partition: partition, replayBefore: point.replayBefore, evictedBefore: point.evictedBefore)
        }
        if let floors = begin.floors { self.sources.restore(floors) }
        offsets.committed = begin.committed
        offsets.metadata = begin.metadata
        phase = .initial(start: begin)
    }

    /// The state is being read back from the changelog: no record may be processed yet.
    var isRestoring: Bool { phase.isRestoring }

    /// Why a window task cannot resume from `start`, if it cannot: a commit without a window
    /// checkpoint this version reads, other than one at the very beginning of the partition (a
    /// full recount), was made by another mode, tool or version of trackpipe, and resuming from
    /// it would count only the hits after it, overwriting full records with partial ones; and a
    /// checkpoint of windows of another size than `windowSize` would mix two meanings of one
    /// output key.
    static func refusal(of start: PartitionStart, topic: String, windowSize: Int64) -> PipelineError? {
        guard let committed = start.committedOffset, !start.commitIsBeyondTheLog else { return nil }
        if let checkpoint = Checkpoint(decoding: start.metadata) {
            guard checkpoint.windowSize != windowSize else { return nil }
            return WindowSizeCheck.groupRefusal(counted: checkpoint.windowSize, asked: windowSize, topic: topic, partition: start.partition)
        }
        guard committed != (start.logStart ?? 0) else { return nil }
        let who =
            if let tag = Checkpoint.otherVersion(of: start.metadata) {
                "by another version of trackpipe, whose checkpoint (\(tag)) this one does not read (it reads \(Checkpoint.format) only)"
            } else if SourceCheckpoint(decoding: start.metadata) != nil {
                "by trackpipe's normalize stage (the group was last run with two stages, whose commits on the input hold no window state)"
            } else {
                "without a trackpipe checkpoint (by another tool, or by an offset reset)"
            }
        return .groupMismatch(
            "the group's commit at offset \(committed) of \(topic)[\(start.partition)] was made \(who). Counting windows from it would miss the hits before it and overwrite full records with partial ones. Run this mode under a --group of its own (a new group counts the input from its beginning), or reset this group's offsets of \(topic) to the earliest (kafka-consumer-groups.sh --reset-offsets --to-earliest) for a full recount")
    }

    // MARK: Reading the state back

    mutating func restoreState(_ records: [StateRecord]) {
        for record in records { changelog.apply(offset: record.offset, key: record.key, value: record.value) }
    }

    /// The changelog is read: the windows go back into the engine, the replay runs to where the
    /// state was written, and windows whose last emission may be lost are sent again with the
    /// first commit. Returns what was read, for the log.
    mutating func stateRestored(now: Int64) throws -> TaskChangelog.Restored {
        guard case .restoring(let committedChangelog) = phase, let partition = key.partition else { return TaskChangelog.Restored() }
        let restored = changelog.finishRestore(committedChangelog: committedChangelog)
        try Self.check(
            restored, partition: partition, committed: offsets.committed, committedChangelog: committedChangelog, end: changelog.end)
        // Windows past the horizon the state records were evicted in the interval its last
        // write covered: they are read back only for their last records and for the replay.
        let evictedBefore = restored.task?.evictedBefore ?? .min
        let config = engine.config
        let isFinal = { (window: WindowKey) in
            EventTimeMath.add(EventTimeMath.add(window.windowStart, config.size), config.retention) <= evictedBefore
        }
        let finals = restored.windows.filter { isFinal($0.key) }
        let malformed = engine.restore(restored.windows.filter { !isFinal($0.key) })
        engine.finishRestore()
        if let task = restored.task { resume(from: task, windows: restored.windows, finals: finals.map(\.key), partition: partition, now: now) }
        // Windows whose last emission may not have reached the output go out again with the
        // first commit, as the state read back has them (later emissions of the same window
        // carry higher revisions and win).
        let unconfirmed = Set(restored.unconfirmed)
        for final in finals where unconfirmed.contains(final.key) {
            if let record = final.record(windowSize: config.size) { Self.keepLatest(record, in: &held) }
        }
        for record in engine.currentRecords(restored.unconfirmed.filter { !isFinal($0) }) { Self.keepLatest(record, in: &held) }
        if phase.handle(.stateRead(belowMark: offsets.isReplaying)) { engine.replayFinished(partition: partition) }
        var report = restored
        report.unreadable += malformed
        return report
    }

    /// Stops a task whose changelog cannot be what its commit says it wrote: another run's
    /// state over this one's, or a state topic deleted, recreated, truncated or short of records.
    private static func check(
        _ restored: TaskChangelog.Restored, partition: Int32, committed: Int64?, committedChangelog: Int64?, end: Int64?
    ) throws {
        if let foreign = restored.foreign, let committed {
            throw PipelineError.groupMismatch(
                "the state of partition \(partition) was written by another run of this group (at offset \(foreign) of its changelog, after this task's last commit at offset \(committed)): the other mode, or a recount after an offset reset. The windows of this task's commit cannot be told from it. Stop every instance, then reset this group's offsets of every topic it reads to the earliest (a full recount from the state topic's end), or run under a new --group")
        }
        guard let committedChangelog else { return }
        if (end ?? 0) < committedChangelog {
            throw PipelineError.kafka(
                "the changelog of partition \(partition) ends at offset \(end ?? 0), before the \(committedChangelog) its last commit recorded: the state topic was deleted, recreated or truncated, and the windows cannot be read back exactly. Stop every instance, then either restore the state topic, or start the deployment under a new --group (it counts the input from its beginning)")
        }
        if let task = restored.task {
            if let committed, task.processedThrough < committed {
                throw PipelineError.kafka(
                    "the changelog of partition \(partition) holds state as of offset \(task.processedThrough), before the \(committed) the group committed: it lost records (retention, or the topic recreated). Stop every instance, then restore the state topic or start under a new --group")
            }
        } else if restored.records == 0, committedChangelog > 0 {
            throw PipelineError.kafka(
                "the changelog of partition \(partition) is empty, but its last commit recorded state in it: the state topic was deleted or recreated. Stop every instance, then restore the state topic or start under a new --group")
        }
    }

    /// Goes on from the task record read back: the replay up to its mark is judged by the
    /// windows read back (what they counted, what was evicted), not counted again.
    private mutating func resume(
        from task: ChangelogRecord.TaskState, windows: [WindowState], finals: [WindowKey], partition: Int32, now: Int64
    ) {
        let counted = Dictionary(windows.map { ($0.key, $0.countedThrough) }, uniquingKeysWith: max)
        engine.restore(partition: partition, replayBefore: task.processedThrough, evictedBefore: task.evictedBefore, counted: counted)
        if sources.resumesWatermark, let watermark = task.watermark {
            // Without the previous owner's event time, windows read back would wait for the
            // next hit however long the input stays quiet.
            engine.resume(partition: partition, watermark: watermark, now: now)
        }
        offsets.restoredMark = task.processedThrough
        changelog.evictedOnRestore(finals, mark: task.processedThrough)
    }

    // MARK: What goes out

    /// Emissions of a task with a changelog: held until the next commit. A replay over windows
    /// read back from the changelog counts nothing they hold, so what it emits is never behind
    /// what the previous owner sent; it is held like any emission, and goes out with the commit
    /// whose state write records it as emitted.
    private mutating func hold(_ output: EngineOutput) {
        for record in output.emitted { Self.keepLatest(record, in: &held) }
        if output.windowsClosed > 0 { holdsClosedWindow = true }
    }

    private static func keepLatest(_ record: WindowAggregate, in records: inout [WindowKey: WindowAggregate]) {
        let key = WindowKey(windowStart: record.windowStart, deliveryId: record.deliveryId)
        if let kept = records[key], kept.revision > record.revision { return }
        records[key] = record
    }

    /// Records the engine emitted for time passing (a tick or the end of a bounded run): held by
    /// a partition's task until its commit, sent at once by the global task of a replay.
    mutating func takeEmissions(_ output: EngineOutput) -> [WindowAggregate] {
        guard keepsChangelog else { return output.emitted }
        hold(output)
        return []
    }

    /// The changelog records for what changed since the last commit.
    mutating func changelogEntries() -> [ChangelogRecord.Entry] {
        guard keepsChangelog, !phase.isRestoring, let processed = offsets.processedThrough ?? offsets.committed else { return [] }
        let task = ChangelogRecord.TaskState(
            processedThrough: max(processed, offsets.restoredMark ?? processed), evictedBefore: engine.evictionHorizon,
            watermark: engine.watermark)
        return changelog.entries(for: engine.exportChanges(), task: task)
    }

    /// The offsets are committed at the commit point.
    mutating func committed() {
        if keepsChangelog, let point = commitPoint() { changelog.committed(through: point.offset) }
    }

    /// The state written is acknowledged (the changelog ends at `end`): the held records go out.
    mutating func releaseHeld(changelogEnd end: Int64?) -> [WindowAggregate] {
        changelog.released(end: end)
        defer {
            held = [:]
            holdsClosedWindow = false
        }
        return WindowEngine.sortedForEmission(Array(held.values))
    }

    // MARK: Counting

    /// Counts what an input decoded from this task's records, the last of which is at
    /// `lastOffset`. Runs on a worker thread, touching only this task; `runner` runs the
    /// engine's shards, if it has several.
    mutating func count(
        _ batch: DecodedBatch, through lastOffset: Int64, range: Range<Int64>?, now: Int64, on runner: some ShardRunner = ShardsInTurn()
    ) -> Result {
        if let misrouted = batch.misrouted { return Result(misrouted: misrouted) }
        let letters = LetterFilter(range: range, windowSize: engine.config.size, offsets: offsets)
        if key.partition != nil { offsets.processedThrough = lastOffset + 1 }
        let caughtUp = phase.handle(.processed(belowMark: offsets.isReplaying))
        var result = Result()
        var accounting = Accounting()
        accounting.marks = batch.markRecords
        for declaration in sources.declare(batch.sourcePartitions, createdAt: createdAt, now: now) {
            engine.assign(partitions: declaration.ids, now: declaration.since)
        }
        for (offset, reason) in batch.filtered {
            accounting.consume(at: offset, letters)
            accounting.filtered[reason.rawValue, default: 0] += 1
        }
        for rejection in batch.rejections {
            accounting.consume(at: rejection.offset, letters)
            accounting.deadLettered[rejection.reason, default: 0] += 1
            if letters.sends(offset: rejection.offset, about: rejection.time) {
                result.deadLetters.append(PendingDeadLetter(reference: rejection.reference, reason: rejection.reason, detail: rejection.detail))
            }
        }
        let inputs = admit(batch.events, letters, into: &accounting, notices: &result.report.notices)
        let output = engine.process(inputs, marks: engineMarks(batch.marks), now: now, on: runner)
        accounting.accepted += inputs.count - output.tooLate.count
        accounting.replayedFinal += output.replayedFinal
        for late in output.tooLate {
            accounting.deadLettered[RejectReason.tooLate.rawValue, default: 0] += 1
            if letters.sends(offset: late.offset, about: late.event.eventTime) {
                result.deadLetters.append(
                    PendingDeadLetter(reference: batch.events[late.tag].reference, reason: RejectReason.tooLate.rawValue, detail: late.detail))
            }
        }
        result.report.accounting = accounting
        result.report.capacityEvictions = output.capacityEvictions
        result.deadLetters.sort { $0.reference < $1.reference }
        if keepsChangelog {
            hold(output)
            if caughtUp, let partition = key.partition { engine.replayFinished(partition: partition) }
        } else {
            // The global task of a replay: it sends what it emits, in its time range.
            result.emitted = output.emitted
            if let range { result.emitted.removeAll { !range.contains($0.windowStart) } }
        }
        return result
    }

    /// Which dead letters of a batch go out: all of them (a replay's too, since the previous
    /// owner may never have sent them), except, in a backfill of a time range, those that do not
    /// belong to it by the time they are about: the window of a late hit, the Kafka timestamp of
    /// a message that could not be read.
    fileprivate struct LetterFilter {
        let range: Range<Int64>?
        let windowSize: Int64
        let offsets: PartitionOffsets

        func isReplay(_ offset: Int64) -> Bool { offsets.isReplay(offset) }

        func sends(offset: Int64, about time: Int64?) -> Bool {
            guard let range, let time else { return true }
            return range.contains(EventTimeMath.windowStart(of: time, size: windowSize))
        }
    }

    /// The events to count, in order: copies an upstream sent twice are dropped.
    private mutating func admit(
        _ events: [DecodedBatch.Event], _ letters: LetterFilter, into accounting: inout Accounting, notices: inout [String]
    ) -> [WindowInput] {
        var inputs: [WindowInput] = []
        inputs.reserveCapacity(events.count)
        var switched: Set<Int32> = []
        for (tag, decoded) in events.enumerated() {
            accounting.consume(at: decoded.offset, letters)
            switch sources.admit(decoded) {
            case .copy:
                accounting.duplicates += 1
                continue
            case .firstOfNewIncarnation:
                switched.insert(decoded.source.partition)
            case .first:
                break
            }
            // Several events can share a record: the position tells them apart, in order.
            let position = decoded.offset << 16 | Int64(UInt16(truncatingIfNeeded: decoded.reference.event ?? 0))
            inputs.append(
                WindowInput(event: decoded.event, partition: decoded.partition, offset: decoded.offset, tag: tag, position: position))
        }
        if !switched.isEmpty {
            notices.append(
                "events of input partitions \(switched.sorted()) now come from another incarnation of the input (another topic under this group, or the topic deleted and created again): their offsets start afresh, and earlier positions no longer mark copies")
        }
        return inputs
    }

    /// The sources' watermarks under the engine's numbers for them.
    private mutating func engineMarks(_ reported: SourceMarks<SourceKey>) -> [SourceMark] {
        var marks = SourceMarks<Int32>()
        for (source, report) in reported.bySource {
            marks.note(source: sources.engineId(source), watermark: report.watermark, idle: report.idle, delivered: report.delivered)
        }
        return marks.sorted
    }

    // MARK: Committing

    /// The offset and checkpoint to commit: the processed mark, since the windows are in the
    /// changelog. The global task commits nothing.
    func commitPoint() -> CommitPoint? {
        guard key.partition != nil, !phase.isRestoring, let processed = offsets.processedThrough else { return nil }
        let checkpoint = Checkpoint(
            evictedBefore: engine.evictionHorizon, processedThrough: processed, seen: sources.checkpoint, changelog: changelog.end ?? 0,
            changelogSince: changelog.lineage, windowSize: engine.config.size)
        return CommitPoint(offset: processed, metadata: checkpoint.encoded)
    }
}

extension Accounting {
    /// A message of the input read, and whether it re-reads what the previous owner processed.
    fileprivate mutating func consume(at offset: Int64, _ letters: AggregateTask.LetterFilter) {
        consumed += 1
        if letters.isReplay(offset) { replayed += 1 }
    }
}
