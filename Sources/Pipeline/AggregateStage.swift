import Dispatch
import TrackingDomain
import Windowing

/// Counts hits per delivery in event-time windows, one task per partition of its input, and
/// emits aggregate records and `too_late` dead letters.
///
/// Its input is either the repartition topic (stage 2 of the scaled-out worker: events keyed
/// by delivery, with their source position and the sources' watermarks) or, for input already
/// keyed by delivery, the raw input topic itself (normalized here, as a single stage).
public struct AggregateStage: Stage {
    public enum Input: Sendable {
        /// Raw hits, already keyed by delivery: normalize, filter and dead-letter here.
        case raw(limits: NormalizerLimits, maxFutureSkew: Int64)
        /// Events from the repartition topic.
        case repartitioned
    }

    /// How window state is split.
    public enum Tasking: Sendable {
        /// One task per partition: partitions hold disjoint deliveries (input keyed by
        /// delivery, or the repartition topic). State moves with its partition; commits work.
        case perPartition
        /// One task over every partition, with `parallelism` shards: exact whatever the keys,
        /// for a single process that reads everything (`replay`). No commit points.
        case global
    }

    /// The dead-letter reason for a repartition record this version cannot read.
    public static let unreadableEvent = "unreadable_repartition_record"

    public let name = "aggregate"
    /// The topic the hits were first read from, named in dead letters.
    public let sourceTopic: String
    public let input: Input
    /// Settings of each partition's engine (its `maxEntries` is a per-partition share).
    public let window: WindowConfig
    /// How many partitions' tasks run at once (or, with `.global`, the engine's shards).
    public let parallelism: Int
    public let tasking: Tasking
    /// Only windows starting in this range are emitted, and only dead letters that belong to
    /// it are sent (a backfill of a time range); nil: everything.
    public let range: Range<Int64>?

    private let intake: HitIntake?
    private var tasks: [Int32: AggregateTask] = [:]
    private var pending = StageReport()
    private var writer = JSONWriter()

    public init(
        sourceTopic: String, input: Input, window: WindowConfig, parallelism: Int, tasking: Tasking = .perPartition,
        range: Range<Int64>? = nil
    ) {
        self.sourceTopic = sourceTopic
        self.input = input
        self.window = window
        self.parallelism = max(1, parallelism)
        self.tasking = tasking
        self.range = range
        if case .raw(let limits, let skew) = input {
            intake = HitIntake(limits: limits, maxFutureSkew: skew)
        } else {
            intake = nil
        }
    }

    private var behindShuffle: Bool {
        if case .repartitioned = input { true } else { false }
    }

    /// The key of the one task of `.global` tasking.
    static let globalTask: Int32 = -1

    public mutating func assign(_ starts: [PartitionStart], now: Int64) {
        if case .global = tasking {
            let task = tasks[Self.globalTask] ?? AggregateTask(
                partition: Self.globalTask, config: window, start: PartitionStart(partition: Self.globalTask),
                behindShuffle: behindShuffle, now: now, shards: parallelism)
            task.engine.assign(partitions: starts.map(\.partition), now: now)
            tasks[Self.globalTask] = task
            return
        }
        for start in starts where tasks[start.partition] == nil {
            tasks[start.partition] = AggregateTask(
                partition: start.partition, config: window, start: start, behindShuffle: behindShuffle, now: now)
        }
    }

    public mutating func revoke(_ partitions: [Int32]) {
        if case .global = tasking {
            tasks[Self.globalTask]?.engine.revoke(partitions: partitions)
            return
        }
        for partition in partitions { tasks[partition] = nil }
    }

    // MARK: Records

    /// What one task made of its share of a batch, sent on by the stage in partition order.
    private struct TaskResult {
        var report = StageReport()
        var emitted: [WindowAggregate] = []
        /// (record index, event within a batched record or nil, reason, detail, whether to send:
        /// not below the previous owner's mark).
        var deadLetters: [(index: Int, event: Int?, reason: String, detail: String, send: Bool)] = []
    }

