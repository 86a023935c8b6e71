import TrackingDomain

/// The windowing engine the pipeline drives: owns event-time bookkeeping (watermark, eviction
/// horizon, restore points) and the window stores that count.
///
/// A value driven by one caller at a time, with the wall clock passed in: it owns no thread,
/// queue or lock, so the same input always gives the same output and tests drive it step by
/// step. Deliveries may be split into shards by a stable hash of `deliveryId`, each shard a
/// `WindowStore` of its own that no other shard's work touches: that independence is what
/// lets a caller with threads (the pipeline's lanes) run the shards of a call at the same
/// time through a `ShardRunner`. The clock, horizon and memory cap stay whole-engine decisions
/// taken between those runs, so output never depends on the shard count or on the runner.
///
/// Each size of the config has stores of its own (one per shard), and all sizes share the
/// clock and the horizon: a hit is judged once per size, and is too late, for the pipeline, only
/// when every size finds it too late (a hit late for its minute may still count in its hour).
public struct WindowEngine: Sendable {
    public let config: WindowConfig
    public let shardCount: Int

    /// Size-major: the stores of size `i` are `i * shardCount ..< (i + 1) * shardCount`.
    private var stores: [WindowStore]
    private var clock: WatermarkTracker
    private var horizon: Int64 = .min
    private var restorePoints: [Int32: RestorePoint] = [:]
    private var totals = EngineStats()
    private var retainedEntries = 0

    /// - Parameter exportsChanges: keep what a changelog of this engine needs (`exportChanges`,
    ///   and how far each window counted, so that windows read back skip reread hits they
    ///   hold): for an engine over one partition's input only, since offsets of different
    ///   partitions cannot be compared. An engine that nothing reads back (a replay's) keeps none
    ///   of it, and would otherwise keep every evicted window's final state to the end.
    ///   - clock: what the `now` it is given means: this process's wall clock, or the newest
    ///     writer's clock its caller has read behind a shuffle, which event time never passes.
    public init(config: WindowConfig = WindowConfig(), shards: Int = 1, exportsChanges: Bool = false, clock: EngineClock = .wall) {
        precondition(shards >= 1, "at least one shard")
        self.config = config
        self.shardCount = shards
        self.stores = config.sizes.flatMap { size in
            (0..<shards).map { _ in WindowStore(window: size, retention: config.retention, exportsChanges: exportsChanges) }
        }
        self.clock = WatermarkTracker(idleTimeout: config.idleTimeout, boundedByClock: clock == .writers)
    }

    // MARK: Partition lifecycle

    /// Declares partitions this worker now reads. They hold the watermark back until they
    /// deliver or go idle, so windows are not closed before a partition's backlog arrives.
    public mutating func assign(partitions: [Int32], now: Int64) {
        clock.assign(partitions, now: now)
    }

    /// Stops waiting for partitions handed to another worker and forgets their restore points.
    public mutating func revoke(partitions: [Int32]) {
        clock.revoke(partitions)
        for partition in partitions { restorePoints[partition] = nil }
    }

    /// Re-arms crash safety from what the previous owner of a partition had settled (its
    /// restore point): hits below its `processedMark` in windows it had already finalised
    /// (expiry <= `evictedBefore`) are dropped silently, and windows past `evictedBefore` stay
    /// closed for new hits too, so a partial re-emission can never overwrite a final record.
    ///
    /// With `counted` (a task whose changelog was written ahead of its commit, whose output for
    /// the reread interval may be lost), the reread takes the previous owner's verdicts from
    /// the state instead: a reread hit is dropped if its window's state (`countedThrough` per
    /// window) holds it, and reported too late otherwise.
    ///
    /// Windows read back can hold hits past `processedMark` (a state write cut short by a crash
    /// kept their heads but not the task record): up to `countedMark`, a hit its window holds is
    /// dropped too, whatever the horizon, and any other is judged as a live hit.
    public mutating func restore(
        partition: Int32, processedMark: Int64, evictedBefore: Int64, counted: [WindowKey: Int64]? = nil, countedMark: Int64 = .min
    ) {
        restorePoints[partition] = RestorePoint(
            processedMark: processedMark, evictedBefore: evictedBefore, counted: counted, countedMark: countedMark)
        horizon = Swift.max(horizon, evictedBefore)
    }

    /// A new owner goes on from the event time `partition` had reached with its previous owner,
    /// as if it had just delivered up to there: when the input stays quiet, event time then
    /// follows the wall clock from it.
    public mutating func resume(partition: Int32, watermark: Int64, now: Int64) {
        clock.observe(partition: partition, maxEventTime: watermark, now: now)
    }

