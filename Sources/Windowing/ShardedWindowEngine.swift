import Dispatch
import TrackingDomain

/// The windowing engine the pipeline drives: owns event-time bookkeeping (watermark, eviction
/// horizon, restore points, processed offsets) and spreads the counting over shards.
///
/// Deliveries are split across shards by a stable hash of `deliveryId`; each shard is a serial
/// `DispatchQueue` owning its own `WindowStore`, so the hot path takes no locks. A batch costs
/// one dispatch per shard and the call returns when all shards are done. With one shard there
/// is no dispatch at all. Output never depends on the shard count.
///
/// A class (not a struct) because shards are shared mutable state behind queues; marked
/// `@unchecked Sendable` because every public entry point is serialised on an internal queue,
/// so callers may use it from any thread, one call at a time taking effect in order.
public final class ShardedWindowEngine: @unchecked Sendable {
    public let config: WindowConfig
    public let shardCount: Int

    private let serial = DispatchQueue(label: "trackpipe.windowing.engine")
    private let shards: [EngineShard]
    private var clock: WatermarkTracker
    private var horizon: Int64 = .min
    private var restorePoints: [Int32: RestorePoint] = [:]
    private var highestOffsets: [Int32: Int64] = [:]
    private var totals = EngineStats()
    private var retainedEntries = 0

    /// - Parameter tracksState: keep what a changelog needs (see `exportChanges`, `restore`):
    ///   for an engine over one partition's input only.
    public init(config: WindowConfig = WindowConfig(), shards: Int = 1, tracksState: Bool = false) {
        precondition(shards >= 1, "at least one shard")
        self.config = config
        self.shardCount = shards
        self.shards = (0..<shards).map { EngineShard(index: $0, config: config, tracksState: tracksState) }
        self.clock = WatermarkTracker(idleTimeout: config.idleTimeout)
    }

    // MARK: Partition lifecycle

    /// Declares partitions this worker now reads. They hold the watermark back until they
    /// deliver or go idle, so windows are not closed before a partition's backlog arrives.
    public func assign(partitions: [Int32], now: Int64) {
        serial.sync { clock.assign(partitions, now: now) }
    }

    /// Stops waiting for partitions handed to another worker and forgets their offsets.
    public func revoke(partitions: [Int32]) {
        serial.sync {
            clock.revoke(partitions)
            for partition in partitions {
                highestOffsets[partition] = nil
                restorePoints[partition] = nil
            }
        }
    }

    /// Re-arms crash safety from the commit metadata of a partition: hits below `replayBefore`
    /// in windows the previous run had already finalised (expiry <= `evictedBefore`) are
    /// dropped silently, and windows past `evictedBefore` stay closed for new hits too, so a
    /// partial re-emission can never overwrite a final record.
    ///
    /// With `counted` (a task whose changelog was written ahead of its commit, whose output for
    /// the replayed interval may be lost), the replay takes the previous owner's verdicts from
    /// the state instead: a replayed hit is dropped if its window's state (`countedThrough` per
    /// window) holds it, and reported too late otherwise.
    public func restore(partition: Int32, replayBefore: Int64, evictedBefore: Int64, counted: [WindowKey: Int64]? = nil) {
        serial.sync {
            restorePoints[partition] = RestorePoint(
                replayBefore: replayBefore, evictedBefore: evictedBefore, counted: counted)
            horizon = Swift.max(horizon, evictedBefore)
        }
    }

    /// A new owner goes on from the event time `partition` had reached with its previous owner,
    /// as if it had just delivered up to there: when the input stays quiet, event time then
    /// follows the wall clock from it.
    public func resume(partition: Int32, watermark: Int64, now: Int64) {
        serial.sync { clock.observe(partition: partition, maxEventTime: watermark, now: now) }
    }

    /// The replay of `partition` is over: what it needed to judge replayed hits goes.
    public func replayFinished(partition: Int32) {
        serial.sync { restorePoints[partition]?.counted = [:] }
    }

    // MARK: Driving

    /// Counts a batch of hits, then moves the watermark for wall-clock `now` and emits what
    /// became final or was corrected. The watermark moves at batch boundaries: hits in a batch
    /// are judged too late against the horizon in force when the batch started.
    public func process(_ batch: [WindowInput], now: Int64) -> EngineOutput {
        serial.sync { processSerially(batch, marks: nil, now: now) }
    }

