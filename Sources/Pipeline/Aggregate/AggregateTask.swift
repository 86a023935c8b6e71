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
    /// Whether the records came through the repartition topic (`AggregateInput.crossesShuffle`).
    let crossesShuffle: Bool
    /// The incarnation of floors a version 2 checkpoint did not name (the configured topic's).
    let unnamedIncarnation: UInt64
    /// Whether the task keeps its windows in a changelog: then it reads them back when it is
    /// assigned, commits at its processed mark, and holds its aggregate records back until the
    /// state they carry is written (see `prepareCommit`), so that no restart can step a key back.
    let stateful: Bool
    var offsets = PartitionOffsets()
    var dedup = SourceDedup()
    var changelog = TaskChangelog()
    /// The state is being read back from the changelog: no record may be processed yet.
    private(set) var awaitingState = false
    /// The changelog position the last commit recorded (checkpoint format 4).
    private var committedChangelog: Int64?
    /// Records waiting for the next commit, latest per key (stateful tasks).
    private var held: [WindowKey: WindowAggregate] = [:]
    /// What the engine emitted during a silent replay, latest per key: sent once the replay
    /// catches up, since the previous owner may not have emitted it.
    private var suppressed: [WindowKey: WindowAggregate] = [:]
    /// The replay covers an interval whose output the previous owner held for a commit it
    /// never made (its changelog was written ahead of it): that output may be lost, so the
    /// replay sends its dead letters again, and the state read back its records.
    private var replayOutputHeld = false
    /// The engine's number for each source (an input partition of one incarnation), and how many
    /// partitions of each incarnation have been declared to the engine.
    private var incarnations: [UInt64: Int] = [:]
    private var declared: [UInt64: Int] = [:]

    /// What the task made of its share of a batch, for the stage to send in partition order.
    struct Result {
        var report = StageReport()
        var emitted: [WindowAggregate] = []
        /// Dead letters to send (not those of a replay, whose previous owner sent them), in
        /// record order.
        var deadLetters: [PendingDeadLetter] = []
        /// The batch was routed by another partition count: nothing was counted.
        var misrouted: (routed: Int, expected: Int)?
    }

    struct PendingDeadLetter {
        var reference: DeadLetterReference
        var reason: String
        var detail: String
    }

    init(
        key: TaskKey, config: WindowConfig, start: PartitionStart?, crossesShuffle: Bool, unnamedIncarnation: UInt64 = 0,
        stateful: Bool = false, inputTopic: String = "", now: Int64, shards: Int = 1
    ) {
        self.key = key
        self.stateful = stateful && key.partition != nil
        self.engine = WindowEngine(config: config, shards: shards, tracksState: self.stateful)
        self.createdAt = now
        self.crossesShuffle = crossesShuffle
        self.unnamedIncarnation = unnamedIncarnation
        guard let partition = key.partition else { return }
        if self.stateful {
            awaitingState = true
            // The changelog is read back only from where the last commit's line of owners began
            // writing it. Without a commit, an owner continues the line that wrote last if it
            // counted the same input (its owner died before its first commit); any other commit
            // (an offset reset, a recreated topic, an older build) begins a new line.
            let lineage: TaskChangelog.Lineage
            if start?.committedOffset == nil {
                lineage = .lastWritten
            } else if let checkpoint = Checkpoint(decoding: start?.metadata), checkpoint.changelog != nil, start?.commitIsBeyondTheLog != true {
                lineage = .committed(since: checkpoint.changelogSince)
            } else {
                lineage = .new
            }
            changelog.beginRestore(lineage, source: ChangelogRecord.source(crossesShuffle: crossesShuffle, inputTopic: inputTopic))
        }
        if !crossesShuffle {
            // The partition is its own only source.
            engine.assign(partitions: [partition], now: now)
        }
        guard let start, start.committedOffset != nil else { return }
        let checkpoint = Checkpoint(decoding: start.metadata)
        let floors = (checkpoint?.seen ?? [:]).mapValues { floor in
            floor.incarnation == Checkpoint.unrecordedIncarnation ? SourceFloor(incarnation: unnamedIncarnation, offset: floor.offset) : floor
        }
        if start.commitIsBeyondTheLog {
            // The topic was recreated: its offsets start over, so nothing below any mark is a
            // replay. What the checkpoint says in event time still holds: windows it had closed
            // stay closed, and source positions it had counted stay counted.
            if let checkpoint {
                engine.restore(partition: partition, replayBefore: 0, evictedBefore: checkpoint.evictedBefore)
                if crossesShuffle { dedup = SourceDedup(restored: floors, at: 0) }
            }
            return
        }
        offsets.committed = start.committedOffset
        guard let checkpoint else { return }
        offsets.metadata = start.metadata
        if crossesShuffle { dedup = SourceDedup(restored: floors, at: checkpoint.processedThrough) }
        if let written = checkpoint.changelog {
            // Format 4: the windows are in the changelog, read back before any record; the task
            // record there says how far they had counted.
            committedChangelog = written
            return
        }
        // Before changelogs: the commit trails by what the windows held, and the replay from it
        // rebuilds them; below the previous owner's mark it is silent.
        engine.restore(partition: partition, replayBefore: checkpoint.processedThrough, evictedBefore: checkpoint.evictedBefore)
        offsets.restoredMark = checkpoint.processedThrough
    }

    /// Why a window task cannot resume from `start`, if it cannot: a commit without a window
    /// checkpoint, other than one at the very beginning of the partition (a full recount), was
    /// made by another mode or tool, and resuming from it would count only the hits after it,
    /// overwriting full records with partial ones.
    static func refusal(of start: PartitionStart, topic: String) -> PipelineError? {
        guard let committed = start.committedOffset, !start.commitIsBeyondTheLog, Checkpoint(decoding: start.metadata) == nil,
            committed != (start.logStart ?? 0)
        else { return nil }
        let who =
            SourceCheckpoint(decoding: start.metadata) != nil
            ? "by trackpipe's normalize stage (the group was last run with two stages, whose commits on the input hold no window state)"
            : "without a trackpipe checkpoint (by another tool, or by an offset reset)"
        return .groupMismatch(
            "the group's commit at offset \(committed) of \(topic)[\(start.partition)] was made \(who). Counting windows from it would miss the hits before it and overwrite full records with partial ones. Run this mode under a --group of its own (a new group counts the input from its beginning), or reset this group's offsets of \(topic) to the earliest (kafka-consumer-groups.sh --reset-offsets --to-earliest) for a full recount")
    }

    // MARK: Sources

    /// The engine's number for a source: its partition for the first incarnation seen (or for
    /// input read where it was produced), a number of its own for any later one.
    private mutating func sourceId(_ source: SourceKey) -> Int32 {
        guard crossesShuffle else { return source.partition }
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
    private mutating func declareSources(_ counts: [UInt64: Int], now: Int64) {
        for (incarnation, count) in counts.sorted(by: { $0.key < $1.key }) where count > (declared[incarnation] ?? 0) {
            let since = declared.isEmpty || declared[incarnation] != nil ? createdAt : now
            let first = declared[incarnation] ?? 0
            declared[incarnation] = count
            let ids = (first..<count).map { sourceId(SourceKey(incarnation: incarnation, partition: Int32($0))) }
            engine.assign(partitions: ids, now: since)
        }
    }

    // MARK: Reading the state back

    mutating func restoreState(_ records: [StateRecord]) {
        for record in records { changelog.apply(offset: record.offset, key: record.key, value: record.value) }
    }

    /// The changelog is read: the windows go back into the engine, the silent replay runs to
    /// where the state was written, and windows whose last emission may be lost are sent again
    /// once it has. Returns what was read, for the log.
    mutating func stateRestored(now: Int64) throws -> TaskChangelog.Restored {
        guard awaitingState, let partition = key.partition else { return TaskChangelog.Restored() }
        awaitingState = false
        let restored = changelog.finishRestore(committedChangelog: committedChangelog)
        if let foreign = restored.foreign, let committed = offsets.committed {
            throw PipelineError.groupMismatch(
                "the state of partition \(partition) was written by another run of this group (at offset \(foreign) of its changelog, after this task's last commit at offset \(committed)): the other mode, or a recount after an offset reset. The windows of this task's commit cannot be told from it. Stop every instance, then reset this group's offsets of every topic it reads to the earliest (a full recount from the state topic's end), or run under a new --group")
        }
        if let committedChangelog, (changelog.end ?? 0) < committedChangelog {
            throw PipelineError.kafka(
                "the changelog of partition \(partition) ends at offset \(changelog.end ?? 0), before the \(committedChangelog) its last commit recorded: the state topic was deleted, recreated or truncated, and the windows cannot be read back exactly. Stop every instance, then either restore the state topic, or start the deployment under a new --group (it counts the input from its beginning)")
        }
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
        if let task = restored.task {
            if let committed = offsets.committed, committedChangelog != nil, task.processedThrough < committed {
                throw PipelineError.kafka(
                    "the changelog of partition \(partition) holds state as of offset \(task.processedThrough), before the \(committed) the group committed: it lost records (retention, or the topic recreated). Stop every instance, then restore the state topic or start under a new --group")
            }
            // Whatever lies between the commit and the state's mark was counted by an owner that
            // held its output for a commit it never made.
            replayOutputHeld = true
            let counted = Dictionary(restored.windows.map { ($0.key, $0.countedThrough) }, uniquingKeysWith: max)
            engine.restore(
                partition: partition, replayBefore: task.processedThrough, evictedBefore: task.evictedBefore, counted: counted)
            if !crossesShuffle, let watermark = task.watermark {
                // The partition is the task's only source, and nothing but its hits tells the
                // task its event time: without the previous owner's, windows read back would
                // wait for the next hit however long the input stays quiet.
                engine.resume(partition: partition, watermark: watermark, now: now)
            }
            offsets.restoredMark = task.processedThrough
            changelog.evictedOnRestore(finals.map(\.key), mark: task.processedThrough)
        } else if committedChangelog != nil, restored.records == 0, (committedChangelog ?? 0) > 0 {
            throw PipelineError.kafka(
                "the changelog of partition \(partition) is empty, but its last commit recorded state in it: the state topic was deleted or recreated. Stop every instance, then restore the state topic or start under a new --group")
        }
        // Windows whose last emission may not have reached the output go out again with the
        // first commit, as the state read back has them (later emissions of the same window
        // carry higher revisions and win).
        let unconfirmed = Set(restored.unconfirmed)
        for final in finals where unconfirmed.contains(final.key) {
            if let record = final.record(windowSize: config.size) { Self.keepLatest(record, in: &held) }
        }
        for record in engine.currentRecords(restored.unconfirmed.filter { !isFinal($0) }) { Self.keepLatest(record, in: &held) }
        if !offsets.isReplaying { catchUp() }
        var report = restored
        report.unreadable += malformed
        return report
    }

    // MARK: What goes out

    /// Emissions of a stateful task: held until the next commit, or, during a silent replay
    /// that rebuilds windows from an older commit without changelog, kept for when it catches
    /// up. A replay over windows read back from the changelog counts nothing they hold, so what
    /// it emits is never behind what the previous owner sent; it is held like any emission, and
    /// goes out with the commit whose state write records it as emitted.
    private mutating func route(_ emitted: [WindowAggregate]) {
        for record in emitted {
            if offsets.isReplaying && !replayOutputHeld {
                Self.keepLatest(record, in: &suppressed)
            } else {
                Self.keepLatest(record, in: &held)
            }
        }
    }

    /// The silent replay reached the state read back: what it emitted goes out with the next
    /// commit. The batch that caught up may already have emitted newer records of the same
    /// windows: per key, the highest revision wins.
    private mutating func catchUp() {
        for record in suppressed.values { Self.keepLatest(record, in: &held) }
        suppressed = [:]
        if let partition = key.partition { engine.replayFinished(partition: partition) }
    }

    private static func keepLatest(_ record: WindowAggregate, in records: inout [WindowKey: WindowAggregate]) {
        let key = WindowKey(windowStart: record.windowStart, deliveryId: record.deliveryId)
        if let kept = records[key], kept.revision > record.revision { return }
        records[key] = record
    }

    /// Records the engine emitted for time passing (a tick or the end of a bounded run): sent at
    /// once by a task without a changelog (unless it replays silently), held by one with.
    mutating func takeEmissions(_ emitted: [WindowAggregate]) -> [WindowAggregate] {
        if stateful {
            route(emitted)
            return []
        }
        return offsets.isReplaying ? [] : emitted
    }

    /// The changelog records for what changed since the last commit.
    mutating func changelogEntries() -> [ChangelogRecord.Entry] {
        guard stateful, !awaitingState, let processed = offsets.processedThrough ?? offsets.committed else { return [] }
        let task = ChangelogRecord.TaskState(
            processedThrough: max(processed, offsets.restoredMark ?? processed), evictedBefore: engine.evictionHorizon,
            watermark: engine.watermark)
        return changelog.entries(for: engine.exportChanges(), task: task)
    }

    /// The offsets are committed at the commit point.
    mutating func committed() {
        if stateful, let point = commitPoint() { changelog.committed(through: point.offset) }
    }

    /// The state written is acknowledged (the changelog ends at `end`): the held records go out.
    mutating func releaseHeld(changelogEnd end: Int64?) -> [WindowAggregate] {
        changelog.released(end: end)
        defer { held = [:] }
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
        let wasReplaying = offsets.isReplaying
        if key.partition != nil { offsets.processedThrough = lastOffset + 1 }
        let windowSize = engine.config.size
        /// A dead letter belongs to a backfilled range by the time it is about: the window of a
        /// late hit, the Kafka timestamp of a message that could not be read.
        func inRange(_ time: Int64?) -> Bool {
            guard let range, let time else { return true }
            return range.contains(EventTimeMath.windowStart(of: time, size: windowSize))
        }
        var result = Result()
        var accounting = Accounting()
        accounting.marks = batch.markRecords
        declareSources(batch.sourcePartitions, now: now)
        func consumed(at offset: Int64) {
            accounting.consumed += 1
            if offsets.isReplay(offset) { accounting.replayed += 1 }
        }
        for (offset, reason) in batch.filtered {
            consumed(at: offset)
            accounting.filtered[reason.rawValue, default: 0] += 1
        }
        for rejection in batch.rejections {
            consumed(at: rejection.offset)
            accounting.deadLettered[rejection.reason, default: 0] += 1
            if (replayOutputHeld || !offsets.isReplay(rejection.offset)) && inRange(rejection.time) {
                result.deadLetters.append(PendingDeadLetter(reference: rejection.reference, reason: rejection.reason, detail: rejection.detail))
            }
        }
        var inputs: [WindowInput] = []
        inputs.reserveCapacity(batch.events.count)
        var switched: Set<Int32> = []
        for (tag, decoded) in batch.events.enumerated() {
            consumed(at: decoded.offset)
            if crossesShuffle {
                switch dedup.admit(decoded.source, sourceOffset: decoded.sourceOffset, position: decoded.offset) {
                case .copy:
                    accounting.duplicates += 1
                    continue
                case .firstOfNewIncarnation:
                    switched.insert(decoded.source.partition)
                case .first:
                    break
                }
            }
            // Several events can share a record: the position tells them apart, in order.
            let position = decoded.offset << 16 | Int64(UInt16(truncatingIfNeeded: decoded.reference.event ?? 0))
            inputs.append(
                WindowInput(event: decoded.event, partition: decoded.partition, offset: decoded.offset, tag: tag, position: position))
        }
        if !switched.isEmpty {
            result.report.notices.append(
                "events of input partitions \(switched.sorted()) now come from another incarnation of the input (another topic under this group, or the topic deleted and created again): their offsets start afresh, and earlier positions no longer mark copies")
        }
        var marks = SourceMarks<Int32>()
        for (source, report) in batch.marks.bySource {
            marks.note(source: sourceId(source), watermark: report.watermark, idle: report.idle, delivered: report.delivered)
        }
        let output = engine.process(inputs, marks: marks.sorted, now: now, on: runner)
        accounting.accepted += inputs.count - output.tooLate.count
        accounting.replayedFinal += output.replayedFinal
        for late in output.tooLate {
            accounting.deadLettered[RejectReason.tooLate.rawValue, default: 0] += 1
            if (replayOutputHeld || !offsets.isReplay(late.offset)) && inRange(late.event.eventTime) {
                result.deadLetters.append(
                    PendingDeadLetter(reference: batch.events[late.tag].reference, reason: RejectReason.tooLate.rawValue, detail: late.detail))
            }
        }
        result.report.accounting = accounting
        result.report.capacityEvictions = output.capacityEvictions
        result.deadLetters.sort { $0.reference < $1.reference }
        if stateful {
            route(output.emitted)
            if wasReplaying && !offsets.isReplaying { catchUp() }
            return result
        }
        // Below the previous owner's processed mark, everything this replay would emit was
        // emitted and acknowledged before that owner's commit, with the same counts: sending it
        // again would only repeat records (and, for a sink reading the stream, step back).
        if offsets.isReplaying {
            result.emitted = []
        } else if wasReplaying {
            // Caught up with the previous owner: windows that ripened during the silent replay
            // may hold more than that owner had emitted, and this very batch may have corrected
            // windows and then evicted them. Send the current record of every emitted window and
            // what the batch emitted, once per key (equal counts give equal revisions, so
            // repeats are harmless).
            result.emitted = Self.latestPerKey(output.emitted + engine.emittedRecords())
        } else {
            result.emitted = output.emitted
        }
        if let range { result.emitted.removeAll { !range.contains($0.windowStart) } }
        return result
    }

    /// One record per (delivery, window): the one with the highest revision, in emission order.
    static func latestPerKey(_ records: [WindowAggregate]) -> [WindowAggregate] {
        var latest: [WindowKey: WindowAggregate] = [:]
        for record in records { keepLatest(record, in: &latest) }
        return WindowEngine.sortedForEmission(Array(latest.values))
    }

    // MARK: Committing

    /// The offset and checkpoint to commit. With a changelog: the processed mark, since the
    /// windows are in the changelog. Without: below what any open or retained window still
    /// needs, and never beyond what was processed. The global task commits nothing.
    func commitPoint() -> CommitPoint? {
        guard let partition = key.partition, !awaitingState, let processed = offsets.processedThrough else { return nil }
        let seen = crossesShuffle ? dedup.checkpoint : [:]
        if stateful {
            let checkpoint = Checkpoint(
                evictedBefore: engine.evictionHorizon, processedThrough: processed, seen: seen, changelog: changelog.end ?? 0,
                changelogSince: changelog.lineage)
            return CommitPoint(offset: processed, metadata: checkpoint.encoded)
        }
        let safe = engine.lowestHeldOffsets()[partition].map { min($0, processed) } ?? processed
        let checkpoint = Checkpoint(
            evictedBefore: engine.evictionHorizon, processedThrough: max(processed, offsets.restoredMark ?? 0), seen: seen)
        return CommitPoint(offset: safe, metadata: checkpoint.encoded)
    }
}
