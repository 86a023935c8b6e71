import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// Stage 1 of the scaled-out worker: normalizes the raw input, filters by the tracking rule,
/// dead-letters what cannot be counted, and routes each accepted event to the repartition
/// partition of its delivery, so that one aggregate task sees all of a delivery's hits
/// whatever the input's keys.
///
/// It keeps no window state: each partition's commit point is simply what was processed, and
/// the runner commits it only after every record sent is acknowledged, so a crash re-sends
/// some events (the aggregate stage drops them by source position) and loses none.
///
/// Event time crosses the shuffle with the events: each events record ends with the watermark
/// of each of its source partitions, and every `markInterval` the stage tells every
/// repartition partition how far each of its source partitions has got, and which have gone
/// idle. Every record carries the stage's clock when it was written, and no watermark passes
/// it: a hit moves its partition's event time no further than its arrival (its Kafka
/// timestamp) nor than this clock (a producer whose clock runs ahead included). A hit that the
/// aggregate stage may judge `too_late` (`OriginalRule`) carries its original message.
///
/// An owner that begins the group's line of a source partition (it took it without a trackpipe
/// commit) says so in the first record it sends to each repartition partition naming it, and
/// gives no commit point for it until every repartition partition has such a record: so every
/// repartition partition holds where the group's records of every committed source begin, and
/// an aggregate task that reads one from its log start finds out when retention deleted them
/// (docs/scale-out.md, "Lost input").
public struct NormalizeStage: StatelessStage {
    public let name = "normalize"
    public let inputTopic: String
    /// Partitions of the input topic (every aggregate task waits for that many sources).
    public let sourcePartitions: Int
    public let repartitionPartitions: Int32
    public let idleTimeout: Int64
    public let markInterval: Int64
    /// Threads that judge and encode a batch's records at once.
    public let shards: Int
    /// An events record is closed once it holds this many bytes (see `RepartitionRecord`).
    public let batchBytes: Int
    /// An event whose original key and value are larger together than this carries them cut
    /// to this size, as its dead letter would be (see `RepartitionRecord.EventsWriter`).
    public let maxOriginalBytes: Int
    /// Which hits carry their original message.
    package let originals: OriginalRule
    /// The pipeline: recorded in every commit, its group named in every repartition record;
    /// every commit the stage is assigned is judged by it (`GroupIdentity.judge`).
    public let identity: GroupIdentity

    /// The most records one poll should hand this stage: 256 per repartition partition and
    /// lane, from 4,096 (what a stage is given otherwise) to 32,768.
    ///
    /// Why: each lane writes one events record per repartition partition per batch, so a batch
    /// of 4,096 hits over 64 partitions and two lanes made records of about 22 events, and each
    /// record costs librdkafka about what a hit does (producing it here, the broker storing and
    /// acknowledging it, fetching and handing it out behind the shuffle). Batches of 16,384 there
    /// made 3.4 times fewer records: 0.93× the two stages' CPU and 0.86× the broker's
    /// (docs/performance.md). Over 32 partitions and two lanes, 128 a partition and lane made
    /// records of about 84 events; 256 about twice as many (105 records a partition for 400,000
    /// live hits, 57 to 65), at 0.97× the two stages' CPU (median of 9 alternating rounds, 0.77 to
    /// 1.05). Over 64 partitions and two lanes, a cap of 32,768 rather than 16,384 made records
    /// of twice the events, each naming about as many source partitions: 0.96× the two stages'
    /// CPU (12 alternating rounds, 800,000 live hits). A poll takes what librdkafka has queued
    /// (`queued.max.messages.kbytes`), so the cap bounds the records of a batch, and the time
    /// before it is committed, more than its memory.
    public var maxBatch: Int {
        min(32_768, max(4_096, 256 * Int(repartitionPartitions) * shards))
    }