    /// Counts a batch whose event time is reported separately, per source partition: for
    /// input that crossed a shuffle, where the partition an offset belongs to (the batch's
    /// `partition`) is not the partition the hit was first read from. Sources must have been
    /// declared with `assign(partitions:now:)` to hold the watermark back before they report.
    public func process(_ batch: [WindowInput], marks: [SourceMark], now: Int64) -> EngineOutput {
        serial.sync { processSerially(batch, marks: marks, now: now) }
    }

    /// Lets wall-clock time pass without input, so idle partitions release the watermark and
    /// pending corrections go out.
    public func advance(now: Int64) -> EngineOutput {
        serial.sync { processSerially([], marks: [], now: now) }
    }

    /// Emits every open window and pending correction now, for bounded runs that end at the
    /// end of the input rather than waiting for a watermark that will never come.
    public func flushAll() -> EngineOutput {
        serial.sync {
            let outputs = runOnShards { store in
                var out = StoreOutput()
                store.flushAll(into: &out)
                return out
            }
            return merge(outputs)
        }
    }

    /// The current record of every window already emitted, sorted for emission. A new owner
    /// that replayed a partition without emitting (its previous owner had emitted that part)
    /// sends these once it has caught up, because windows may have ripened during the replay
    /// that the previous owner had not yet emitted in full.
    public func emittedRecords() -> [WindowAggregate] {
        serial.sync {
            merge(runOnShards { store in
                var out = StoreOutput()
                store.emittedRecords(into: &out)
                return out
            }).emitted
        }
    }

    // MARK: State

    /// The windows whose state changed, and those evicted, since the last call: what a
    /// changelog must write so that `restore` can rebuild this engine's windows.
    public func exportChanges() -> StateChanges {
        serial.sync {
            var changes = StateChanges()
            for part in runOnShards({ store -> StateChanges in
                var changes = StateChanges()
                store.exportChanges(into: &changes)
                return changes
            }) {
                changes.windows += part.windows
                changes.evicted += part.evicted
            }
            return changes
        }
    }

    /// Puts windows back as a changelog held them (call `finishRestore` after the last);
    /// returns how many were malformed and skipped.
    @discardableResult
    public func restore(_ states: [WindowState]) -> Int {
        serial.sync {
            let shardCount = shardCount
            return runOnShards { store, shard in
                var malformed = 0
                for state in states where shardCount == 1 || DeliveryHash.shard(of: state.deliveryId, count: shardCount) == shard {
                    if !store.restore(state) { malformed += 1 }
                }
                return malformed
            }.reduce(0, +)
        }
    }

    /// The current record of each of these windows that is still held, sorted for emission.
    public func currentRecords(_ keys: [WindowKey]) -> [WindowAggregate] {
        guard !keys.isEmpty else { return [] }
        return serial.sync {
            let shardCount = shardCount
            let records = runOnShards { store, shard in
                var out = StoreOutput()
                let mine = keys.filter { shardCount == 1 || DeliveryHash.shard(of: $0.deliveryId, count: shardCount) == shard }
                store.currentRecords(mine, into: &out)
                return out
            }.flatMap(\.emitted)
            return Self.sortedForEmission(records)
        }
    }

    /// Every restored window is back: emitted windows whose counts moved on since their last
    /// emission owe a correction.
    public func finishRestore() {
        serial.sync {
            _ = runOnShards { store -> Int in
                store.finishRestore()
                return 0
            }
        }
    }

    // MARK: Observation

    /// Per partition, Kafka's "next offset to read" that is safe to commit: the lowest offset
    /// still held by a retained window, or one past the last processed hit. Partitions with no
    /// processed hit yet are absent (keep their previous commit).
    public func safeOffsets() -> [Int32: Int64] {
        serial.sync {
            let lowest = lowestHeldSerially()
            var safe: [Int32: Int64] = [:]
            for (partition, highest) in highestOffsets {
                safe[partition] = Swift.min(EventTimeMath.add(highest, 1), lowest[partition] ?? .max)
            }
            return safe
        }
    }

    /// Per partition, the lowest offset of a hit that an open or retained window still holds;
    /// partitions whose hits no window holds are absent. Everything below it may be committed.
    public func lowestHeldOffsets() -> [Int32: Int64] {
        serial.sync { lowestHeldSerially() }
    }

    private func lowestHeldSerially() -> [Int32: Int64] {
        var lowest: [Int32: Int64] = [:]
        for snapshot in snapshots() {
            for (partition, offset) in snapshot.minOffsets {
                lowest[partition] = Swift.min(lowest[partition] ?? .max, offset)
            }
        }
        return lowest
    }