    /// The reread of `partition` is over, and its input has passed every hit the windows read
    /// back held (`countedMark`): what it needed to judge reread hits goes.
    public mutating func rereadFinished(partition: Int32) {
        restorePoints[partition]?.counted = [:]
        restorePoints[partition]?.countedMark = .min
    }

    // MARK: Driving

    /// Counts a batch of hits, then moves the watermark for wall-clock `now` and emits what
    /// became final or was corrected. The watermark moves at batch boundaries: hits in a batch
    /// are judged too late against the horizon in force when the batch started.
    public mutating func process(_ batch: [WindowInput], now: Int64, on runner: some ShardRunner = ShardsInTurn()) -> EngineOutput {
        process(batch, marks: nil, now: now, on: runner)
    }

    /// Counts a batch whose event time is reported separately, per source partition: for
    /// input that crossed a shuffle, where the partition an offset belongs to (the batch's
    /// `partition`) is not the partition the hit was first read from. Sources must have been
    /// declared with `assign(partitions:now:)` to hold the watermark back before they report.
    public mutating func process(
        _ batch: [WindowInput], marks: [SourceMark], now: Int64, on runner: some ShardRunner = ShardsInTurn()
    ) -> EngineOutput {
        process(batch, marks: Optional(marks), now: now, on: runner)
    }

    /// Lets wall-clock time pass without input, so idle partitions release the watermark and
    /// pending corrections go out.
    public mutating func advance(now: Int64, on runner: some ShardRunner = ShardsInTurn()) -> EngineOutput {
        process([], marks: [], now: now, on: runner)
    }

    /// Emits every open window and pending correction now, for bounded runs that end at the
    /// end of the input rather than waiting for a watermark that will never come.
    public mutating func flushAll(on runner: some ShardRunner = ShardsInTurn()) -> EngineOutput {
        let outputs = runOnShards(runner) { store, _ in
            var out = StoreOutput()
            store.flushAll(into: &out)
            return out
        }
        return merge(outputs)
    }

    // MARK: State

    /// What changed since the last call, per window (its counters, and only the broadlogs new or
    /// with a new action since), and the windows evicted: what a changelog must write so that
    /// `restore` can rebuild this engine's windows from every change since a window's last
    /// complete write (`states(of:)`).
    public mutating func exportChanges() -> StateChanges {
        var changes = StateChanges()
        for index in stores.indices { stores[index].exportChanges(into: &changes) }
        return changes
    }

    /// The whole state of each of these windows that is still held, every broadlog included:
    /// what a changelog writes to fold a window's changes into one write.
    public func states(of keys: [WindowKey]) -> [WindowState] {
        var states: [WindowState] = []
        for key in keys { if let store = store(of: key) { stores[store].states(of: [key], into: &states) } }
        return states
    }

    /// Puts windows back as a changelog held them (call `finishRestore` after the last); a window
    /// of a size this engine does not count is not its own (the group's identity refuses such a
    /// changelog before it is read) and stays out.
    public mutating func restore(_ states: [WindowState]) {
        for state in states { if let store = store(of: state.key) { stores[store].restore(state) } }
    }

    /// The current record of each of these windows that is still held, sorted for emission.
    public func currentRecords(_ keys: [WindowKey]) -> [WindowAggregate] {
        guard !keys.isEmpty else { return [] }
        var out = StoreOutput()
        for key in keys { if let store = store(of: key) { stores[store].currentRecords([key], into: &out) } }
        return Self.sortedForEmission(out.emitted)
    }

    /// Every restored window is back: emitted windows whose counts moved on since their last
    /// emission owe a correction.
    public mutating func finishRestore() {
        for index in stores.indices { stores[index].finishRestore() }
    }

    // MARK: Observation

    /// Every window with end + retention <= this has been evicted; store it in the commit
    /// metadata and pass it back to `restore` after a restart.
    public var evictionHorizon: Int64 { horizon }

    /// The global event-time watermark; nil until every active partition delivered a hit.
    public var watermark: Int64? { clock.current }

