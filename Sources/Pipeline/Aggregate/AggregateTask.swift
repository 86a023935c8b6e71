import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// The window state of one partition of the aggregate stage, as Kafka Streams keeps a task per
/// partition: its own engine (watermark, eviction horizon, restore point), its own duplicate
/// filter, its own offsets and its own changelog. Partitions hold disjoint deliveries (the input
/// is keyed by delivery), so its state moves alone on a rebalance, and one partition's
/// checkpoint can never make another's reread hits late.
///
/// It reads its windows back from its changelog when it is assigned, commits at its processed
/// mark, and holds its aggregate records back until the state they carry is written (see
/// `AggregateStage.prepareCommit`; the stage holds its dead letters as long), so that no
/// restart can step a key back.
struct AggregateTask: WindowTask {
    let partition: Int32
    var engine: WindowEngine
    /// The engine's clock when the task was created: this process's wall clock, or behind the
    /// shuffle the first writer's clock it read.
    private(set) var createdAt: Int64
    /// Behind the shuffle, the newest writer's clock read (`EngineClock.writers`); nil before
    /// the first record, and for a task of raw hits, whose engine runs on the wall clock.
    private(set) var writersClock: Int64?
    /// `writersClock` before the batch being counted: what a late hit's letter compares with.
    private(set) var clockAtBatchStart: Int64?
    /// Restoring, rereading, settling or running: decides what a record, an emission and a
    /// commit do, and when the engine lets go of what judged the reread.
    private(set) var phase: TaskPhase
    var offsets = PartitionOffsets()
    /// The sources of event time and the duplicate filter, as the input has them.
    var sources: TaskSources
    var changelog: TaskChangelog
    /// Records waiting for the next commit, latest per key.
    private var held: [WindowKey: WindowAggregate] = [:]
    /// `held` has a window's first record: a window closed and nobody can read it until the
    /// next commit, so the runner commits early for it.
    private(set) var holdsClosedWindow = false
    /// What a task without a commit checks where it begins reading; nil with a commit.
    private var firstRead: FirstRead?

    /// The pipeline the task counts for, recorded in every checkpoint it commits.
    let identity: GroupIdentity

    /// `topic`: the topic the task reads (the repartition topic, or one stage's input), as what
    /// its first read finds names it.
    init(start: PartitionStart, topic: String, config: WindowConfig, sources: TaskSources, identity: GroupIdentity, now: Int64) {
        partition = start.partition
        engine = WindowEngine(config: config, exportsChanges: true, clock: sources.clock)
        createdAt = now
        self.sources = sources
        self.identity = identity
        let begin = TaskStart(start, checkpoint: Checkpoint(decoding: start.metadata, group: identity.group))
        changelog = TaskChangelog(identity: identity, partition: partition)
        changelog.beginRestore(begin.lineage)
        let own = sources.initial(partition: partition)
        if !own.isEmpty { engine.assign(partitions: own, now: now) }
        if let horizon = begin.horizonBeyondTheLog {
            // Nothing of the recreated topic is below the checkpoint's offsets: no record is a reread.
            engine.restore(partition: partition, processedMark: 0, evictedBefore: horizon)
        }
        if let floors = begin.floors { self.sources.restore(floors) }
        offsets.committed = begin.committed
        offsets.metadata = begin.metadata
        phase = .initial(start: begin)
        if begin.committed == nil {
            firstRead = FirstRead(
                checksSources: sources.namesSources && begin.floors == nil, partition: TopicPartition(topic: topic, partition: partition))
        }
    }

    /// The state is being read back from the changelog: no record may be processed yet.
    var isRestoring: Bool { phase.isRestoring }

    // MARK: Reading the state back

    mutating func restoreState(_ records: [StateRecord]) {
        for record in records { changelog.apply(offset: record.offset, key: record.key, value: record.value) }
    }