    /// Every window with end + retention <= this has been evicted; store it in the commit
    /// metadata and pass it back to `restore` after a restart.
    public var evictionHorizon: Int64 {
        serial.sync { horizon }
    }

    /// The global event-time watermark; nil until every active partition delivered a hit.
    public var watermark: Int64? {
        serial.sync { clock.current }
    }

    public var stats: EngineStats {
        serial.sync {
            var stats = totals
            var starts = Set<Int64>()
            for snapshot in snapshots() {
                stats.openWindows += snapshot.openWindows
                stats.retainedWindows += snapshot.retainedWindows
                stats.entries += snapshot.entries
                starts.formUnion(snapshot.entriesByWindowStart.keys)
            }
            stats.windowStarts = starts.count
            return stats
        }
    }

    // MARK: Internals (run on `serial`)

    private func processSerially(_ batch: [WindowInput], marks: [SourceMark]?, now: Int64) -> EngineOutput {
        let horizonAtStart = horizon
        let restore = restorePoints
        if let marks {
            noteOffsets(of: batch)
            for mark in marks {
                clock.observe(partition: mark.source, maxEventTime: mark.watermark, now: now, reportedIdle: mark.idle, delivered: mark.delivered)
            }
        } else {
            observePartitions(of: batch, now: now)
        }
        let shardCount = shardCount
        let newWatermark = clock.advance(now: now)
        if let newWatermark { horizon = Swift.max(horizon, newWatermark) }
        let settledHorizon = horizon

        let outputs = runOnShards { [batch] store, shard in
            var out = StoreOutput()
            store.settle(watermark: store.watermark, horizon: horizonAtStart, into: &out)
            if shardCount > 1 {
                // Each shard picks its own deliveries from the shared batch: hashing in
                // parallel beats a serial routing pass on the coordinator.
                for input in batch where DeliveryHash.shard(of: input.event.deliveryId, count: shardCount) == shard {
                    store.ingest(input, restore: restore, into: &out)
                }
            } else {
                for input in batch {
                    store.ingest(input, restore: restore, into: &out)
                }
            }
            store.settle(watermark: newWatermark, horizon: settledHorizon, into: &out)
            return out
        }
        var output = merge(outputs)
        if retainedEntries >= config.maxEntries {
            if let eviction = evictForCapacity() {
                output.emitted = Self.sortedForEmission(output.emitted + eviction.emitted)
                output.capacityEvictions.append(eviction.report)
            }
        }
        return output
    }

    /// Updates partition clocks and processed offsets. Consecutive hits of a partition are
    /// folded before touching the clock table.
    private func observePartitions(of batch: [WindowInput], now: Int64) {
        guard var partition = batch.first?.partition else { return }
        var maxTime: Int64?
        var highest = Int64.min
        for input in batch {
            if input.partition != partition {
                observe(partition: partition, maxTime: maxTime, highest: highest, now: now)
                partition = input.partition
                maxTime = nil
                highest = .min
            }
            if let time = input.event.eventTime { maxTime = Swift.max(maxTime ?? time, time) }
            highest = Swift.max(highest, input.offset)
        }
        observe(partition: partition, maxTime: maxTime, highest: highest, now: now)
    }

    /// Processed offsets per partition, for batches whose clock comes from source marks.
    private func noteOffsets(of batch: [WindowInput]) {
        guard var partition = batch.first?.partition else { return }
        var highest = Int64.min
        for input in batch {
            if input.partition != partition {
                highestOffsets[partition] = Swift.max(highestOffsets[partition] ?? highest, highest)
                partition = input.partition
                highest = .min
            }
            highest = Swift.max(highest, input.offset)
        }
        highestOffsets[partition] = Swift.max(highestOffsets[partition] ?? highest, highest)
    }

    private func observe(partition: Int32, maxTime: Int64?, highest: Int64, now: Int64) {
        clock.observe(partition: partition, maxEventTime: maxTime, now: now)
        highestOffsets[partition] = Swift.max(highestOffsets[partition] ?? highest, highest)
    }

    private func runOnShards<Value: Sendable>(
        _ work: @escaping @Sendable (inout WindowStore, Int) -> Value
    ) -> [Value] {
        if shards.count == 1 {
            return [work(&shards[0].store, 0)]
        }
        let results = ShardResults<Value>(count: shards.count)
        let group = DispatchGroup()
        for (index, shard) in shards.enumerated().dropFirst() {
            shard.queue.async(group: group) {
                results.set(index, work(&shard.store, index))
            }
        }
        // Shard 0 runs through its own queue but on the calling thread (sync on an idle serial
        // queue does), which would otherwise only wait: one wake-up fewer per batch.
        let first = shards[0]
        first.queue.sync {
            results.set(0, work(&first.store, 0))
        }
        // The other shards usually finish within microseconds of shard 0: poll briefly
        // before blocking, since a futex sleep and wake-up costs as much as a small batch.
        var polls = 0
        while group.wait(timeout: .now()) == .timedOut {
            polls += 1
            if polls == 2_000 {
                group.wait()
                break
            }
        }
        return results.values()
    }

