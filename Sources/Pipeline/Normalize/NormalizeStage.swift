import Dispatch
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
/// idle.
///
/// An owner that begins the group's line of a source partition (it took it without a trackpipe
/// commit) says so in the first record it sends to each repartition partition naming it, and
/// gives no commit point for it until every repartition partition has such a record: so every
/// repartition partition holds where the group's records of every committed source begin, and
/// an aggregate task that reads one from its log start finds out when retention deleted them
/// (docs/scale-out.md, "Lost input").
public struct NormalizeStage: Stage {
    public let name = "normalize"
    public let inputTopic: String
    /// Partitions of the input topic (every aggregate task waits for that many sources).
    public let sourcePartitions: Int
    public let repartitionPartitions: Int32
    public let idleTimeout: Int64
    public let markInterval: Int64
    /// Threads that judge and encode a batch's records at once.
    public let parallelism: Int
    /// An events record is sent once it holds this many bytes (see `RepartitionRecord`).
    public let batchBytes: Int
    /// An event whose original key and value are larger together than this carries them cut
    /// to this size, as its dead letter would be (see `RepartitionRecord.writeEvent`).
    public let maxOriginalBytes: Int

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
    /// Per repartition partition, the events of the batch in hand.
    private var batches: [RepartitionRecord.EventBatch]
    /// The parallel pass's output, kept from batch to batch for its buffers.
    private var lanes: [PreparedLane] = []

    struct SourceState {
        /// How far the partition's event time has got: the latest of its accepted hits' times,
        /// each taken no later than its arrival (its Kafka timestamp), so that a device whose
        /// clock runs ahead moves no one's event time. nil until the first.
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
    }

    public init(
        inputTopic: String, sourcePartitions: Int, repartitionPartitions: Int32, limits: NormalizerLimits,
        maxFutureSkew: Int64, idleTimeout: Int64, markInterval: Int64 = 500, parallelism: Int = 1,
        batchBytes: Int = RepartitionRecord.batchBytes, maxOriginalBytes: Int = .max
    ) {
        self.maxOriginalBytes = max(0, maxOriginalBytes)
        self.parallelism = max(1, parallelism)
        self.batchBytes = max(1, batchBytes)
        precondition(repartitionPartitions >= 1, "the repartition topic has at least one partition")
        self.inputTopic = inputTopic
        self.sourcePartitions = sourcePartitions
        self.repartitionPartitions = repartitionPartitions
        self.intake = HitIntake(limits: limits, maxFutureSkew: maxFutureSkew)
        self.origin = RepartitionRecord.Origin(
            sourceTopic: inputTopic, sourcePartitions: sourcePartitions, routedPartitions: Int(repartitionPartitions))
        self.idleTimeout = idleTimeout
        self.markInterval = markInterval
        self.batches = Array(repeating: RepartitionRecord.EventBatch(), count: Int(repartitionPartitions))
    }