    public mutating func process(_ records: [InputRecord], now: Int64, into sink: inout some RecordSink) throws {
        guard !records.isEmpty else { return }
        var byPartition: [Int32: [Int]] = [:]
        if case .global = tasking {
            byPartition[Self.globalTask] = Array(records.indices)
        } else {
            for index in records.indices { byPartition[records[index].partition, default: []].append(index) }
        }
        // Records of a partition this stage does not own (a guard upstream should have dropped
        // them) would have no task: refuse them loudly rather than count them nowhere.
        let work = byPartition.keys.sorted().map { partition in (partition, tasks[partition], byPartition[partition]!) }
        // One task over everything (a replay) would normalize on one thread: normalize the batch
        // in parallel first, in contiguous chunks, then count in order.
        var normalized: [HitIntake.Outcome]?
        if case .global = tasking, let intake, parallelism > 1, records.count >= 512 {
            normalized = Self.normalizeInParallel(records, intake: intake, lanes: parallelism)
        }
        let outcomes = normalized
        var results = [TaskResult](repeating: TaskResult(), count: work.count)
        let lanes = min(parallelism, work.count)
        let input = self.input, intake = self.intake, sourceTopic = self.sourceTopic, range = self.range, size = window.size
        results.withUnsafeMutableBufferPointer { slots in
            let slotsBox = UnsafeSendable(slots)
            let run: @Sendable (Int) -> Void = { lane in
                var item = lane
                while item < work.count {
                    let (_, task, indices) = work[item]
                    if let task {
                        slotsBox.value[item] = Self.run(
                            task: task, records: records, indices: indices, input: input, intake: intake,
                            sourceTopic: sourceTopic, range: range, windowSize: size, outcomes: outcomes, now: now)
                    } else {
                        var result = TaskResult()
                        result.report.accounting.staleDropped = indices.count
                        slotsBox.value[item] = result
                    }
                    item += lanes
                }
            }
            if lanes <= 1 {
                run(0)
            } else {
                DispatchQueue.concurrentPerform(iterations: lanes, execute: run)
            }
        }
        for result in results {
            pending.accounting.add(result.report.accounting)
            pending.capacityEvictions += result.report.capacityEvictions
            for letter in result.deadLetters where letter.send {
                try sendDeadLetter(records[letter.index], event: letter.event, reason: letter.reason, detail: letter.detail, into: &sink)
            }
            try emit(result.emitted, now: now, into: &sink)
        }
    }

