import Kafka
import TrackingDomain
import Windowing

/// Counts hits per delivery in event-time windows, one task per partition of its input (or one
/// task over all of them, for `replay`), and emits aggregate records and `too_late` dead
/// letters. What a record holds is the `Input`'s business: raw hits for input already keyed by
/// delivery and for `replay`, repartition records behind the shuffle.
public struct AggregateStage<Input: AggregateInput>: Stage {
    /// How window state is split.
    public enum Tasking: Sendable {
        /// One task per partition: partitions hold disjoint deliveries (input keyed by
        /// delivery, or the repartition topic). State moves with its partition; commits work.
        case perPartition
        /// One task over every partition, its deliveries split by hash into `parallelism` shards
        /// that run on the lanes: exact whatever the keys, for a single process that reads
        /// everything (`replay`). No commit points.
        case global
    }

    public let name = "aggregate"
    /// The topic the hits were first read from, named in dead letters.
    public let sourceTopic: String
    public let input: Input
    /// Settings of each task's engine (its `maxEntries` is a per-task share).
    public let window: WindowConfig
    /// How many lanes run window work at once: tasks, or with `.global` the one task's shards.
    public let parallelism: Int
    public let tasking: Tasking
    /// Only windows starting in this range are emitted, and only dead letters that belong to
    /// it are sent (a backfill of a time range); nil: everything.
    public let range: Range<Int64>?
    /// Whether each task keeps its windows in a changelog (the `.changelog` destination, one
    /// partition per task): every task of a partition does, so that it reads its state back
    /// when assigned instead of re-reading its input for the retention, commits at its processed
    /// mark, and sends its aggregate records at commits, once the state they carry is written.
    /// The one `global` task of a replay keeps none: it commits nothing.
    public var keepsChangelog: Bool { tasking == .perPartition }