    public mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        lastNow = max(lastNow, now)
        for start in starts where sources[start.partition] == nil {
            var state = try Self.resume(from: start, topic: inputTopic, now: now)
            if Self.beginsTheGroupsLine(start) { state.toBegin = Set(0..<repartitionPartitions) }
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
    static func beginsTheGroupsLine(_ start: PartitionStart) -> Bool {
        start.committedOffset == nil || start.commitIsBeyondTheLog || SourceCheckpoint(decoding: start.metadata) == nil
    }

    /// A partition's state from what its previous owner committed. A commit beyond the log means
    /// the topic was recreated: a new epoch, and the watermark starts over. A commit carrying a
    /// window checkpoint (of this version of trackpipe or another) was made by the one-stage
    /// mode on this group: refused, since resuming from it would skip hits whose windows were
    /// still open.
    static func resume(from start: PartitionStart, topic: String, now: Int64) throws -> SourceState {
        var state = SourceState(watermark: nil, lastEventAt: now, processed: nil)
        guard start.committedOffset != nil else { return state }
        if Checkpoint(decoding: start.metadata) != nil || Checkpoint.otherVersion(of: start.metadata) != nil {
            throw PipelineError.groupMismatch(
                "the group's commit on \(topic)[\(start.partition)] carries a window checkpoint: the group was last run with --input-keyed-by-delivery (one stage), whose open windows are in that mode's state, where two stages do not look. Resuming two stages from it would count partial windows. Run two stages under a --group of their own (a new group counts the input from its beginning), or keep --input-keyed-by-delivery")
        }
        let previous = SourceCheckpoint(decoding: start.metadata)
        if start.commitIsBeyondTheLog {
            state.epoch = (previous?.epoch ?? 0) &+ 1
        } else {
            state.epoch = previous?.epoch ?? 0
            state.watermark = previous?.progress
        }
        return state
    }

    public mutating func process(_ records: [PolledRecord], now: Int64, into sink: inout some RecordSink) throws {
        lastNow = max(lastNow, now)
        guard !records.isEmpty else { return }
        // Judging and encoding each record needs nothing but the record: done on `parallelism`
        // threads over contiguous chunks. What depends on order (each source's watermark, the
        // sends) follows on this thread.
        let laneCount = Self.prepare(
            records, intake: intake, repartitionPartitions: repartitionPartitions, maxOriginalBytes: maxOriginalBytes,
            lanes: records.count >= 512 ? parallelism : 1, into: &lanes)
        var index = 0
        // Records come in runs of one partition: its source state is taken out once per run.
        var partition = records[0].partition
        var source = sources[partition] ?? SourceState(watermark: nil, lastEventAt: now)
        for lane in 0..<laneCount {
            for item in lanes[lane].items {
                defer { index += 1 }
                let record = records[index]
                if record.partition != partition {
                    sources[partition] = source
                    partition = record.partition
                    source = sources[partition] ?? SourceState(watermark: nil, lastEventAt: now)
                }
                pending.accounting.consumed += 1
                source.processed = record.offset + 1
                switch item {
                case .event(let eventTime, let target, let bytes):
                    let watermark = EventTimeMath.latest(source.watermark, min(eventTime, record.timestamp ?? eventTime))
                    source.watermark = watermark
                    source.lastEventAt = now
                    let epoch = source.epoch
                    let origin = self.origin
                    let begins = !source.toBegin.isEmpty && source.toBegin.remove(target) != nil
                    lanes[lane].arena.withUnsafeBytes { arena in
                        batches[Int(target)].append(
                            encodedEvent: UnsafeRawBufferPointer(rebasing: arena[bytes]), timestamp: record.timestamp, origin: origin,
                            sourcePartition: record.partition, epoch: epoch, watermark: watermark, begins: begins)
                    }
                    if batches[Int(target)].bytes.count >= batchBytes {
                        try send(batchOf: target, into: &sink)
                    }
                    pending.accounting.accepted += 1
                case .filtered(let reason):
                    pending.accounting.filtered[reason.rawValue, default: 0] += 1
                case .rejected(let reason, let detail):
                    pending.accounting.deadLettered[reason, default: 0] += 1
                    let letter = DeadLetter(
                        reason: reason, detail: detail, sourceTopic: inputTopic, sourcePartition: record.partition,
                        sourceOffset: record.offset)
                    try sink.send(
                        .deadLetter, partition: nil, key: record.key, value: record.value, headers: letter.headers,
                        timestamp: record.timestamp)
                }
            }
        }
        sources[partition] = source
        for partition in batches.indices where !batches[partition].isEmpty {
            try send(batchOf: Int32(partition), into: &sink)
        }
    }

    private mutating func send(batchOf partition: Int32, into sink: inout some RecordSink) throws {
        try batches[Int(partition)].take { value, timestamp in
            try sink.send(.repartition, partition: partition, key: nil, value: value, headers: [], timestamp: timestamp)
        }
    }

    /// One record, judged and (if accepted) encoded into its lane's arena at `bytes`.
    enum Prepared {
        case event(eventTime: Int64, partition: Int32, bytes: Range<Int>)
        case filtered(FilterReason)
        case rejected(reason: String, detail: String)
    }

    /// A contiguous chunk of a batch, prepared: `items` in record order, bytes in `arena` (what
    /// lies beyond the last item's bytes is scratch). A stage keeps its lanes from batch to batch
    /// and only empties them, so that their buffers are allocated once rather than for every
    /// batch (about 650 KB a lane, every batch, before); an arena that an unusual batch of large
    /// messages grew beyond `retainedArenaBytes` is let go rather than held.
    struct PreparedLane {
        var items: [Prepared] = []
        var arena: [UInt8] = []
    }

    /// The most bytes a lane's arena keeps from one batch to the next: a batch of typical hits
    /// (a few hundred bytes each) needs well under this.
    static let retainedArenaBytes = 8 << 20

    /// Judges and encodes `records` on up to `lanes` threads, lane `i` into `prepared[i]`;
    /// returns how many lanes hold this batch (the first ones).
    static func prepare(
        _ records: [PolledRecord], intake: HitIntake, repartitionPartitions: Int32, maxOriginalBytes: Int, lanes: Int,
        into prepared: inout [PreparedLane]
    ) -> Int {
        let lanes = max(1, min(lanes, records.count))
        if prepared.count < lanes { prepared += Array(repeating: PreparedLane(), count: lanes - prepared.count) }
        let chunk = (records.count + lanes - 1) / lanes
        prepared.withUnsafeMutableBufferPointer { slots in
            let box = UnsafeSendable(slots)
            let work: @Sendable (Int) -> Void = { lane in
                prepareChunk(
                    records, min(records.count, lane * chunk)..<min(records.count, (lane + 1) * chunk), intake: intake,
                    repartitionPartitions: repartitionPartitions, maxOriginalBytes: maxOriginalBytes, into: &box.value[lane])
            }
            if lanes == 1 { work(0) } else { DispatchQueue.concurrentPerform(iterations: lanes, execute: work) }
        }
        return lanes
    }

    private static func prepareChunk(
        _ records: [PolledRecord], _ range: Range<Int>, intake: HitIntake, repartitionPartitions: Int32, maxOriginalBytes: Int,
        into prepared: inout PreparedLane
    ) {
        prepared.items.removeAll(keepingCapacity: true)
        prepared.items.reserveCapacity(range.count)
        if prepared.arena.count > retainedArenaBytes { prepared.arena = [] }
        // The arena keeps its bytes from batch to batch; events are written from its start.
        var used = 0
        for index in range {
            let record = records[index]
            switch intake.take(record) {
            case .accepted(let event, let eventTime):
                let start = used
                used = RepartitionRecord.writeEvent(
                    event, eventTime: eventTime, sourcePartition: record.partition, sourceOffset: record.offset,
                    originalTimestamp: record.timestamp, originalKey: record.key, originalValue: record.value,
                    maxOriginalBytes: maxOriginalBytes, into: &prepared.arena, at: start)
                prepared.items.append(
                    .event(
                        eventTime: eventTime,
                        partition: DeliveryHash.partition(of: event.deliveryId, count: repartitionPartitions),
                        bytes: start..<used))
            case .filtered(let reason):
                prepared.items.append(.filtered(reason))
            case .rejected(let reason, let detail):
                prepared.items.append(.rejected(reason: reason, detail: detail))
            }
        }
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

    /// The marks of every owned source, to every repartition partition: a partition that gets
    /// none of a source's events still learns its event time. A partition that has no record
    /// of a source from this owner yet, which began the group's line of it, is told that this
    /// one begins the group's records of it there.
    private mutating func sendMarks(now: Int64, into sink: inout some RecordSink) throws {
        lastMarks = now
        let owned = sources.sorted { $0.key < $1.key }
        let marks = owned.map { partition, state in
            SourceMark(source: partition, watermark: state.watermark, idle: now - state.lastEventAt >= idleTimeout)
        }
        let epochs = owned.map(\.value.epoch)
        let beginning = owned.contains { !$0.value.toBegin.isEmpty }
        if !beginning { RepartitionRecord.encodeMarks(marks, epochs: epochs, origin: origin, into: &buffer) }
        for partition in 0..<repartitionPartitions {
            if beginning {
                RepartitionRecord.encodeMarks(
                    marks, epochs: epochs, begins: owned.map { $0.value.toBegin.contains(partition) }, origin: origin, into: &buffer)
            }
            try buffer.withUnsafeBytes { value in
                try sink.send(.repartition, partition: partition, key: nil, value: value, headers: [], timestamp: now)
            }
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
                    offset: processed, metadata: SourceCheckpoint(epoch: state.epoch, progress: state.watermark).encoded)
            }
        }
        return points
    }

    public mutating func drainReport() -> StageReport {
        defer { pending = StageReport() }
        return pending
    }

    public func gauges() -> StageGauges {
        var gauges = StageGauges()
        gauges.watermark = sources.values.compactMap(\.watermark).min()
        return gauges
    }
}