    /// The changelog is read: the windows go back into the engine, the reread runs to where the
    /// state was written, and windows whose last emission may be lost are sent again with the
    /// first commit. Returns what was read, for the log.
    mutating func stateRestored(now: Int64) throws -> TaskChangelog.Restored {
        guard case .restoring(let committedChangelog) = phase else { return TaskChangelog.Restored() }
        let restored = changelog.finishRestore(committedChangelog: committedChangelog)
        try Self.check(
            restored, partition: partition, committed: offsets.committed, committedChangelog: committedChangelog, end: changelog.end)
        // Windows past the horizon the state records were evicted in the interval its last
        // write covered: they are read back only for their last records and for the reread.
        let evictedBefore = restored.task?.evictedBefore ?? .min
        let retention = engine.config.retention
        let isFinal = { (window: WindowKey) in EventTimeMath.expiry(ofWindowEndingAt: window.windowEnd, retention: retention) <= evictedBefore }
        let finals = restored.windows.filter { isFinal($0.key) }
        engine.restore(restored.windows.filter { !isFinal($0.key) })
        engine.finishRestore()
        let countedPast = restored.task.flatMap { resume(from: $0, windows: restored.windows, finals: finals.map(\.key), now: now) }
        // Windows whose last emission may not have reached the output go out again with the
        // first commit, as the state read back has them (later emissions of the same window
        // carry higher revisions and win).
        let unconfirmed = Set(restored.unconfirmed)
        for final in finals where unconfirmed.contains(final.key) { Self.keepLatest(final.record, in: &held) }
        for record in engine.currentRecords(restored.unconfirmed.filter { !isFinal($0) }) { Self.keepLatest(record, in: &held) }
        let processed = offsets.processedMark ?? offsets.committed ?? 0
        if phase.handle(.stateRead(belowMark: offsets.isRereading, countedPast: countedPast, processed: processed)) {
            engine.rereadFinished(partition: partition)
        }
        return restored
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
            if let committed, task.processedMark < committed {
                throw PipelineError.kafka(
                    "the changelog of partition \(partition) holds state as of offset \(task.processedMark), before the \(committed) the group committed: it lost records (retention, or the topic recreated). Stop every instance, then restore the state topic or start under a new --group")
            }
        } else if restored.records == 0, committedChangelog > 0 {
            throw PipelineError.kafka(
                "the changelog of partition \(partition) is empty, but its last commit recorded state in it: the state topic was deleted or recreated. Stop every instance, then restore the state topic or start under a new --group")
        }
    }

    /// Goes on from the task record read back: the reread up to its mark is judged by the
    /// windows read back (what they counted, what was evicted), not counted again. Returns the
    /// input offset past the task record's mark below which windows read back may hold hits (a
    /// state write cut short by a crash kept their heads), if there is one.
    private mutating func resume(
        from task: ChangelogRecord.TaskState, windows: [WindowState], finals: [WindowKey], now: Int64
    ) -> Int64? {
        let counted = Dictionary(windows.map { ($0.key, $0.countedThrough) }, uniquingKeysWith: max)
        let countedMark = RecordPosition.offsetPast(windows.map(\.countedThrough).max() ?? .min)
        engine.restore(
            partition: partition, processedMark: task.processedMark, evictedBefore: task.evictedBefore, counted: counted,
            countedMark: countedMark)
        if sources.resumesWatermark, let watermark = task.watermark {
            // Without the previous owner's event time, windows read back would wait for the
            // next hit however long the input stays quiet.
            engine.resume(partition: partition, watermark: watermark, now: now)
        }
        offsets.previousMark = task.processedMark
        firstRead?.restored(mark: task.processedMark)
        changelog.evictedOnRestore(finals, mark: task.processedMark)
        return countedMark > task.processedMark ? countedMark : nil
    }

    // MARK: What goes out

    /// Emissions are held until the next commit. A reread over windows read back from the
    /// changelog counts nothing they hold, so what it emits is never behind what the previous
    /// owner sent; it is held like any emission, and goes out with the commit whose state write
    /// records it as emitted.
    private mutating func hold(_ output: EngineOutput) {
        for record in output.emitted { Self.keepLatest(record, in: &held) }
        if output.windowsClosed > 0 { holdsClosedWindow = true }
    }

    private static func keepLatest(_ record: WindowAggregate, in records: inout [WindowKey: WindowAggregate]) {
        let key = record.key
        if let kept = records[key], kept.revision > record.revision { return }
        records[key] = record
    }

    /// Lets time pass: what the engine emits is held until the next commit. Behind the shuffle
    /// time passes only as records bring the writers' clocks, so a tick changes nothing there.
    mutating func advance(now: Int64) -> [CapacityEviction] {
        guard let clock = engineClock(now: now) else { return [] }
        let output = engine.advance(now: clock)
        hold(output)
        return output.capacityEvictions
    }

    /// The `now` the engine is given: the wall clock, or behind the shuffle the newest writer's
    /// clock read (nil before the first record).
    private func engineClock(now: Int64) -> Int64? {
        sources.clock == .wall ? now : writersClock
    }

    /// Emits every window now, as a bounded run ends: held until the last commit.
    mutating func flushAll() {
        hold(engine.flushAll())
    }

    /// The changelog records for what changed since the last commit: each window's change, or
    /// its whole state where the changelog folds its records into one write.
    mutating func changelogEntries() -> [ChangelogRecord.Entry] {
        guard !phase.isRestoring, let processed = offsets.processedMark ?? offsets.committed else { return [] }
        let task = ChangelogRecord.TaskState(
            processedMark: max(processed, offsets.previousMark ?? processed), evictedBefore: engine.evictionHorizon,
            watermark: engine.watermark)
        let changes = engine.exportChanges()
        let merged = changelog.merges(for: changes)
        return changelog.entries(for: changes, complete: merged.isEmpty ? [] : engine.states(of: merged), task: task)
    }

    /// The offsets are committed at the commit point.
    mutating func committed() {
        if let point = commitPoint() { changelog.committed(through: point.offset) }
    }

    /// The state written is acknowledged (the changelog ends at `end`): the held records go out.
    mutating func releaseHeld(changelogEnd end: Int64?) -> [WindowAggregate] {
        changelog.released(end: end)
        defer {
            // Emptied, not freed: made anew, it grew again by rehashing as the next commit's
            // records came (9 instructions a hit, one stage, callgrind).
            held.removeAll(keepingCapacity: true)
            holdsClosedWindow = false
        }
        return WindowEngine.sortedForEmission(Array(held.values))
    }

    // MARK: Counting

    /// Counts what an input decoded from this task's records, the first of which is at
    /// `firstOffset` and the last at `lastOffset`; what the engine emits is held until the next
    /// commit. Runs on a worker thread, touching only this task.
    mutating func count(_ batch: DecodedBatch, from firstOffset: Int64, through lastOffset: Int64, now: Int64) -> TaskResult {
        if let misrouted = batch.misrouted { return TaskResult(misrouted: misrouted) }
        if let refusal = batch.refusal { return TaskResult(refusal: refusal) }
        offsets.processedMark = lastOffset + 1
        let caughtUp = phase.handle(.processed(belowMark: offsets.isRereading, processed: lastOffset + 1))
        clockAtBatchStart = writersClock
        if sources.clock == .writers, let clock = batch.writerClock {
            // The clock of the task begins with the first record it reads.
            if writersClock == nil { createdAt = clock }
            writersClock = max(writersClock ?? clock, clock)
        }
        // Without a writer's clock yet, the batch holds no readable record: no source, no mark,
        // nothing for the engine to time.
        var (result, output) = countBatch(
            batch, range: nil, previousMark: offsets.previousMark, now: engineClock(now: now) ?? createdAt, on: ShardsInTurn())
        result.report.unread += firstRead?.check(batch, first: firstOffset) ?? []
        hold(output)
        if caughtUp { engine.rereadFinished(partition: partition) }
        return result
    }

    // MARK: Committing

    /// The offset and checkpoint to commit: the processed mark, since the windows are in the
    /// changelog.
    func commitPoint() -> CommitPoint? {
        guard !phase.isRestoring, let processed = offsets.processedMark else { return nil }
        let checkpoint = Checkpoint(
            evictedBefore: engine.evictionHorizon, processedMark: processed, seen: sources.checkpoint, changelog: changelog.end ?? 0,
            changelogSince: changelog.lineage, identity: identity)
        return CommitPoint(offset: processed, metadata: checkpoint.encoded)
    }
}
