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
/// Event time crosses the shuffle with the events: each event carries its source partition's
/// watermark, and every `markInterval` the stage tells every repartition partition how far
/// each of its source partitions has got, and which have gone idle.
public struct NormalizeStage: Stage {
    public let name = "normalize"
    public let inputTopic: String
    /// Partitions of the input topic (every aggregate task waits for that many sources).
    public let sourcePartitions: Int
    public let repartitionPartitions: Int32
    public let idleTimeout: Int64
    public let markInterval: Int64

    private let intake: HitIntake
    private var sources: [Int32: SourceState] = [:]
    /// Wall-clock ms of the last marks sent; nil: send at the next tick.
    private var lastMarks: Int64?
    private var pending = StageReport()
    private var buffer: [UInt8] = []

    struct SourceState {
        /// Highest event time of an accepted hit; nil until the first.
        var watermark: Int64?
        /// Wall-clock ms of the last accepted hit, or of the assignment.
        var lastEventAt: Int64
        /// Next offset to process; nil until the first record (then the committed offset holds).
        var processed: Int64?
    }

    public init(
        inputTopic: String, sourcePartitions: Int, repartitionPartitions: Int32, limits: NormalizerLimits,
        maxFutureSkew: Int64, idleTimeout: Int64, markInterval: Int64 = 500
    ) {
        precondition(repartitionPartitions >= 1, "the repartition topic has at least one partition")
        self.inputTopic = inputTopic
        self.sourcePartitions = sourcePartitions
        self.repartitionPartitions = repartitionPartitions
        self.intake = HitIntake(limits: limits, maxFutureSkew: maxFutureSkew)
        self.idleTimeout = idleTimeout
        self.markInterval = markInterval
    }

    public mutating func assign(_ starts: [PartitionStart], now: Int64) {
        for start in starts where sources[start.partition] == nil {
            sources[start.partition] = SourceState(watermark: nil, lastEventAt: now, processed: nil)
        }
        // Tell the aggregate tasks at once that these sources are alive again.
        lastMarks = nil
    }

    public mutating func revoke(_ partitions: [Int32]) {
        for partition in partitions { sources[partition] = nil }
    }

    public mutating func process(_ records: [InputRecord], now: Int64, into sink: inout some RecordSink) throws {
        for record in records {
            pending.accounting.consumed += 1
            sources[record.partition, default: SourceState(watermark: nil, lastEventAt: now)].processed = record.offset + 1
            switch intake.take(record) {
            case .accepted(let event, let eventTime):
                var source = sources[record.partition]!
                let watermark = max(source.watermark ?? eventTime, eventTime)
                source.watermark = watermark
                source.lastEventAt = now
                sources[record.partition] = source
                RepartitionRecord.encodeEvent(
                    event, eventTime: eventTime, sourcePartitions: sourcePartitions, sourcePartition: record.partition,
                    sourceOffset: record.offset, sourceWatermark: watermark, originalTimestamp: record.timestamp,
                    originalKey: record.key, originalValue: record.value, into: &buffer)
                let partition = DeliveryHash.partition(of: event.deliveryId, count: repartitionPartitions)
                var key = event.deliveryId
                try key.withUTF8 { id in
                    try buffer.withUnsafeBytes { value in
                        try sink.send(
                            .repartition, partition: partition, key: UnsafeRawBufferPointer(id), value: value, headers: [],
                            timestamp: record.timestamp)
                    }
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
        let marks = sources.sorted { $0.key < $1.key }.map { partition, state in
            SourceMark(source: partition, watermark: state.watermark, idle: now - state.lastEventAt >= idleTimeout)
        }
        RepartitionRecord.encodeMarks(marks, sourcePartitions: sourcePartitions, into: &buffer)
        for partition in 0..<repartitionPartitions {
            try buffer.withUnsafeBytes { value in
                try sink.send(.repartition, partition: partition, key: nil, value: value, headers: [], timestamp: now)
            }
        }
    }

    public func commitPoints() -> [Int32: CommitPoint] {
        var points: [Int32: CommitPoint] = [:]
        for (partition, state) in sources {
            if let processed = state.processed { points[partition] = CommitPoint(offset: processed) }
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
