import RecordFormats
import Runner
import Kafka
import Windowing

/// Counts hits per delivery in event-time windows, one task per partition of its input, and
/// sends aggregate records and dead letters once the state that judged them is in the
/// changelog. Partitions hold disjoint deliveries (input keyed by delivery, or the
/// repartition topic), so a task's state moves with its partition. What a record holds is the
/// `Input`'s business: raw hits for input already keyed by delivery, repartition records behind
/// the shuffle. (`replay`'s one task over every partition is the `ReplayStage`'s.)
public struct AggregateStage<Input: AggregateInput>: StatefulStage {
    public let name = "aggregate"
    /// The topic the hits were first read from, named in dead letters.
    public let sourceTopic: String
    public let input: Input
    /// Settings of each task's engine (its `maxEntries` is a per-task share).
    public let window: WindowConfig
    /// How many lanes count tasks at once.
    public let shards: Int
    /// The pipeline the tasks count for: recorded in every checkpoint and named in their
    /// state; what they are assigned and read is judged by it (`GroupIdentity.judge`).
    public let identity: GroupIdentity

    private var tasks: [Int32: AggregateTask] = [:]
    /// Dead letters waiting for the next commit.
    private var heldDeadLetters = HeldDeadLetters()
    private var pending = StageReport()
    private var emitter = AggregateEmitter()
    /// The changelog record being sent, its key then its value: one buffer reused for every
    /// record (`ChangelogRecord.Entry.encode(into:)`).
    private var changelogBytes: [UInt8] = []

    public init(input: Input, window: WindowConfig, shards: Int, identity: GroupIdentity) {
        guard let sourceTopic = identity.inputTopic, identity.windowSizes == window.lengths else {
            preconditionFailure("the identity names the input and records the window sizes the tasks count")
        }
        self.sourceTopic = sourceTopic
        self.input = input
        self.window = window
        self.shards = max(1, shards)
        self.identity = identity
    }

    // MARK: Partitions