    private var tasks: [TaskKey: AggregateTask] = [:]
    /// Dead letters waiting for the next commit (with a changelog).
    private var heldDeadLetters: [HeldDeadLetter] = []
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
    }

    // MARK: Partitions

    public mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        switch tasking {
        case .global:
            var task =
                tasks[.global]
                ?? AggregateTask(key: .global, config: window, start: nil, sources: input.taskSources, now: now, shards: parallelism)
            task.engine.assign(partitions: starts.map(\.partition), now: now)
            tasks[.global] = task
        case .perPartition:
            let topic = input.readTopicName(sourceTopic: sourceTopic)
            if let refusal = starts.compactMap({ AggregateTask.refusal(of: $0, topic: topic, windowSize: window.size) }).first { throw refusal }
            for start in starts where tasks[.partition(start.partition)] == nil {
                tasks[.partition(start.partition)] = AggregateTask(
                    key: .partition(start.partition), config: window, start: start, sources: input.taskSources,
                    changelogSource: input.changelogSource(inputTopic: sourceTopic), now: now)
            }
        }
    }

    public mutating func revoke(_ partitions: [Int32]) {
        switch tasking {
        case .global: tasks[.global]?.engine.revoke(partitions: partitions)
        case .perPartition: for partition in partitions { tasks[.partition(partition)] = nil }
        }
    }

    public var ownedPartitions: [Int32] { tasks.keys.compactMap(\.partition).sorted() }

    // MARK: Records

    public mutating func process(_ records: [InputRecord], now: Int64, into sink: inout some RecordSink) throws {
        guard !records.isEmpty else { return }
        let shares = share(records)
        // Each task of the batch is taken out, worked on by exactly one lane, and put back.
        var working = shares.map { tasks.removeValue(forKey: $0.key) }
        let input = self.input, range = self.range, lanes = Lanes(count: parallelism)
        // One task (a replay, or a batch of one partition) would decode on one thread: decode
        // its records on every lane first, in contiguous chunks, then count in order.
        let decodedAhead: DecodedBatch? =
            shares.count == 1 && parallelism > 1 && records.count >= 512 ? Self.decodeInParallel(records, input: input, lanes: parallelism) : nil
        // Tasks run on the lanes, and so do the shards of a task that has several: only the one
        // task of `.global`, always alone in its batch, so the lanes never nest.
        let results = inParallel(&working, lanes: parallelism) { task, item -> AggregateTask.Result in
            let indices = shares[item].indices
            guard task != nil else {
                // Records of a partition this stage does not own (the runner's guard should
                // have dropped them): refused loudly, never counted nowhere.
                var refused = AggregateTask.Result()
                refused.report.accounting.staleDropped = indices.count
                return refused
            }
            var batch = DecodedBatch()
            if let decodedAhead {
                batch = decodedAhead
            } else {
                for index in indices { input.decode(records[index], at: index, into: &batch) }
            }
            return task!.count(batch, through: records[indices.last!].offset, range: range, now: now, on: lanes)
        }
        for (share, task) in zip(shares, working) where task != nil { tasks[share.key] = task }
        if let misrouted = results.lazy.compactMap(\.misrouted).first {
            throw PipelineError.routingMismatch(
                "the repartition topic holds records routed by \(misrouted.routed) partitions, but it has \(misrouted.expected): instances disagree on its partition count (partitions were added while instances ran, or instances started at different times saw different counts), and one delivery's windows would be counted in two places. Stop every instance. The repartition topic's partition count cannot change under a group: to use more partitions, start the deployment under a new --group (its repartition topic and aggregate group follow the name; it counts the input from its beginning)")
        }
        for result in results {
            pending.accounting.add(result.report.accounting)
            pending.capacityEvictions += result.report.capacityEvictions
            pending.notices += result.report.notices
            try deliver(result.deadLetters, of: records, into: &sink)
            try emit(result.emitted, now: now, into: &sink)
        }
    }

    /// A task's dead letters, made from the records they are about while the batch is alive.
    private mutating func deliver(
        _ pending: [AggregateTask.PendingDeadLetter], of records: [InputRecord], into sink: inout some RecordSink
    ) throws {
        var letters: [OutgoingDeadLetter] = []
        letters.reserveCapacity(pending.count)
        for letter in pending {
            let record = records[letter.reference.record]
            letters.append(input.deadLetter(letter.reference, of: record, reason: letter.reason, detail: letter.detail, sourceTopic: sourceTopic))
        }
        if keepsChangelog {
            // Like the records: sent once the state that judged them is written, so that a
            // crash before the commit leaves the judgement to the next owner, whole.
            heldDeadLetters += letters.map(HeldDeadLetter.init)
        } else {
            for outgoing in letters {
                try sink.send(
                    .deadLetter, partition: nil, key: outgoing.key, value: outgoing.value, headers: outgoing.headers,
                    timestamp: outgoing.timestamp)
            }
        }
    }

    private func send(_ letters: [HeldDeadLetter], into sink: inout some RecordSink) throws {
        for letter in letters {
            try letter.key.withOptionalBytes { key in
                try letter.value.withOptionalBytes { value in
                    try sink.send(.deadLetter, partition: nil, key: key, value: value, headers: letter.headers, timestamp: letter.timestamp)
                }
            }
        }
    }

    /// The batch's records by task, in task order; each task's records keep their batch order.
    private func share(_ records: [InputRecord]) -> [(key: TaskKey, indices: [Int])] {
        if case .global = tasking { return [(.global, Array(records.indices))] }
        // Records come in runs of one partition: the table is touched once per run, not per record.
        var byPartition: [Int32: [Int]] = [:]
        var start = 0
        while start < records.count {
            let partition = records[start].partition
            var end = start + 1
            while end < records.count && records[end].partition == partition { end += 1 }
            byPartition[partition, default: []].append(contentsOf: start..<end)
            start = end
        }
        return byPartition.keys.sorted().map { (.partition($0), byPartition[$0]!) }
    }

    /// Every record decoded on `lanes` threads over contiguous chunks, joined in record order.
    private static func decodeInParallel(_ records: [InputRecord], input: Input, lanes: Int) -> DecodedBatch {
        let chunks = inParallelChunks(of: records.count, lanes: lanes) { range in
            var batch = DecodedBatch()
            for index in range { input.decode(records[index], at: index, into: &batch) }
            return batch
        }
        var joined = chunks[0]
        for chunk in chunks.dropFirst() { joined.append(chunk) }
        return joined
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
        for key in tasks.keys.sorted() where !tasks[key]!.isRestoring {
            let output = tasks[key]!.engine.advance(now: now, on: Lanes(count: parallelism))
            pending.capacityEvictions += output.capacityEvictions
            try emit(inRange(tasks[key]!.takeEmissions(output)), now: now, into: &sink)
        }
    }

    public mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        for key in tasks.keys.sorted() where !tasks[key]!.isRestoring {
            let output = tasks[key]!.engine.flushAll(on: Lanes(count: parallelism))
            try emit(inRange(tasks[key]!.takeEmissions(output)), now: now, into: &sink)
        }
    }

    // MARK: State

    public var partitionsAwaitingState: [Int32] {
        tasks.values.filter(\.isRestoring).compactMap(\.key.partition).sorted()
    }

    public mutating func restoreState(_ records: [StateRecord], partition: Int32) {
        tasks[.partition(partition)]?.restoreState(records)
    }

    public mutating func stateRestored(partition: Int32, now: Int64) throws {
        guard let restored = try tasks[.partition(partition)]?.stateRestored(now: now) else { return }
        pending.notices.append(
            "partition \(partition): read back \(restored.windows.count) windows from \(restored.records) changelog records"
                + (restored.unreadable > 0 ? ", \(restored.unreadable) of them unreadable and skipped" : "")
                + (restored.task.map { "; its state had counted the input through offset \($0.processedThrough)" } ?? ""))
        pending.accounting.restored += restored.records
    }

    public mutating func prepareCommit(into sink: inout some RecordSink) throws {
        for key in tasks.keys.sorted() {
            guard let partition = key.partition else { continue }
            for entry in tasks[key]!.changelogEntries() {
                try entry.key.withUnsafeBytes { keyBytes in
                    if let value = entry.value {
                        try value.withUnsafeBytes { valueBytes in
                            try sink.send(.changelog, partition: partition, key: keyBytes, value: valueBytes, headers: [], timestamp: nil)
                        }
                    } else {
                        try sink.send(.changelog, partition: partition, key: keyBytes, value: nil, headers: [], timestamp: nil)
                    }
                }
            }
        }
    }

    public mutating func completeCommit(changelogEnds: [Int32: Int64], now: Int64, into sink: inout some RecordSink) throws {
        try send(heldDeadLetters, into: &sink)
        heldDeadLetters = []
        for key in tasks.keys.sorted() where tasks[key]!.keepsChangelog {
            let records = tasks[key]!.releaseHeld(changelogEnd: key.partition.flatMap { changelogEnds[$0] })
            try emit(records, now: now, into: &sink)
        }
    }

    public mutating func committed(_ partitions: [Int32]) {
        for partition in partitions { tasks[.partition(partition)]?.committed() }
    }

    public var holdsClosedWindows: Bool { tasks.values.contains { $0.holdsClosedWindow } }

    private func inRange(_ aggregates: [WindowAggregate]) -> [WindowAggregate] {
        guard let range else { return aggregates }
        return aggregates.filter { range.contains($0.windowStart) }
    }

    // MARK: Observation

    public func commitPoints() -> [Int32: CommitPoint] {
        var points: [Int32: CommitPoint] = [:]
        for task in tasks.values {
            if let partition = task.key.partition, let point = task.commitPoint() { points[partition] = point }
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
}

/// A dead letter kept until the next commit: its bytes copied, since the record it came from
/// is gone once the batch is.
struct HeldDeadLetter: Sendable {
    var headers: [KafkaHeader]
    var key: [UInt8]?
    var value: [UInt8]?
    var timestamp: Int64?

    init(_ outgoing: OutgoingDeadLetter) {
        headers = outgoing.headers
        key = outgoing.key.map { Array($0) }
        value = outgoing.value.map { Array($0) }
        timestamp = outgoing.timestamp
    }
}

extension Optional where Wrapped == [UInt8] {
    /// The bytes as a buffer for the length of `body`, or nil.
    public func withOptionalBytes<R>(_ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        guard let self else { return try body(nil) }
        return try self.withUnsafeBytes { try body($0) }
    }
}

/// Lets a buffer be written by `concurrentPerform` workers, each to its own slots.
struct UnsafeSendable<Value>: @unchecked Sendable {
    // @unchecked: wraps only buffers whose slots are each written by exactly one worker and
    // read after `concurrentPerform` returns.
    var value: Value
    init(_ value: Value) { self.value = value }
}
