import TrackingDomain
import Windowing

/// The window state of one task of the aggregate stage, as Kafka Streams keeps a task per
/// partition: its own engine (watermark, eviction horizon, restore point), its own duplicate
/// filter and its own offsets. Partitions hold disjoint deliveries (the input is keyed by
/// delivery), so one partition's checkpoint can never make another's replayed hits late.
struct AggregateTask: Sendable {
    let key: TaskKey
    let engine: ShardedWindowEngine
    /// Wall-clock ms of the task's creation: sources declared later hold the watermark back from
    /// then, not from when they were declared.
    let createdAt: Int64
    /// Whether the records came through the repartition topic (`AggregateInput.crossesShuffle`).
    let crossesShuffle: Bool
    var offsets = PartitionOffsets()
    var dedup = SourceDedup()
    /// Source partitions declared to the engine (it holds the watermark back for them).
    private var declaredSources = 0

    /// What the task made of its share of a batch, for the stage to send in partition order.
    struct Result {
        var report = StageReport()
        var emitted: [WindowAggregate] = []
        /// Dead letters to send (not those of a replay, whose previous owner sent them), in
        /// record order.
        var deadLetters: [PendingDeadLetter] = []
    }

    struct PendingDeadLetter {
        var reference: DeadLetterReference
        var reason: String
        var detail: String
    }

    init(key: TaskKey, config: WindowConfig, start: PartitionStart?, crossesShuffle: Bool, now: Int64, shards: Int = 1) {
        self.key = key
        self.engine = ShardedWindowEngine(config: config, shards: shards)
        self.createdAt = now
        self.crossesShuffle = crossesShuffle
        guard let partition = key.partition else { return }
        if !crossesShuffle {
            // The partition is its own only source.
            engine.assign(partitions: [partition], now: now)
            declaredSources = 1
        }
        offsets.committed = start?.committedOffset
        if offsets.committed != nil, let checkpoint = Checkpoint(decoding: start?.metadata) {
            engine.restore(partition: partition, replayBefore: checkpoint.processedThrough, evictedBefore: checkpoint.evictedBefore)
            offsets.checkpoint = checkpoint
            offsets.restoredMark = checkpoint.processedThrough
            if crossesShuffle { dedup = SourceDedup(restored: checkpoint.seen, at: checkpoint.processedThrough) }
        }
    }

    /// Declares sources 0..<count the first time the count is known, as of the task's creation:
    /// a source that has not reported holds the watermark back until the idle timeout.
    mutating func declareSources(_ count: Int) {
        guard count > declaredSources else { return }
        engine.assign(partitions: (Int32(declaredSources)..<Int32(count)).map { $0 }, now: createdAt)
        declaredSources = count
    }

    // MARK: Counting

    /// Counts what an input decoded from this task's records, the last of which is at
    /// `lastOffset`. Runs on a worker thread, touching only this task.
    mutating func count(_ batch: DecodedBatch, through lastOffset: Int64, range: Range<Int64>?, now: Int64) -> Result {
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
        declareSources(batch.sourcePartitions)
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
        for (tag, decoded) in batch.events.enumerated() {
            consumed(at: decoded.offset)
            if crossesShuffle, !dedup.admit(source: decoded.source, sourceOffset: decoded.sourceOffset, position: decoded.offset) {
                accounting.duplicates += 1
                continue
            }
            inputs.append(WindowInput(event: decoded.event, partition: decoded.partition, offset: decoded.offset, tag: tag))
        }
        let output = engine.process(inputs, marks: batch.marks.sorted, now: now)
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
            // may hold more than that owner had emitted. Send the current state of every
            // emitted window once (equal counts give equal revisions, so repeats are harmless).
            result.emitted = engine.emittedRecords()
        } else {
            result.emitted = output.emitted
        }
        if let range { result.emitted.removeAll { !range.contains($0.windowStart) } }
        return result
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
        return CommitPoint(offset: safe, checkpoint: checkpoint)
    }
}