    public mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        // The topic the tasks read: the repartition topic behind the shuffle, else the input.
        let topic = identity.repartitionTopic ?? sourceTopic
        for start in starts { try identity.judge(.commit(start, topic: topic)).get() }
        for start in starts where tasks[start.partition] == nil {
            tasks[start.partition] = AggregateTask(start: start, topic: topic, config: window, sources: input.taskSources, identity: identity, now: now)
        }
    }

    public mutating func revoke(_ partitions: [Int32]) {
        for partition in partitions { tasks[partition] = nil }
    }

    /// The partitions it has tasks for, for tests.
    package var ownedPartitions: [Int32] { tasks.keys.sorted() }

    // MARK: Records

    public mutating func process(_ records: [PolledRecord], now: Int64, into sink: inout some RecordSink) throws {
        guard !records.isEmpty else { return }
        let shares = share(records)
        // Each task of the batch is taken out, worked on by exactly one lane, and put back.
        var working = shares.map { tasks.removeValue(forKey: $0.partition) }
        let input = self.input
        // A batch of one partition would decode on one thread: decode its records on every
        // lane first, in contiguous chunks, then count in order.
        let decodedAhead: DecodedBatch? =
            shares.count == 1 && shards > 1 && records.count >= 512 ? input.decodeInParallel(records, lanes: shards) : nil
        let results = inParallel(&working, lanes: shards) { task, item -> TaskResult in
            let indices = shares[item].indices
            guard task != nil, let first = indices.first, let last = indices.last else {
                // Records of a partition this stage does not own (the runner's guard should
                // have dropped them): refused loudly, never counted nowhere.
                var refused = TaskResult()
                refused.report.accounting.staleDropped = indices.count
                return refused
            }
            let batch = decodedAhead ?? input.decode(records, at: indices)
            // Counted in place (`?`: there is a task, checked above).
            return task?.count(batch, from: records[first].offset, through: records[last].offset, now: now) ?? TaskResult()
        }
        for (share, task) in zip(shares, working) where task != nil { tasks[share.partition] = task }
        if let misrouted = results.lazy.compactMap(\.misrouted).first {
            throw PipelineError.routingMismatch(
                "the repartition topic holds records routed by \(misrouted.routed) partitions, but it has \(misrouted.expected): instances disagree on its partition count (partitions were added while instances ran, or instances started at different times saw different counts), and one delivery's windows would be counted in two places. Stop every instance. The repartition topic's partition count cannot change under a group: to use more partitions, start the deployment under a new --group (its repartition topic and aggregate group follow the name; it counts the input from its beginning)")
        }
        if let refusal = results.lazy.compactMap(\.refusal).first { throw refusal }
        for result in results {
            pending.add(result.report)
            // Like the records: sent once the state that judged them is written, so that a
            // crash before the commit leaves the judgement to the next owner, whole.
            for letter in input.deadLetters(result.deadLetters, of: records, sourceTopic: sourceTopic) { heldDeadLetters.append(letter) }
        }
    }

    /// The batch's records by partition, in partition order; each partition's records keep their
    /// batch order.
    private func share(_ records: [PolledRecord]) -> [(partition: Int32, indices: [Int])] {
        // Records come in runs of one partition, and a batch holds a few partitions: each run is
        // added to its partition's share at once (found by a scan of the few shares), its indices
        // written straight into an array's storage. Appended from each range through a table of
        // partitions, they were copied one by one, 12 instructions an index (callgrind, one stage).
        var shares: [(partition: Int32, indices: [Int])] = []
        var start = 0
        while start < records.count {
            let partition = records[start].partition
            var end = start + 1
            while end < records.count && records[end].partition == partition { end += 1 }
            if let share = shares.firstIndex(where: { $0.partition == partition }) {
                shares[share].indices += Self.indices(start..<end)
            } else {
                shares.append((partition, Self.indices(start..<end)))
            }
            start = end
        }
        return shares.sorted { $0.partition < $1.partition }
    }

    private static func indices(_ range: Range<Int>) -> [Int] {
        Array(unsafeUninitializedCapacity: range.count) { buffer, count in
            // Wrapping: the sum is an index of the range, so it cannot overflow.
            let first = range.lowerBound
            for offset in buffer.indices { buffer[offset] = first &+ offset }
            count = range.count
        }
    }

    // MARK: Time

    /// Emissions are held until the next commit (`completeCommit` sends them).
    public mutating func tick(now: Int64, into sink: inout some RecordSink) throws {
        for partition in tasks.keys.sorted() where tasks[partition]?.isRestoring == false {
            pending.capacityEvictions += tasks[partition]?.advance(now: now) ?? []
        }
    }

    public mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        for partition in tasks.keys.sorted() where tasks[partition]?.isRestoring == false {
            tasks[partition]?.flushAll()
        }
    }

    // MARK: State

    public var partitionsAwaitingState: [Int32] {
        tasks.values.filter(\.isRestoring).map(\.partition).sorted()
    }

    public mutating func restoreState(_ records: [StateRecord], partition: Int32) {
        tasks[partition]?.restoreState(records)
    }

    public mutating func stateRestored(partition: Int32, now: Int64) throws {
        guard let restored = try tasks[partition]?.stateRestored(now: now) else { return }
        pending.notices.append(
            "partition \(partition): read back \(restored.windows.count) windows from \(restored.records) changelog records"
                + (restored.unreadable > 0 ? ", \(restored.unreadable) of them unreadable and skipped" : "")
                + (restored.task.map { "; its state had counted the input through offset \($0.processedMark)" } ?? ""))
        pending.accounting.restored += restored.records
    }

    public mutating func prepareCommit(into sink: inout some RecordSink) throws {
        for partition in tasks.keys.sorted() {
            for entry in tasks[partition]?.changelogEntries() ?? [] {
                changelogBytes.removeAll(keepingCapacity: true)
                let (key, value) = entry.encode(into: &changelogBytes)
                try sink.send(ChangelogEntry(bytes: changelogBytes, key: key, value: value, partition: partition))
            }
        }
    }

    public mutating func completeCommit(changelogEnds: [Int32: Int64], now: Int64, into sink: inout some RecordSink) throws {
        try heldDeadLetters.drain { try sink.send($0) }
        for partition in tasks.keys.sorted() {
            let records = tasks[partition]?.releaseHeld(changelogEnd: changelogEnds[partition]) ?? []
            try emitter.emit(records, now: now, report: &pending, into: &sink)
        }
    }

    public mutating func committed(_ partitions: [Int32]) {
        for partition in partitions { tasks[partition]?.committed() }
    }

    public var holdsClosedWindows: Bool { tasks.values.contains { $0.holdsClosedWindow } }

    // MARK: Observation

    public func commitPoints() -> [Int32: CommitPoint] {
        tasks.compactMapValues { $0.commitPoint() }
    }

    public mutating func drainReport() -> StageReport { pending.drain() }

    public func gauges() -> StageGauges {
        var gauges = StageGauges(counting: window)
        for task in tasks.values { gauges.add(task.engine) }
        return gauges
    }
}

/// One entry of a window task's changelog, bound for the task's partition of the state topic
/// (the task's input partition: a new owner reads back that partition alone). Encoded once, as
/// it is made, and lent from there. A nil value is a tombstone: compaction then deletes the key.
struct ChangelogEntry: OutgoingRecord {
    let partition: Int32?
    /// Where its key and value lie (`ChangelogRecord.Entry.encode(into:)`): the stage's buffer,
    /// shared, not copied.
    let bytes: [UInt8]
    let key: Range<Int>
    let value: Range<Int>?

    init(bytes: [UInt8], key: Range<Int>, value: Range<Int>?, partition: Int32) {
        (self.bytes, self.key, self.value, self.partition) = (bytes, key, value, partition)
    }

    var destination: Destination { .changelog }
    var headers: [KafkaHeader] { [] }
    /// The producer's clock: a state record is about no moment of the input.
    var timestamp: Int64? { nil }

    func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { bytes in
            try body(UnsafeRawBufferPointer(rebasing: bytes[key]), value.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) })
        }
    }
}