    private let intake: HitIntake
    /// What every record says of where its events come from and how they were routed.
    private let origin: RepartitionRecord.Origin
    private var sources: [Int32: SourceState] = [:]
    /// Wall-clock ms of the last marks sent; nil: send at the next tick.
    private var lastMarks: Int64?
    /// The latest wall-clock ms the stage was given (marks sent before a commit are as of then).
    private var lastNow: Int64 = .min
    private var pending = StageReport()
    private var buffer: [UInt8] = []
    /// The parallel pass's output, kept from batch to batch for its buffers.
    private var lanes: [PreparedLane] = []

    struct SourceState {
        /// How far the partition's event time has got: the latest of its accepted hits' times,
        /// each taken no later than its arrival (its Kafka timestamp) nor than the stage's clock
        /// when it was read, so that a device or producer whose clock runs ahead moves no one's
        /// event time. nil until the first.
        var watermark: Int64?
        /// Wall-clock ms of the last accepted hit, or of the assignment.
        var lastEventAt: Int64
        /// Next offset to process; nil until the first record (then the committed offset holds).
        var processed: Int64?
        /// Which incarnation of the partition its offsets belong to (see `SourceCheckpoint`).
        var epoch: UInt32 = 0
        /// The repartition partitions this owner, which began at the group's start of the
        /// source, has not yet sent a record naming it: the next record to each begins the
        /// group's records of the source there. Empty for an owner that resumed a trackpipe
        /// commit.
        var toBegin: Set<Int32> = []
        /// The last marks this stage sent said the source was idle: a window task that gets none
        /// of its events leaves it out of its watermark until marks say otherwise.
        var markedIdle = false
    }

    package init(
        sourcePartitions: Int, repartitionPartitions: Int32, identity: GroupIdentity, limits: NormalizerLimits, maxFutureSkew: Int64,
        idleTimeout: Int64, markInterval: Int64 = 500, shards: Int = 1, batchBytes: Int = RepartitionRecord.batchBytes,
        maxOriginalBytes: Int = .max, originals: OriginalRule
    ) {
        guard let inputTopic = identity.inputTopic, identity.repartitionTopic != nil else {
            preconditionFailure("the normalize stage reads a named input, only with two stages")
        }
        self.identity = identity
        self.maxOriginalBytes = max(0, maxOriginalBytes)
        self.shards = max(1, shards)
        self.batchBytes = max(1, batchBytes)
        precondition(repartitionPartitions >= 1, "the repartition topic has at least one partition")
        self.inputTopic = inputTopic
        self.sourcePartitions = sourcePartitions
        self.repartitionPartitions = repartitionPartitions
        self.intake = HitIntake(limits: limits, maxFutureSkew: maxFutureSkew)
        self.origin = RepartitionRecord.Origin(
            sourceTopic: inputTopic, sourcePartitions: sourcePartitions, routedPartitions: Int(repartitionPartitions), group: identity.group)
        self.idleTimeout = idleTimeout
        self.markInterval = markInterval
        self.originals = originals
    }

