import TrackingDomain
import Windowing

/// The window state of one task of the aggregate stage, as Kafka Streams keeps a task per
/// partition: its own engine (watermark, eviction horizon, restore point), its own duplicate
/// filter and its own offsets. Partitions hold disjoint deliveries (the input is keyed by
/// delivery), so one partition's checkpoint can never make another's replayed hits late.
struct AggregateTask: Sendable {
    let key: TaskKey
    let engine: ShardedWindowEngine
    /// Wall-clock ms of the task's creation: the first input's sources hold the watermark back
    /// from then, not from when they were declared.
    let createdAt: Int64
    /// Whether the records came through the repartition topic (`AggregateInput.crossesShuffle`).
    let crossesShuffle: Bool
    /// The incarnation of floors a version 2 checkpoint did not name (the configured topic's).
    let unnamedIncarnation: UInt64
    var offsets = PartitionOffsets()
    var dedup = SourceDedup()
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
        now: Int64, shards: Int = 1
    ) {
        self.key = key
        self.engine = ShardedWindowEngine(config: config, shards: shards)
        self.createdAt = now
        self.crossesShuffle = crossesShuffle
        self.unnamedIncarnation = unnamedIncarnation
        guard let partition = key.partition else { return }
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
        engine.restore(partition: partition, replayBefore: checkpoint.processedThrough, evictedBefore: checkpoint.evictedBefore)
        offsets.metadata = start.metadata
        offsets.restoredMark = checkpoint.processedThrough
        if crossesShuffle { dedup = SourceDedup(restored: floors, at: checkpoint.processedThrough) }
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

    // MARK: Counting

    /// Counts what an input decoded from this task's records, the last of which is at
    /// `lastOffset`. Runs on a worker thread, touching only this task.
    mutating func count(_ batch: DecodedBatch, through lastOffset: Int64, range: Range<Int64>?, now: Int64) -> Result {
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
            if !offsets.isReplay(rejection.offset) && inRange(rejection.time) {
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
            inputs.append(WindowInput(event: decoded.event, partition: decoded.partition, offset: decoded.offset, tag: tag))
        }
        if !switched.isEmpty {
            result.report.notices.append(
                "events of input partitions \(switched.sorted()) now come from another incarnation of the input (another topic under this group, or the topic deleted and created again): their offsets start afresh, and earlier positions no longer mark copies")
        }
        var marks = SourceMarks<Int32>()
        for (source, report) in batch.marks.bySource {
            marks.note(source: sourceId(source), watermark: report.watermark, idle: report.idle)
        }
        let output = engine.process(inputs, marks: marks.sorted, now: now)
        accounting.accepted += inputs.count - output.tooLate.count
        accounting.replayedFinal += output.replayedFinal
        for late in output.tooLate {
            accounting.deadLettered[RejectReason.tooLate.rawValue, default: 0] += 1
            if !offsets.isReplay(late.offset) && inRange(late.event.eventTime) {
                result.deadLetters.append(
                    PendingDeadLetter(reference: batch.events[late.tag].reference, reason: RejectReason.tooLate.rawValue, detail: late.detail))
            }
        }
        result.report.accounting = accounting
        result.report.capacityEvictions = output.capacityEvictions
        result.deadLetters.sort { $0.reference < $1.reference }
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
        var latest: [String: WindowAggregate] = [:]
        for record in records {
            let key = "\(record.deliveryId)@\(record.windowStart)"
            if let kept = latest[key], kept.revision >= record.revision { continue }
            latest[key] = record
        }
        return latest.values.sorted { ($0.windowStart, $0.deliveryId, $0.revision) < ($1.windowStart, $1.deliveryId, $1.revision) }
    }

    // MARK: Committing

    /// The offset and checkpoint to commit: below what any open or retained window still
    /// needs, and never beyond what was processed. The global task commits nothing.
    func commitPoint() -> CommitPoint? {
        guard let partition = key.partition, let processed = offsets.processedThrough else { return nil }
        let safe = engine.lowestHeldOffsets()[partition].map { min($0, processed) } ?? processed
        let checkpoint = Checkpoint(
            evictedBefore: engine.evictionHorizon, processedThrough: max(processed, offsets.restoredMark ?? 0),
            seen: crossesShuffle ? dedup.checkpoint : [:])
        return CommitPoint(offset: safe, metadata: checkpoint.encoded)
    }
}