    private func runOnShards<Value: Sendable>(_ work: @escaping @Sendable (inout WindowStore) -> Value) -> [Value] {
        runOnShards { store, _ in work(&store) }
    }

    private func snapshots() -> [StoreSnapshot] {
        runOnShards { store in store.snapshot() }
    }

    private func merge(_ outputs: [StoreOutput]) -> EngineOutput {
        var output = EngineOutput()
        var entries = 0
        for out in outputs {
            output.emitted.append(contentsOf: out.emitted)
            output.tooLate.append(contentsOf: out.tooLate)
            output.replayedFinal += out.replayedFinal
            entries += out.entries
            totals.hitsProcessed += out.hitsProcessed
            totals.hitsCounted += out.hitsCounted
            totals.recordsEmitted += out.emitted.count
            totals.tooLateHits += out.tooLate.count
            totals.replayedFinalHits += out.replayedFinal
            totals.windowsEvicted += out.windowsEvicted
        }
        retainedEntries = entries
        if output.emitted.count > 1 {
            output.emitted = Self.sortedForEmission(output.emitted)
        }
        if outputs.count > 1 {
            output.tooLate.sort { ($0.partition, $0.offset, $0.tag) < ($1.partition, $1.offset, $1.tag) }
        }
        return output
    }

    /// Records in the order they are sent: by window start, delivery, then revision. Sorts
    /// through an index permutation: records are large, moving indices is cheaper.
    public static func sortedForEmission(_ records: [WindowAggregate]) -> [WindowAggregate] {
        let order = records.indices.sorted { emissionOrder(records[$0], records[$1]) }
        return order.map { records[$0] }
    }

    private static func emissionOrder(_ a: WindowAggregate, _ b: WindowAggregate) -> Bool {
        if a.windowStart != b.windowStart { return a.windowStart < b.windowStart }
        if a.deliveryId != b.deliveryId { return a.deliveryId < b.deliveryId }
        return a.revision < b.revision
    }

    /// Drops whole window starts, oldest first, until retained entries are at most 90% of the
    /// cap (the margin avoids evicting again on the very next batch). Oldest first means
    /// already-emitted windows go before open ones; open ones are emitted as they go. The
    /// horizon moves past them, so their later hits are reported too late.
    private func evictForCapacity() -> (emitted: [WindowAggregate], report: CapacityEviction)? {
        var byStart: [Int64: Int] = [:]
        var total = 0
        for snapshot in snapshots() {
            for (start, count) in snapshot.entriesByWindowStart { byStart[start, default: 0] += count }
            total += snapshot.entries
        }
        let target = config.maxEntries - config.maxEntries / 10
        var remaining = total
        var cutoff: Int64?
        for start in byStart.keys.sorted() {
            if remaining <= target { break }
            remaining -= byStart[start]!
            cutoff = start
        }
        guard let cutoff else { return nil }
        horizon = Swift.max(horizon, EventTimeMath.add(EventTimeMath.add(cutoff, config.size), config.retention))
        let settledHorizon = horizon
        let outputs = runOnShards { store in
            var out = StoreOutput()
            store.settle(watermark: store.watermark, horizon: settledHorizon, into: &out)
            return out
        }
        var report = CapacityEviction(
            entriesBefore: total, maxEntries: config.maxEntries, entriesFreed: 0, windowsEvicted: 0,
            windowsEmittedEarly: 0, oldestWindowStart: .max, newestWindowStart: .min, newHorizon: settledHorizon)
        for out in outputs {
            report.entriesFreed += out.entriesFreed
            report.windowsEvicted += out.windowsEvicted
            report.windowsEmittedEarly += out.windowsEmittedEarly
            if let oldest = out.oldestEvictedStart { report.oldestWindowStart = Swift.min(report.oldestWindowStart, oldest) }
            if let newest = out.newestEvictedStart { report.newestWindowStart = Swift.max(report.newestWindowStart, newest) }
        }
        let merged = merge(outputs)
        totals.capacityEvictions += 1
        totals.capacityEvictedWindows += report.windowsEvicted
        return (merged.emitted, report)
    }
}
