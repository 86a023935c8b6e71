import TrackingDomain
import Windowing

/// The window state of one partition of the aggregate stage's input, as Kafka Streams keeps a
/// task per partition: its own engine (watermark, eviction horizon, restore point), its own
/// duplicate filter and its own progress. Partitions hold disjoint deliveries (the input is
/// keyed by delivery), so a partition's state moves alone on a rebalance and never touches
/// another's: one partition's checkpoint cannot make another's replayed hits late.
///
/// A class because tasks of one batch run in parallel, each on one thread.
final class AggregateTask: @unchecked Sendable {
    // @unchecked: a task is touched by one thread at a time. The stage hands each task of a
    // batch to exactly one worker of `DispatchQueue.concurrentPerform` and reads the results
    // only after it returns; between batches only the stage's own thread uses it.
    let partition: Int32
    let engine: ShardedWindowEngine
    let createdAt: Int64
    var dedup = SourceDedup()
    /// The previous owner's processed mark: below it, messages are replays.
    var restoredProcessed: Int64?
    /// Next offset to process; nil before the first record.
    var processed: Int64?
    /// Offset of the last event given to the engine.
    var lastInputOffset: Int64?
    /// Still re-reading what the previous owner had processed: what it emits now, that owner
    /// already emitted.
    var isReplaying: Bool {
        guard let restoredProcessed else { return false }
        return (processed ?? committedOffset ?? 0) < restoredProcessed
    }
    /// Where this owner started reading (the previous owner's commit).
    var committedOffset: Int64?
    /// Source partitions declared to the engine (it holds the watermark for them).
    var declaredSources = 0
    /// Whether the checkpoint carries a `seen` map (events came through the repartition topic).
    let behindShuffle: Bool

    init(partition: Int32, config: WindowConfig, start: PartitionStart, behindShuffle: Bool, now: Int64, shards: Int = 1) {
        self.partition = partition
        self.engine = ShardedWindowEngine(config: config, shards: shards)
        self.createdAt = now
        self.behindShuffle = behindShuffle
        if !behindShuffle && partition >= 0 {
            // The partition is its own only source.
            engine.assign(partitions: [partition], now: now)
            declaredSources = 1
        }
        committedOffset = start.committedOffset
        if let offset = start.committedOffset, offset >= 0, let checkpoint = Checkpoint(decoding: start.metadata) {
            engine.restore(partition: partition, replayBefore: checkpoint.processedThrough, evictedBefore: checkpoint.evictedBefore)
            restoredProcessed = checkpoint.processedThrough
            if behindShuffle { dedup = SourceDedup(restored: checkpoint.seen, at: checkpoint.processedThrough) }
        }
    }

    /// Declares sources 0..<count the first time the count is known, as of the task's creation:
    /// a source that has not reported holds the watermark back until the idle timeout.
    func declareSources(_ count: Int) {
        guard count > declaredSources else { return }
        engine.assign(partitions: (Int32(declaredSources)..<Int32(count)).map { $0 }, now: createdAt)
        declaredSources = count
    }

    /// The offset and checkpoint to commit: below what any open or retained window still
    /// needs, and never beyond what was processed.
    func commitPoint() -> CommitPoint? {
        guard let processed else { return nil }
        var safe = processed
        // The engine's mark is min(lowest offset a window holds, last event + 1). When no window
        // holds anything, messages after that last event (dead-lettered, filtered, duplicates,
        // marks) are done too, so the partition is safe up to what was processed.
        if let mark = engine.safeOffsets()[partition], mark != (lastInputOffset ?? -2) + 1 { safe = min(mark, processed) }
        let through = max(processed, restoredProcessed ?? 0)
        let checkpoint = Checkpoint(
            evictedBefore: engine.evictionHorizon, processedThrough: through, seen: behindShuffle ? dedup.checkpoint : [:])
        return CommitPoint(offset: safe, metadata: checkpoint.encoded)
    }
}