    public var stats: EngineStats {
        var stats = totals
        for size in config.sizes { stats.windows[size.size] = WindowFigures() }
        // Window starts by size: a size's shards hold the same starts.
        var starts = Array(repeating: Set<Int64>(), count: config.sizes.count)
        for (index, snapshot) in snapshots().enumerated() {
            let sized = stores[index].sized
            let wait = sized.emission == .final ? config.retention : sized.grace
            var figures = WindowFigures()
            figures.openWindows = snapshot.openWindows
            figures.firstOpenDue = snapshot.oldestOpenEnd.map { EventTimeMath.add($0, wait) }
            figures.retainedWindows = snapshot.retainedWindows
            figures.entries = snapshot.entries
            stats.windows[sized.size]?.add(figures)
            starts[index / shardCount].formUnion(snapshot.entriesByWindowStart.keys)
        }
        for (index, size) in config.sizes.enumerated() { stats.windows[size.size]?.windowStarts = starts[index].count }
        return stats
    }

    // MARK: Internals

    /// The store that holds `key`: its size's, and in it its delivery's shard; nil for a size
    /// this engine does not count.
    private func store(of key: WindowKey) -> Int? {
        guard let size = config.sizes.firstIndex(where: { $0.size == key.size }) else { return nil }
        return size * shardCount + (shardCount == 1 ? 0 : DeliveryHash.shard(of: key.deliveryId, count: shardCount))
    }

    /// The clock and the horizon move here, once for the whole engine; the shards then count
    /// and settle against the same values, each on its own store, as the runner schedules them;
    /// the memory cap is checked on their merged totals.
    private mutating func process(_ batch: [WindowInput], marks: [SourceMark]?, now: Int64, on runner: some ShardRunner) -> EngineOutput {
        let horizonAtStart = horizon
        let restore = restorePoints
        if let marks {
            for mark in marks {
                clock.observe(
                    partition: mark.source, maxEventTime: mark.watermark, now: now, reportedIdle: mark.idle, delivered: mark.delivered,
                    quietSince: mark.quietSince)
            }
        } else {
            observePartitions(of: batch, now: now)
        }
        let shardCount = shardCount
        let newWatermark = clock.advance(now: now)
        if let newWatermark { horizon = Swift.max(horizon, newWatermark) }
        let settledHorizon = horizon

        let outputs = runOnShards(runner) { [batch] store, shard in
            var out = StoreOutput()
            store.settle(watermark: store.watermark, horizon: horizonAtStart, into: &out)
            // Each hit is read where the batch holds it, through the pointer's addressor
            // (`WindowStore.ingest`).
            batch.withUnsafeBufferPointer { buffer in
                guard let inputs = buffer.baseAddress else { return }
                if shardCount > 1 {
                    // Each shard picks its own deliveries from the shared batch: hashing in
                    // parallel beats a serial routing pass before the shards run.
                    for index in buffer.indices
                    where DeliveryHash.shard(of: inputs[index].event.deliveryId, count: shardCount) == shard % shardCount {
                        store.ingest(inputs + index, restore: restore, into: &out)
                    }
                } else {
                    for index in buffer.indices {
                        store.ingest(inputs + index, restore: restore, into: &out)
                    }
                }
            }
            store.settle(watermark: newWatermark, horizon: settledHorizon, into: &out)
            return out
        }
        var output = merge(outputs)
        if retainedEntries >= config.maxEntries {
            if let eviction = evictForCapacity(on: runner) {
                output.emitted = Self.sortedForEmission(output.emitted + eviction.emitted)
                output.capacityEvictions.append(eviction.report)
            }
        }
        return output
    }

    /// Updates partition clocks. Consecutive hits of a partition are folded before touching the
    /// clock table.
    private mutating func observePartitions(of batch: [WindowInput], now: Int64) {
        guard var partition = batch.first?.partition else { return }
        var maxTime: Int64?
        for input in batch {
            if input.partition != partition {
                clock.observe(partition: partition, maxEventTime: maxTime, now: now)
                partition = input.partition
                maxTime = nil
            }
            if let time = input.event.eventTime { maxTime = Swift.max(maxTime ?? time, time) }
        }
        clock.observe(partition: partition, maxEventTime: maxTime, now: now)
    }

    /// One shard needs no runner: the hot path of a per-partition task stays a plain call.
    private mutating func runOnShards<Value: Sendable>(
        _ runner: some ShardRunner, _ work: @Sendable (inout WindowStore, Int) -> Value
    ) -> [Value] {
        if stores.count == 1 { return [work(&stores[0], 0)] }
        return runner.run(&stores, work)
    }

    private func snapshots() -> [StoreSnapshot] {
        stores.map { $0.snapshot() }
    }