    /// One task's share of a batch; runs on a worker thread, touching only this task.
    private static func run(
        task: AggregateTask, records: [InputRecord], indices: [Int], input: Input, intake: HitIntake?, sourceTopic: String,
        range: Range<Int64>?, windowSize: Int64, outcomes: [HitIntake.Outcome]? = nil, now: Int64
    ) -> TaskResult {
        /// A dead letter belongs to a backfilled range by the time it is about: the window of a
        /// late hit, the Kafka timestamp of a message that could not be read.
        func inRange(_ time: Int64?) -> Bool {
            guard let range, let time else { return true }
            return range.contains(EventTimeMath.windowStart(of: time, size: windowSize))
        }
        var result = TaskResult()
        let wasReplaying = task.isReplaying
        var inputs: [WindowInput] = []
        inputs.reserveCapacity(indices.count)
        /// Where each input came from (its `tag`): record index and event within the record.
        var origins: [(index: Int, event: Int?)] = []
        origins.reserveCapacity(indices.count)
        var marks: [Int32: SourceMark] = [:]
        for index in indices {
            let record = records[index]
            let replay = record.offset < (task.restoredProcessed ?? .min)
            task.processed = record.offset + 1
            if let intake {
                result.report.accounting.consumed += 1
                if replay { result.report.accounting.replayed += 1 }
                switch outcomes?[index] ?? intake.take(record) {
                case .accepted(var event, let eventTime):
                    event.eventTime = eventTime
                    inputs.append(WindowInput(event: event, partition: record.partition, offset: record.offset, tag: origins.count))
                    origins.append((index, nil))
                    let previous = marks[record.partition]?.watermark ?? eventTime
                    marks[record.partition] = SourceMark(source: record.partition, watermark: max(previous, eventTime))
                case .filtered(let reason):
                    result.report.accounting.filtered[reason.rawValue, default: 0] += 1
                case .rejected(let reason, let detail):
                    result.report.accounting.deadLettered[reason, default: 0] += 1
                    result.deadLetters.append((index, nil, reason, detail, !replay && inRange(record.timestamp)))
                }
                continue
            }
            guard let value = record.value else {
                result.report.accounting.consumed += 1
                result.report.accounting.deadLettered[unreadableEvent, default: 0] += 1
                result.deadLetters.append((index, nil, unreadableEvent, "\(unreadableEvent): an empty record on the repartition topic; only trackpipe should write to it", !replay))
                continue
            }
            let decoded: RepartitionRecord.Decoded
            do {
                decoded = try RepartitionRecord.decode(value)
            } catch {
                result.report.accounting.consumed += 1
                result.report.accounting.deadLettered[unreadableEvent, default: 0] += 1
                result.deadLetters.append(
                    (index, nil, unreadableEvent, "\(unreadableEvent): \(error); only trackpipe of the same major version should write to the repartition topic", !replay))
                continue
            }
            switch decoded {
            case .marks(let count, let sourceMarks):
                result.report.accounting.marks += 1
                task.declareSources(count)
                for mark in sourceMarks {
                    let previous = marks[mark.source]?.watermark
                    let watermark = [previous, mark.watermark].compactMap { $0 }.max()
                    marks[mark.source] = SourceMark(source: mark.source, watermark: watermark, idle: mark.idle)
                }
            case .event(let event):
                take(event, deliveryId: record.key, of: index, event: nil, at: record, replay: replay)
            case .events(let events):
                for (number, event) in events.enumerated() {
                    take(event, deliveryId: event.deliveryId, of: index, event: number, at: record, replay: replay)
                }
            }
        }
        /// One event from the shuffle: its source's watermark, dropped if sent twice, else counted.
        func take(
            _ event: RepartitionRecord.Event, deliveryId: UnsafeRawBufferPointer?, of index: Int, event number: Int?,
            at record: InputRecord, replay: Bool
        ) {
            result.report.accounting.consumed += 1
            if replay { result.report.accounting.replayed += 1 }
            task.declareSources(event.sourcePartitions)
            let previous = marks[event.sourcePartition]?.watermark ?? event.sourceWatermark
            marks[event.sourcePartition] = SourceMark(
                source: event.sourcePartition, watermark: max(previous, event.sourceWatermark), idle: false)
            guard task.dedup.admit(source: event.sourcePartition, sourceOffset: event.sourceOffset, position: record.offset)
            else {
                result.report.accounting.duplicates += 1
                return
            }
            guard let deliveryId, !deliveryId.isEmpty else {
                result.report.accounting.deadLettered[unreadableEvent, default: 0] += 1
                result.deadLetters.append((index, number, unreadableEvent, "\(unreadableEvent): an event without its delivery id", !replay))
                return
            }
            let tracking = TrackingEvent(
                deliveryId: String(decoding: deliveryId, as: UTF8.self),
                broadlogId: String(decoding: event.broadlogId, as: UTF8.self), action: event.action,
                channel: event.channel, platform: event.platform, eventTime: event.eventTime, shape: event.shape)
            inputs.append(WindowInput(event: tracking, partition: record.partition, offset: record.offset, tag: origins.count))
            origins.append((index, number))
        }
        if let last = inputs.last { task.lastInputOffset = last.offset }
        let output = task.engine.process(inputs, marks: marks.values.sorted { $0.source < $1.source }, now: now)
        result.report.accounting.accepted += inputs.count - output.tooLate.count
        result.report.accounting.replayedFinal += output.replayedFinal
        for late in output.tooLate {
            let origin = origins[late.tag]
            result.report.accounting.deadLettered[RejectReason.tooLate.rawValue, default: 0] += 1
            let replay = late.offset < (task.restoredProcessed ?? .min)
            result.deadLetters.append(
                (origin.index, origin.event, RejectReason.tooLate.rawValue, late.detail, !replay && inRange(late.event.eventTime)))
        }
        result.report.capacityEvictions = output.capacityEvictions
        result.deadLetters.sort { ($0.index, $0.event ?? -1) < ($1.index, $1.event ?? -1) }
        // Below the previous owner's processed mark, everything this replay would emit was
        // emitted and acknowledged before that owner's commit, with the same counts: sending it
        // again would only repeat records (and, for a sink reading the stream, step back).
        var emitted = output.emitted
        if task.isReplaying {
            emitted = []
        } else if wasReplaying {
            // Caught up with the previous owner: windows that ripened during the silent replay
            // may hold more than that owner had emitted. Send the current state of every
            // emitted window once (equal counts give equal revisions, so repeats are harmless).
            emitted = task.engine.emittedRecords()
        }
        result.emitted = emitted.filter { range?.contains($0.windowStart) ?? true }
        return result
    }

