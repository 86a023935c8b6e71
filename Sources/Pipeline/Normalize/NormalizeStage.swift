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
    /// What the group is fixed to: recorded in every commit, and a commit that records another
    /// is refused (`GroupIdentity`).
    public let identity: GroupIdentity
    /// The group (`--group`), named in every repartition record.
    public let group: String

    private let intake: HitIntake
    /// What every record says of where its events come from and how they were routed.
    private let origin: RepartitionRecord.Origin
    private var sources: [Int32: SourceState] = [:]
    /// Wall-clock ms of the last marks sent; nil: send at the next tick.
    private var lastMarks: Int64?
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
    }

    public init(
        inputTopic: String, sourcePartitions: Int, repartitionPartitions: Int32, identity: GroupIdentity, group: String,
        limits: NormalizerLimits, maxFutureSkew: Int64, idleTimeout: Int64, markInterval: Int64 = 500, parallelism: Int = 1,
        batchBytes: Int = RepartitionRecord.batchBytes, maxOriginalBytes: Int = .max
    ) {
        precondition(identity.repartitionTopic != nil, "the normalize stage runs only with two stages")
        self.identity = identity
        self.group = group
        self.maxOriginalBytes = max(0, maxOriginalBytes)
        self.parallelism = max(1, parallelism)
        self.batchBytes = max(1, batchBytes)
        precondition(repartitionPartitions >= 1, "the repartition topic has at least one partition")
        self.inputTopic = inputTopic
        self.sourcePartitions = sourcePartitions
        self.repartitionPartitions = repartitionPartitions
        self.intake = HitIntake(limits: limits, maxFutureSkew: maxFutureSkew)
        self.origin = RepartitionRecord.Origin(
            sourceTopic: inputTopic, sourcePartitions: sourcePartitions, routedPartitions: Int(repartitionPartitions), group: group)
        self.idleTimeout = idleTimeout
        self.markInterval = markInterval
        self.batches = Array(repeating: RepartitionRecord.EventBatch(), count: Int(repartitionPartitions))
    }

    public mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        for start in starts where sources[start.partition] == nil {
            sources[start.partition] = try Self.resume(from: start, topic: inputTopic, identity: identity, group: group, now: now)
        }
        // Tell the aggregate tasks at once that these sources are alive again.
        lastMarks = nil
    }

    public mutating func revoke(_ partitions: [Int32]) {
        for partition in partitions { sources[partition] = nil }
    }

    /// A partition's state from what its previous owner committed. A commit beyond the log means
    /// the topic was recreated: a new epoch, and the watermark starts over. A commit that records
    /// another identity than the group's `identity` was made by another pipeline under the
    /// group's name (a window checkpoint included: the one-stage mode, whose open windows are in
    /// that mode's state), and one of another version of trackpipe cannot be told: both refused,
    /// since going on from them would skip hits the other pipeline has not counted. Another
    /// tool's commit, or an offset reset, is taken: resuming elsewhere skips or repeats input,
    /// which the operator chose, and repeats are dropped downstream.
    static func resume(from start: PartitionStart, topic: String, identity: GroupIdentity, group: String, now: Int64) throws -> SourceState {
        var state = SourceState(watermark: nil, lastEventAt: now, processed: nil)
        guard start.committedOffset != nil else { return state }
        if let recorded = GroupIdentity.recorded(in: start.metadata),
            let refusal = recorded.refusal(group: group, asked: identity, evidence: "its commit on \(topic)[\(start.partition)]", given: [:])
        {
            throw refusal
        }
        if Checkpoint(decoding: start.metadata) != nil {
            throw PipelineError.groupMismatch(
                "the group's commit on \(topic)[\(start.partition)] carries a window checkpoint, whose open windows are in a window stage's state, where the normalize stage does not look. Resuming from it would skip hits whose windows were still open. Run two stages under a --group of their own (a new group counts the input from its beginning)")
        }
        if let tag = Checkpoint.otherVersion(of: start.metadata) ?? SourceCheckpoint.otherVersion(of: start.metadata) {
            throw PipelineError.groupMismatch(
                "the group's commit on \(topic)[\(start.partition)] was made by another version of trackpipe, whose checkpoint (\(tag)) this one does not read (it reads \(SourceCheckpoint.format) and \(Checkpoint.format) only), so what the group is fixed to cannot be told. Run every instance of a deployment on one version; to go on with this one, run it under a new --group (a new group counts the input from its beginning), or reset this group's offsets of \(topic) to the earliest (kafka-consumer-groups.sh --reset-offsets --to-earliest) for a full recount")
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
                    lanes[lane].arena.withUnsafeBytes { arena in
                        batches[Int(target)].append(
                            encodedEvent: UnsafeRawBufferPointer(rebasing: arena[bytes]), timestamp: record.timestamp, origin: origin,
                            sourcePartition: record.partition, epoch: epoch, watermark: watermark)
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
        guard !sources.isEmpty, now - (lastMarks ?? .min / 2) >= markInterval else { return }
        try sendMarks(now: now, into: &sink)
    }

    public mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        if !sources.isEmpty { try sendMarks(now: now, into: &sink) }
    }

    /// The marks of every owned source, to every repartition partition: a partition that gets
    /// none of a source's events still learns its event time.
    private mutating func sendMarks(now: Int64, into sink: inout some RecordSink) throws {
        lastMarks = now
        let owned = sources.sorted { $0.key < $1.key }
        let marks = owned.map { partition, state in
            SourceMark(source: partition, watermark: state.watermark, idle: now - state.lastEventAt >= idleTimeout)
        }
        RepartitionRecord.encodeMarks(marks, epochs: owned.map(\.value.epoch), origin: origin, into: &buffer)
        for partition in 0..<repartitionPartitions {
            try buffer.withUnsafeBytes { value in
                try sink.send(.repartition, partition: partition, key: nil, value: value, headers: [], timestamp: now)
            }
        }
    }

    public func commitPoints() -> [Int32: CommitPoint] {
        var points: [Int32: CommitPoint] = [:]
        for (partition, state) in sources {
            if let processed = state.processed {
                points[partition] = CommitPoint(
                    offset: processed, metadata: SourceCheckpoint(epoch: state.epoch, progress: state.watermark, identity: identity).encoded)
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
