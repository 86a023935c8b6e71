import Kafka
import Logging

/// Reads window state back from the state topic for partitions just assigned, a batch per turn
/// of the loop, while the runner holds their input back: the loop keeps turning (other
/// partitions flow, rebalances are served, `/health` stays truthful), and a partition revoked in
/// the middle of its restore simply stops being read.
///
/// It has a consumer of its own, assigned to the state topic's partitions without joining any
/// group (it carries the stage's group id, so it needs no permission of its own, but never
/// subscribes or commits), reading each from its beginning to the end it had when the restore
/// began; it is closed as soon as nothing is left to read.
struct StateRestorer: RunnerPart {
    let context: RunnerContext
    let stateTopic: String
    private let config: KafkaConfig
    private let clients: any KafkaClientFactory
    private var consumer: (any ConsumerClient)?
    private(set) var active: [Int32: Restoration] = [:]

    /// One partition being read back.
    struct Restoration {
        var start: Int64
        var end: Int64
        var read: Int64 = 0
        var position: Int64
        let began: Int64
        var lastLog: Int64
        /// Wall-clock ms when the last record arrived (or the restore began).
        var lastProgress: Int64
    }

    init(_ context: RunnerContext, stateTopic: String) {
        self.context = context
        self.stateTopic = stateTopic
        var config = context.settings.consumer
        config["enable.partition.eof"] = "true"
        // Never a member: the stage's static id belongs to the stage's own consumer.
        config["group.instance.id"] = nil
        self.config = config
        self.clients = context.settings.clients
    }

    var isRestoring: Bool { !active.isEmpty }

    /// Starts reading the state of `partitions` from the beginning of their state partitions.
    /// Returns those that hold nothing (restored at once).
    mutating func begin(_ partitions: [Int32], now: Int64) throws -> [Int32] {
        guard !partitions.isEmpty else { return [] }
        if consumer == nil {
            consumer = try clients.consumer(
                config: config, logger: logger.with(label: "trackpipe.kafka.restore"), rebalance: nil, maxBatch: 8_192, wakesFetcher: true,
                onError: nil)
        }
        guard let consumer else { return [] }
        let state = partitions.map { TopicPartition(topic: stateTopic, partition: $0) }
        let beginnings = try consumer.beginningOffsets(state)
        let ends = try consumer.endOffsets(state)
        var empty: [Int32] = []
        for tp in state {
            let start = max(0, beginnings.first { $0.topicPartition == tp }?.offset ?? 0)
            let end = max(start, ends.first { $0.topicPartition == tp }?.offset ?? start)
            if end <= start {
                empty.append(tp.partition)
                continue
            }
            active[tp.partition] = Restoration(start: start, end: end, position: start, began: now, lastLog: now, lastProgress: now)
            logger.notice("\(stageName): restoring partition \(tp.partition) from \(stateTopic): \(end - start) records to read")
        }
        try reassign()
        metrics?.restoring(active.count)
        return empty
    }

    /// Stops reading partitions given away (in the middle of their restore or not).
    mutating func cancel(_ partitions: [Int32]) throws {
        let cancelled = partitions.filter { active.removeValue(forKey: $0) != nil }
        guard !cancelled.isEmpty else { return }
        logger.info("\(stageName): stopped restoring partitions \(cancelled.sorted()): they were revoked")
        try reassign()
        metrics?.restoring(active.count)
    }

    /// Assigns what is left to read; with nothing left, closes the consumer (a later `begin`
    /// makes a new one). An idle librdkafka consumer is not free: its threads wake for their
    /// timers, about 0.3 ms of CPU a second (`/proc/<pid>/task/*/schedstat` of an idle worker),
    /// for as long as the run lasts, where most runs restore once, at start-up, or nothing.
    private mutating func reassign() throws {
        guard let consumer else { return }
        guard !active.isEmpty else {
            consumer.close()
            self.consumer = nil
            return
        }
        try consumer.assign(active.map { TopicPartitionOffset(topic: stateTopic, partition: $0.key, offset: $0.value.position) })
    }

    /// Reads one batch and hands each partition's records to `restore` (the stage's
    /// `restoreState`); returns the partitions now read to their end.
    mutating func step(
        now: Int64, timeoutMilliseconds: Int32, restore: (_ records: [StateRecord], _ partition: Int32) -> Void
    ) throws -> [Int32] {
        guard let consumer, !active.isEmpty else { return [] }
        var byPartition: [Int32: [StateRecord]] = [:]
        var ended: Set<Int32> = []
        try consumer.pollBatch(timeoutMilliseconds: timeoutMilliseconds) { batch in
            for index in 0..<batch.count {
                switch batch.event(at: index) {
                case .record(let record):
                    guard var restoration = active[record.partition], record.offset >= restoration.position else { continue }
                    if record.offset < restoration.end {
                        byPartition[record.partition, default: []].append(
                            StateRecord(offset: record.offset, key: record.key.map { Array($0) } ?? [], value: record.value.map { Array($0) }))
                        restoration.read += 1
                    }
                    restoration.position = record.offset + 1
                    restoration.lastProgress = now
                    active[record.partition] = restoration
                    if restoration.position >= restoration.end { ended.insert(record.partition) }
                case .partitionEOF(let tp, let offset):
                    if let restoration = active[tp.partition], offset >= restoration.end { ended.insert(tp.partition) }
                case .error(let error):
                    if error.severity == .fatal { throw error }
                    logger.warning("\(stageName): reading \(stateTopic) back: \(error)")
                }
            }
        }
        var restored = 0
        for (partition, records) in byPartition.sorted(by: { $0.key < $1.key }) {
            restore(records, partition)
            restored += records.count
        }
        metrics?.restoredRecords(restored)
        for partition in active.keys.sorted() where !ended.contains(partition) { logProgress(partition, now: now) }
        var done: [Int32] = []
        for partition in ended.sorted() {
            guard let restoration = active.removeValue(forKey: partition) else { continue }
            let seconds = Double(max(1, now - restoration.began)) / 1000
            logger.notice(
                "\(stageName): restored partition \(partition) from \(stateTopic): \(restoration.read) records in \(String(format: "%.1f", seconds)) s (\(Int(Double(restoration.read) / seconds))/s)")
            done.append(partition)
        }
        if !done.isEmpty {
            try reassign()
            metrics?.restoring(active.count)
        }
        return done
    }

    /// A progress line every 5 s per partition: records read, rate, what remains.
    private mutating func logProgress(_ partition: Int32, now: Int64) {
        guard var restoration = active[partition], now - restoration.lastLog >= 5_000 else { return }
        restoration.lastLog = now
        active[partition] = restoration
        let seconds = Double(max(1, now - restoration.began)) / 1000
        let rate = Double(restoration.read) / seconds
        let remaining = restoration.end - restoration.position
        let left = rate > 0 ? String(format: ", about %.0f s left", Double(remaining) / rate) : ""
        logger.info(
            "\(stageName): restoring partition \(partition): \(restoration.read) records read (\(Int(rate))/s), \(remaining) to go\(left)")
    }

    /// How long the slowest restore has gone without a record (ms); 0 when none is stalled.
    func stalledFor(now: Int64) -> Int64 {
        active.values.map { now - $0.lastProgress }.max() ?? 0
    }

    func close() { consumer?.close() }
}