    /// Every record's verdict, computed on `lanes` threads over contiguous chunks.
    private static func normalizeInParallel(_ records: [InputRecord], intake: HitIntake, lanes: Int) -> [HitIntake.Outcome] {
        inParallelChunks(of: records.count, lanes: lanes) { range in range.map { intake.take(records[$0]) } }.flatMap { $0 }
    }

    /// The original message, unchanged, with the reason in headers. Behind the shuffle the
    /// original key and value travelled inside the event.
    private func sendDeadLetter(
        _ record: InputRecord, event number: Int?, reason: String, detail: String, into sink: inout some RecordSink
    ) throws {
        if intake == nil, let value = record.value, let event = Self.event(number, in: value) {
            let letter = DeadLetter(
                reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: event.sourcePartition,
                sourceOffset: event.sourceOffset)
            try sink.send(
                .deadLetter, partition: nil, key: event.originalKey, value: event.originalValue, headers: letter.headers,
                timestamp: event.originalTimestamp)
            return
        }
        let letter = DeadLetter(
            reason: reason, detail: detail, sourceTopic: intake == nil ? "\(sourceTopic) (via the repartition topic)" : sourceTopic,
            sourcePartition: record.partition, sourceOffset: record.offset)
        try sink.send(.deadLetter, partition: nil, key: record.key, value: record.value, headers: letter.headers, timestamp: record.timestamp)
    }

    /// Event `number` of a batched record (nil: the one event of a version 1 record).
    private static func event(_ number: Int?, in value: UnsafeRawBufferPointer) -> RepartitionRecord.Event? {
        switch try? RepartitionRecord.decode(value) {
        case .event(let event)?: event
        case .events(let events)?: number.flatMap { events.indices.contains($0) ? events[$0] : nil }
        default: nil
        }
    }

    private mutating func emit(_ aggregates: [WindowAggregate], now: Int64, into sink: inout some RecordSink) throws {
        for aggregate in aggregates {
            writer.removeAll()
            AggregateRecord.writeValue(aggregate, into: &writer)
            var key = AggregateRecord.key(aggregate)
            try key.withUTF8 { keyBytes in
                try writer.bytes.withUnsafeBytes { value in
                    try sink.send(.output, partition: nil, key: UnsafeRawBufferPointer(keyBytes), value: value, headers: [], timestamp: nil)
                }
            }
            pending.emitDelays.append(max(0, Double(now - aggregate.windowEnd) / 1000))
        }
        pending.accounting.emitted += aggregates.count
    }

    // MARK: Time

    public mutating func tick(now: Int64, into sink: inout some RecordSink) throws {
        for partition in tasks.keys.sorted() {
            let task = tasks[partition]!
            let output = task.engine.advance(now: now)
            pending.capacityEvictions += output.capacityEvictions
            if !task.isReplaying { try emit(inRange(output.emitted), now: now, into: &sink) }
        }
    }

    public mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        for partition in tasks.keys.sorted() {
            try emit(inRange(tasks[partition]!.engine.flushAll().emitted), now: now, into: &sink)
        }
    }

    // MARK: Observation

    private func inRange(_ aggregates: [WindowAggregate]) -> [WindowAggregate] {
        guard let range else { return aggregates }
        return aggregates.filter { range.contains($0.windowStart) }
    }

    public func commitPoints() -> [Int32: CommitPoint] {
        if case .global = tasking { return [:] }
        var points: [Int32: CommitPoint] = [:]
        for (partition, task) in tasks {
            if let point = task.commitPoint() { points[partition] = point }
        }
        return points
    }

    public mutating func drainReport() -> StageReport {
        defer { pending = StageReport() }
        return pending
    }

    public func gauges() -> StageGauges {
        var gauges = StageGauges()
        for task in tasks.values {
            let stats = task.engine.stats
            gauges.openWindows += stats.openWindows + stats.retainedWindows
            gauges.entries += stats.entries
            if let watermark = task.engine.watermark { gauges.watermark = min(gauges.watermark ?? watermark, watermark) }
        }
        return gauges
    }

    public var ownedPartitions: [Int32] { tasks.keys.sorted() }
}

/// Lets a buffer be written by `concurrentPerform` workers, each to its own slots.
struct UnsafeSendable<Value>: @unchecked Sendable {
    // @unchecked: used only for a results buffer whose slots are each written by exactly one
    // worker, and read after `concurrentPerform` returns.
    var value: Value
    init(_ value: Value) { self.value = value }
}