    private mutating func merge(_ outputs: [StoreOutput]) -> EngineOutput {
        var output = EngineOutput()
        var entries = 0
        for (index, out) in outputs.enumerated() {
            output.emitted.append(contentsOf: out.emitted)
            output.windowsClosed += out.windowsClosed
            entries += out.entries
            // Every size sees every hit: the hits are those of one size's stores.
            if index < shardCount { totals.hitsProcessed += out.hitsProcessed }
            totals.hitsCounted += out.hitsCounted
            totals.recordsEmitted += out.emitted.count
            totals.windowsEvicted += out.windowsEvicted
        }
        retainedEntries = entries
        if output.emitted.count > 1 {
            output.emitted = Self.sortedForEmission(output.emitted)
        }
        judgeAcrossSizes(outputs, into: &output)
        totals.tooLateHits += output.tooLate.count
        totals.rereadFinalHits += output.rereadFinal
        return output
    }

    /// A hit is too late, or final in a reread, for the pipeline only when it is for every size:
    /// one that a size still counts is accepted, and its late sizes are reported by size
    /// (`EngineOutput.lateInSomeSizes`). The one judge of what a hit's sizes decide together.
    private func judgeAcrossSizes(_ outputs: [StoreOutput], into output: inout EngineOutput) {
        let sizes = config.sizes.count
        if sizes == 1 {
            for out in outputs {
                output.tooLate.append(contentsOf: out.tooLate)
                output.rereadFinal += out.rereadFinal.count
            }
        } else {
            // Each hit late in some size: the sizes it is late for, and (sizes ascend) the largest
            // size's verdict, the last to let go, for its letter.
            var late: [HitPlace: (sizes: [Int64], hit: LateHit)] = [:]
            var final: [HitPlace: Int] = [:]
            for (index, out) in outputs.enumerated() {
                let size = config.sizes[index / shardCount].size
                for hit in out.tooLate {
                    var entry = late[HitPlace(hit)] ?? ([], hit)
                    entry.sizes.append(size)
                    entry.hit = hit
                    late[HitPlace(hit)] = entry
                }
                for place in out.rereadFinal { final[place, default: 0] += 1 }
            }
            for entry in late.values {
                if entry.sizes.count == sizes {
                    output.tooLate.append(entry.hit)
                } else {
                    for size in entry.sizes { output.lateInSomeSizes[size, default: 0] += 1 }
                }
            }
            output.rereadFinal = final.values.count { $0 == sizes }
        }
        if outputs.count > 1 {
            output.tooLate.sort { ($0.partition, $0.offset, $0.tag) < ($1.partition, $1.offset, $1.tag) }
        }
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
        if a.windowEnd != b.windowEnd { return a.windowEnd < b.windowEnd }
        return a.revision < b.revision
    }

    /// Drops whole window starts, those that would expire first first, until retained entries
    /// are at most 90% of the cap (the margin avoids evicting again on the very next batch).
    /// Expiring first means already-emitted windows go before open ones, and of several sizes
    /// the smaller first; open ones are emitted as they go. The horizon moves past them, so
    /// their later hits are reported too late.
    private mutating func evictForCapacity(on runner: some ShardRunner) -> (emitted: [WindowAggregate], report: CapacityEviction)? {
        var byExpiry: [Int64: Int] = [:]
        var total = 0
        for (index, snapshot) in snapshots().enumerated() {
            let size = stores[index].sized.size
            for (start, count) in snapshot.entriesByWindowStart {
                byExpiry[EventTimeMath.expiry(ofWindowEndingAt: EventTimeMath.add(start, size), retention: config.retention), default: 0] += count
            }
            total += snapshot.entries
        }
        let target = config.maxEntries - config.maxEntries / 10
        var remaining = total
        var cutoff: Int64?
        for expiry in byExpiry.keys.sorted() {
            if remaining <= target { break }
            remaining -= byExpiry[expiry]!
            cutoff = expiry
        }
        guard let cutoff else { return nil }
        horizon = Swift.max(horizon, cutoff)
        let settledHorizon = horizon
        let outputs = runOnShards(runner) { store, _ in
            var out = StoreOutput()
            store.settle(watermark: store.watermark, horizon: settledHorizon, into: &out)
            return out
        }
        var report = CapacityEviction(
            entriesBefore: total, maxEntries: config.maxEntries, entriesFreed: 0, windowsEvicted: 0,
            windowsEmittedEarly: 0, oldestWindowStart: .max, newestWindowStart: .min, newHorizon: settledHorizon)
        for (index, out) in outputs.enumerated() where out.windowsEvicted > 0 {
            report.windowsEvictedBySize[stores[index].sized.size, default: 0] += out.windowsEvicted
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