    public mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        lastNow = max(lastNow, now)
        for start in starts where sources[start.partition] == nil {
            var state = try resume(from: start, now: now)
            if beginsTheGroupsLine(start) { state.toBegin = Set(0..<repartitionPartitions) }
            sources[start.partition] = state
        }
        // Tell the aggregate tasks at once that these sources are alive again.
        lastMarks = nil
    }

    public mutating func revoke(_ partitions: [Int32]) {
        for partition in partitions { sources[partition] = nil }
    }

    /// Whether an owner taking over from `start` begins the group's line of the source: no
    /// commit of trackpipe's normalize stage to go on from (none at all, another tool's or an
    /// offset reset, or one beyond the log of a topic recreated since). Any other owner resumes
    /// a commit that was made only once an owner that began the line had sent every
    /// repartition partition its beginning.
    func beginsTheGroupsLine(_ start: PartitionStart) -> Bool {
        start.committedOffset == nil || start.commitIsBeyondTheLog || SourceCheckpoint(decoding: start.metadata, group: identity.group) == nil
    }

    /// A partition's state from what its previous owner committed, if the judge lets the stage
    /// go on from it. A commit beyond the log means the topic was recreated: a new epoch, and
    /// the watermark starts over.
    func resume(from start: PartitionStart, now: Int64) throws -> SourceState {
        var state = SourceState(watermark: nil, lastEventAt: now, processed: nil)
        guard start.committedOffset != nil else { return state }
        try identity.judge(.commit(start, topic: inputTopic)).get()
        let previous = SourceCheckpoint(decoding: start.metadata, group: identity.group)
        if start.commitIsBeyondTheLog {
            state.epoch = (previous?.epoch ?? 0) &+ 1
        } else {
            state.epoch = previous?.epoch ?? 0
            // Never past this stage's clock: a mark is at or below the clock of its record.
            state.watermark = previous?.progress.map { min($0, now) }
        }
        return state
    }

    public mutating func process(_ records: [PolledRecord], now: Int64, into sink: inout some RecordSink) throws {
        lastNow = max(lastNow, now)
        guard !records.isEmpty else { return }
        // Judging and encoding each record needs nothing but the record: done on `shards`
        // threads over contiguous chunks, each lane writing its events straight into records of
        // its own. What depends on order (each source's watermark, the sends) follows on this
        // thread. A lane's records for a partition follow the previous lane's, so that each
        // source's events reach each partition in offset order.
        let context = LaneContext(
            intake: intake, origin: origin, repartitionPartitions: repartitionPartitions, batchBytes: batchBytes,
            maxOriginalBytes: maxOriginalBytes, uncarriedFrom: originals.firstUncarried(writerClock: now), writerClock: now,
            epochs: sources.mapValues(\.epoch))
        let laneCount = Self.prepare(records, context: context, lanes: records.count >= 512 ? shards : 1, into: &lanes)
        // A source the last marks called idle that delivers again: every repartition partition
        // hears that it is active before any record of this batch. A task that gets none of its
        // events would otherwise still leave it out, and the batch's events of other sources
        // would move that task's watermark past it until the next marks.
        if sources.values.contains(where: \.markedIdle), case let returning = returningSources(laneCount: laneCount), !returning.isEmpty {
            try sendMarks(now: now, delivering: returning, into: &sink)
        }
        pending.accounting.consumed += records.count
        for lane in 0..<laneCount {
            settleWriters(of: lane)
            for run in lanes[lane].runs {
                var source = sources[run.partition] ?? SourceState(watermark: nil, lastEventAt: now)
                source.processed = run.next
                source.watermark = EventTimeMath.latest(source.watermark, run.watermark)
                if run.accepted { source.lastEventAt = now }
                sources[run.partition] = source
            }
            pending.accounting.accepted += lanes[lane].accepted
            pending.accounting.filtered.add(lanes[lane].filtered)
            for (index, reason, detail) in lanes[lane].rejections {
                let record = records[index]
                pending.accounting.deadLettered[reason] += 1
                let letter = DeadLetter(reason: reason, detail: detail, sourceTopic: inputTopic, sourcePartition: record.partition, sourceOffset: record.offset)
                try sink.send(InputDeadLetter(letter: letter, record: record))
            }
        }
        try sendRecords(of: laneCount, into: &sink)
    }

    /// Before the sources take a lane's runs: the events records the lane wrote carry, for each
    /// source, the watermark it had reached before the lane, raised by the lane's own hits up to
    /// the record's last of the source; and the first record to a partition that the source
    /// must begin there says so (lanes and their writers are in input order).
    private mutating func settleWriters(of lane: Int) {
        // Taken out of the lane while they are changed, so that the sources can be read.
        var writers: [RepartitionRecord.EventsWriter] = []
        swap(&writers, &lanes[lane].writers)
        defer { swap(&writers, &lanes[lane].writers) }
        for writer in 0..<lanes[lane].used {
            let partition = writers[writer].partition
            writers[writer].settleSources { source, watermark, begins in
                guard let state = sources[source] else { return }
                watermark = EventTimeMath.latest(state.watermark, watermark)
                if !state.toBegin.isEmpty, sources[source]?.toBegin.remove(partition) != nil { begins = true }
            }
        }
    }

    /// Closes the events records the first `laneCount` lanes wrote, and sends them, lane after
    /// lane: each source's events reach each partition in offset order.
    private mutating func sendRecords(of laneCount: Int, into sink: inout some RecordSink) throws {
        for lane in 0..<laneCount {
            for writer in 0..<lanes[lane].used {
                lanes[lane].writers[writer].finish()
                try sink.send(lanes[lane].writers[writer].record)
            }
        }
    }

    /// The sources the last marks called idle that have an accepted hit in the batch.
    private func returningSources(laneCount: Int) -> Set<Int32> {
        var returning: Set<Int32> = []
        for lane in 0..<laneCount {
            for run in lanes[lane].runs where run.accepted && sources[run.partition]?.markedIdle == true { returning.insert(run.partition) }
        }
        return returning
    }

    public mutating func tick(now: Int64, into sink: inout some RecordSink) throws {
        lastNow = max(lastNow, now)
        guard !sources.isEmpty, now - (lastMarks ?? .min / 2) >= markInterval else { return }
        try sendMarks(now: now, into: &sink)
    }

    public mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        lastNow = max(lastNow, now)
        if !sources.isEmpty { try sendMarks(now: now, into: &sink) }
    }

    /// Before a commit: a source whose beginning some repartition partition has not received yet
    /// (its owner took it and commits before its first marks) sends its marks first, so that
    /// its commit point can be given. The runner commits once they are acknowledged.
    public mutating func prepareCommit(into sink: inout some RecordSink) throws {
        guard sources.values.contains(where: { !$0.toBegin.isEmpty }) else { return }
        try sendMarks(now: lastNow, into: &sink)
    }

    public mutating func readToEnd(_ partition: Int32, end: Int64) {
        guard var source = sources[partition], (source.processed ?? .min) < end else { return }
        source.processed = end
        sources[partition] = source
    }

    /// The marks of every owned source, to every repartition partition: a partition that gets
    /// none of a source's events still learns its event time. A partition that has no record
    /// of a source from this owner yet, which began the group's line of it, is told that this
    /// one begins the group's records of it there. Sources in `delivering` are about to send
    /// hits: they are marked active, at the event time they had reached before.
    private mutating func sendMarks(now: Int64, delivering: Set<Int32> = [], into sink: inout some RecordSink) throws {
        lastMarks = now
        let owned = sources.sorted { $0.key < $1.key }
        let marks = owned.map { partition, state in
            let idle = now - state.lastEventAt >= idleTimeout && !delivering.contains(partition)
            return SourceMark(
                source: partition, watermark: state.watermark, idle: idle, quietSince: idle ? min(state.lastEventAt, now) : nil)
        }
        for mark in marks { sources[mark.source]?.markedIdle = mark.idle }
        let epochs = owned.map(\.value.epoch)
        let beginning = owned.contains { !$0.value.toBegin.isEmpty }
        if !beginning { RepartitionRecord.encodeMarks(marks, epochs: epochs, origin: origin, writerClock: now, into: &buffer) }
        for partition in 0..<repartitionPartitions {
            if beginning {
                RepartitionRecord.encodeMarks(
                    marks, epochs: epochs, begins: owned.map { $0.value.toBegin.contains(partition) }, origin: origin, writerClock: now,
                    into: &buffer)
            }
            try sink.send(RepartitionMarks(partition: partition, bytes: buffer, timestamp: now))
        }
        if beginning {
            for partition in sources.keys { sources[partition]?.toBegin = [] }
        }
    }

    public func commitPoints() -> [Int32: CommitPoint] {
        var points: [Int32: CommitPoint] = [:]
        for (partition, state) in sources {
            // Not before every repartition partition has the beginning of the group's records of
            // the source (see the type's comment): `prepareCommit` sends what is missing.
            guard state.toBegin.isEmpty else { continue }
            if let processed = state.processed {
                points[partition] = CommitPoint(
                    offset: processed, metadata: SourceCheckpoint(epoch: state.epoch, progress: state.watermark, identity: identity).encoded)
            }
        }
        return points
    }

    public mutating func drainReport() -> StageReport { pending.drain() }

    public func gauges() -> StageGauges {
        var gauges = StageGauges()
        gauges.watermark = sources.values.compactMap(\.watermark).min()
        return gauges
    }
}
