#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Kafka
import Logging
import Synchronization
import TrackingDomain
import Windowing

/// The worker: consumer -> normalizer -> windowing shards -> producer, on one driving thread
/// with the shards on Dispatch queues.
///
/// Its guarantees, and how it keeps them:
/// - Every consumed message is accounted for (accepted, filtered or dead-lettered).
/// - Offsets are committed only below the engine's safe mark (the lowest offset an open or
///   retained window still needs) and only after every record produced so far is acknowledged,
///   so after a crash the replay rebuilds exactly the lost state: nothing lost, nothing doubled.
/// - On a rebalance the window state is dropped and rebuilt from the committed offsets, which
///   is why the eager assignment protocol is required.
public final class Pipeline: @unchecked Sendable {
    // @unchecked: everything below `state` is touched only by the thread inside `run` (the
    // rebalance handler runs inside `poll` on that thread); the rest is atomic or locked.
    public let config: PipelineConfig
    private let logger: Logger
    private let metrics: PipelineMetrics?
    private let normalizer: Normalizer
    private let stopRequested = Atomic<Bool>(false)
    private let deliveryFailure = Mutex<String?>(nil)
    private let lastLoopMillis = Atomic<Int64>(0)

    private var consumer: KafkaConsumer?
    private var producer: KafkaProducer?
    private var engine: ShardedWindowEngine
    private var assigned: Set<Int32> = []
    private var nextOffset: [Int32: Int64] = [:]
    private var lastInputOffset: [Int32: Int64] = [:]
    private var restoredProcessed: [Int32: Int64] = [:]
    private var endOffsets: [Int32: Int64] = [:]
    private var atEnd: Set<Int32> = []
    private var lastCommitted: [Int32: TopicPartitionOffset] = [:]
    private var accounting = Accounting()
    private var unreportedMetrics = Accounting()
    private var writer = JSONWriter()
    private var fatal: PipelineError?
    private var lastUnknownTopicLog: Int64 = 0

    public init(config: PipelineConfig, logger: Logger = Logger(label: "trackpipe"), metrics: PipelineMetrics? = nil) {
        self.config = config
        self.logger = logger
        self.metrics = metrics
        self.normalizer = Normalizer(limits: config.limits)
        self.engine = ShardedWindowEngine(config: config.window, shards: config.shards)
    }

    /// Asks `run` to stop after the batch in flight: it commits the safe offsets and returns.
    /// Safe to call from any thread (a signal handler's queue, a test).
    public func requestStop() {
        stopRequested.store(true, ordering: .sequentiallyConsistent)
    }

    /// nil while the worker is healthy; else why not (for `/health`).
    public var healthProblem: String? {
        if let failure = deliveryFailure.withLock({ $0 }) { return "delivery failed: \(failure)" }
        let last = lastLoopMillis.load(ordering: .relaxed)
        if last > 0 && wallClockMillis() - last > 60_000 { return "the consume loop has not turned for over 60 s" }
        return nil
    }

    /// Runs until `requestStop`, or (with `untilEnd`) until every assigned partition is read to
    /// the end offset it had at assignment. Throws for what a restart may fix (a failed
    /// delivery, a missing topic); offsets are never committed past an unacknowledged record.
    public func run() throws -> PipelineSummary {
        try config.validate()
        let started = wallClockMillis()
        let producer = try KafkaProducer(
            config: config.producerConfig, logger: logger.with(label: "trackpipe.kafka.producer")
        ) { [weak self] report in
            guard let error = report.error, let self else { return }
            self.deliveryFailure.withLock { if $0 == nil { $0 = "\(report.topic)[\(report.partition)]: \(error)" } }
            self.requestStop()
        }
        self.producer = producer
        let consumer = try KafkaConsumer(
            config: config.consumerConfig, logger: logger.with(label: "trackpipe.kafka.consumer"),
            rebalance: RebalanceHandler(
                partitionsAssigned: { [unowned self] in self.partitionsAssigned($0) },
                partitionsRevoking: { [unowned self] in self.partitionsRevoking($0) }),
            maxBatch: config.maxBatch)
        self.consumer = consumer
        try consumer.subscribe(topics: [config.inputTopic])
        logger.info(
            "trackpipe running",
            metadata: [
                "brokers": "\(config.brokers)", "input": "\(config.inputTopic)", "output": "\(config.outputTopic)",
                "dlq": "\(config.deadLetterTopic)", "group": "\(config.group)", "shards": "\(config.shards)",
            ])

        var lastAdvance = started
        var lastCommit = started
        var lastGauges = started
        do {
            while !stopRequested.load(ordering: .relaxed) {
                let polled = try consumer.pollBatch(timeoutMilliseconds: 100) { batch in try process(batch) }
                if let fatal { throw fatal }
                let now = wallClockMillis()
                lastLoopMillis.store(now, ordering: .relaxed)
                if polled == nil || now - lastAdvance >= 1_000 {
                    try handle(engine.advance(now: now))
                    lastAdvance = now
                }
                producer.poll()
                if now - lastCommit >= config.commitInterval {
                    try commitSafeOffsets()
                    lastCommit = now
                }
                if now - lastGauges >= 1_000 {
                    updateGauges()
                    lastGauges = now
                }
                if config.untilEnd && !assigned.isEmpty && assigned.isSubset(of: atEnd) { break }
            }
            if let failure = deliveryFailure.withLock({ $0 }) { throw PipelineError.deliveryFailed(failure) }
            if config.untilEnd { try handle(engine.flushAll()) }
            try commitSafeOffsets()
        } catch {
            fatal = error as? PipelineError ?? .kafka("\(error)")
            logger.error("stopping without committing further: \(error)")
            consumer.close()
            throw error
        }
        // Closing revokes the partitions, which resets the per-partition state: read it first.
        let committed = lastCommitted.values.sorted { $0.partition < $1.partition }
        consumer.close()
        flushMetrics()
        return PipelineSummary(accounting: accounting, elapsedMilliseconds: wallClockMillis() - started, committed: committed)
    }

    // MARK: - One batch

    /// The dead-letter reason for hits stamped too far ahead of their arrival.
    public static let futureTimestamp = "future_timestamp"

    private func process(_ batch: ConsumerBatch) throws {
        var inputs: [WindowInput] = []
        inputs.reserveCapacity(batch.count)
        var batchAccounting = Accounting()
        for index in batch.indices {
            switch batch[index] {
            case .record(let record):
                batchAccounting.consumed += 1
                let partition = record.partition
                nextOffset[partition] = record.offset + 1
                if let end = endOffsets[partition], record.offset + 1 >= end { atEnd.insert(partition) }
                let verdict =
                    record.value.map { normalizer.normalize($0, kafkaTimestamp: record.timestamp) }
                    ?? normalizer.normalize(EmptyCollection<UInt8>(), kafkaTimestamp: record.timestamp)
                switch verdict {
                case .accepted(let event):
                    if let eventTime = event.eventTime, let received = record.timestamp, eventTime > received + config.maxFutureSkew {
                        try deadLetter(
                            record, reason: Self.futureTimestamp,
                            detail:
                                "future_timestamp: event time \(RFC3339.format(epochMillis: eventTime)) is \((eventTime - received) / 1000) s after the Kafka record's timestamp \(RFC3339.format(epochMillis: received)), more than the allowed \(config.maxFutureSkew / 1000) s; the sending device's clock is probably wrong (or raise --max-future-skew)",
                            into: &batchAccounting)
                    } else if event.eventTime == nil {
                        try deadLetter(
                            record, reason: RejectReason.invalidTimestamp.rawValue,
                            detail: "invalid_timestamp: the hit has no timestamp and its Kafka record has none; add a \"timestamp\" field",
                            into: &batchAccounting)
                    } else {
                        inputs.append(WindowInput(event: event, partition: partition, offset: record.offset))
                        lastInputOffset[partition] = record.offset
                    }
                case .filtered(let reason):
                    batchAccounting.filtered[reason.rawValue, default: 0] += 1
                case .rejected(let reason, let detail):
                    try deadLetter(record, reason: reason.rawValue, detail: detail, into: &batchAccounting)
                }
            case .partitionEOF(let tp, let offset):
                if tp.topic == config.inputTopic, let end = endOffsets[tp.partition], offset >= end { atEnd.insert(tp.partition) }
            case .error(let error):
                try consumerError(error)
            }
        }
        let output = engine.process(inputs, now: wallClockMillis())
        batchAccounting.accepted += inputs.count - output.tooLate.count
        if !output.tooLate.isEmpty {
            var byPosition: [Int64: [Int32: Int]] = [:]
            for index in batch.indices {
                if case .record(let record) = batch[index] { byPosition[record.offset, default: [:]][record.partition] = index }
            }
            for late in output.tooLate {
                guard let index = byPosition[late.offset]?[late.partition], case .record(let record) = batch[index] else { continue }
                try deadLetter(record, reason: RejectReason.tooLate.rawValue, detail: late.detail, into: &batchAccounting)
            }
        }
        try handle(output, into: &batchAccounting)
        record(batchAccounting)
    }

    private func consumerError(_ error: KafkaError) throws {
        if error.isUnknownTopic {
            if config.untilEnd { throw PipelineError.inputTopicMissing(config.inputTopic) }
            let now = wallClockMillis()
            if now - lastUnknownTopicLog > 60_000 {
                logger.error("\(PipelineError.inputTopicMissing(config.inputTopic)); waiting for it")
                lastUnknownTopicLog = now
            }
        } else {
            logger.warning("consumer: \(error)")
        }
    }

    /// The original key and value, unchanged, with the reason in headers. A message the
    /// previous run had already dead-lettered (below its checkpoint) is not sent twice.
    private func deadLetter(_ record: ConsumerRecord, reason: String, detail: String, into batch: inout Accounting) throws {
        batch.deadLettered[reason, default: 0] += 1
        if let processed = restoredProcessed[record.partition], record.offset < processed { return }
        let letter = DeadLetter(
            reason: reason, detail: detail, sourceTopic: config.inputTopic, sourcePartition: record.partition,
            sourceOffset: record.offset)
        try producer!.send(
            topic: config.deadLetterTopic, key: record.key, value: record.value,
            headers: letter.headers, timestamp: record.timestamp)
    }

    private func handle(_ output: EngineOutput) throws {
        var batchAccounting = Accounting()
        try handle(output, into: &batchAccounting)
        record(batchAccounting)
    }

    private func handle(_ output: EngineOutput, into batch: inout Accounting) throws {
        batch.replayedFinal += output.replayedFinal
        let now = wallClockMillis()
        for aggregate in output.emitted {
            writer.removeAll()
            AggregateRecord.writeValue(aggregate, into: &writer)
            let key = AggregateRecord.key(aggregate)
            try key.utf8.withContiguousStorageIfAvailable { keyBytes in
                try writer.bytes.withUnsafeBytes { value in
                    try producer!.send(topic: config.outputTopic, key: UnsafeRawBufferPointer(keyBytes), value: value)
                }
            }
            metrics?.emitDelay.record(Double(now - aggregate.windowEnd) / 1000)
        }
        batch.emitted += output.emitted.count
        for eviction in output.capacityEvictions {
            logger.warning(
                "window state reached its cap of \(eviction.maxEntries) entries: \(eviction.windowsEvicted) windows were finalized early (\(eviction.windowsEmittedEarly) emitted before their time); later hits for them go to the dead-letter topic as too_late. Raise --max-entries or lower --retention."
            )
        }
    }

    private func record(_ batch: Accounting) {
        accounting.add(batch)
        unreportedMetrics.add(batch)
    }

    private func flushMetrics() {
        metrics?.record(unreportedMetrics)
        unreportedMetrics = Accounting()
    }

    private func updateGauges() {
        flushMetrics()
        guard let metrics, let consumer else { return }
        let stats = engine.stats
        metrics.openWindows.set(Double(stats.openWindows + stats.retainedWindows))
        metrics.retainedEntries.set(Double(stats.entries))
        if let watermark = engine.watermark { metrics.watermark.set(Double(watermark)) }
        var total: Int64 = 0
        for partition in assigned {
            guard let marks = consumer.cachedWatermarks(TopicPartition(topic: config.inputTopic, partition: partition)) else { continue }
            let lag = max(0, marks.high - (nextOffset[partition] ?? marks.low))
            metrics.lag(partition: partition).set(Double(lag))
            total += lag
        }
        metrics.lagTotal.set(Double(total))
    }

    // MARK: - Offsets and rebalances

    /// Waits for every produced record to be acknowledged, then commits, per partition, the
    /// lowest offset still needed (with the checkpoint metadata for replay).
    private func commitSafeOffsets() throws {
        guard fatal == nil, let producer, let consumer, !assigned.isEmpty else { return }
        do {
            try producer.flush(timeoutMilliseconds: 60_000)
        } catch {
            throw PipelineError.deliveryFailed("\(error)")
        }
        if let failure = deliveryFailure.withLock({ $0 }) { throw PipelineError.deliveryFailed(failure) }
        let held = engine.safeOffsets()
        let horizon = engine.evictionHorizon
        var offsets: [TopicPartitionOffset] = []
        for partition in assigned.sorted() {
            guard let processed = nextOffset[partition] else { continue }
            // The engine's mark is min(lowest offset a window holds, last hit it saw + 1). When no
            // window holds anything, messages after that last hit (dead-lettered, filtered) are
            // done too, so the partition is safe up to what was processed.
            var safe = processed
            if let mark = held[partition], mark != (lastInputOffset[partition] ?? -2) + 1 { safe = min(mark, processed) }
            let checkpoint = Checkpoint(evictedBefore: horizon, processedThrough: max(processed, restoredProcessed[partition] ?? 0))
            let offset = TopicPartitionOffset(
                topic: config.inputTopic, partition: partition, offset: safe, metadata: checkpoint.encoded)
            if lastCommitted[partition] != offset { offsets.append(offset) }
        }
        guard !offsets.isEmpty else { return }
        do {
            try consumer.commit(offsets)
            for offset in offsets { lastCommitted[offset.partition] = offset }
        } catch {
            logger.warning("commit failed, will retry at the next interval: \(error)")
        }
    }

    private func partitionsAssigned(_ partitions: [TopicPartition]) {
        guard let consumer else { return }
        let mine = partitions.filter { $0.topic == config.inputTopic }
        let now = wallClockMillis()
        let committed: [TopicPartitionOffset]
        do {
            committed = try consumer.committed(mine)
        } catch {
            logger.error("reading committed offsets failed; replaying from the group's position without checkpoints: \(error)")
            committed = []
        }
        for position in committed {
            if let checkpoint = Checkpoint(decoding: position.metadata), position.offset >= 0 {
                engine.restore(
                    partition: position.partition, replayBefore: checkpoint.processedThrough,
                    evictedBefore: checkpoint.evictedBefore)
                restoredProcessed[position.partition] = checkpoint.processedThrough
            }
        }
        engine.assign(partitions: mine.map(\.partition), now: now)
        assigned.formUnion(mine.map(\.partition))
        if config.untilEnd {
            do {
                // One request for all partitions: the end offsets as of this assignment.
                let ends = try consumer.endOffsets(mine)
                let beginnings = try consumer.beginningOffsets(mine)
                for end in ends {
                    endOffsets[end.partition] = end.offset
                    let start =
                        committed.first(where: { $0.partition == end.partition && $0.offset >= 0 })?.offset
                        ?? beginnings.first(where: { $0.partition == end.partition })?.offset ?? 0
                    if start >= end.offset { atEnd.insert(end.partition) }
                }
            } catch {
                fatal = .kafka("cannot read the end offsets of \(config.inputTopic): \(error)")
            }
        }
        logger.info("assigned \(mine.count) partitions of \(config.inputTopic); state rebuilds from the committed offsets")
    }

    private func partitionsRevoking(_ partitions: [TopicPartition]) {
        do {
            try commitSafeOffsets()
        } catch {
            logger.error("commit before revoke failed: \(error)")
            if fatal == nil { fatal = error as? PipelineError ?? .kafka("\(error)") }
        }
        // Eager protocol: everything is revoked; the next owner (maybe us) replays from the commit.
        engine = ShardedWindowEngine(config: config.window, shards: config.shards)
        assigned.removeAll()
        nextOffset.removeAll()
        lastInputOffset.removeAll()
        restoredProcessed.removeAll()
        endOffsets.removeAll()
        atEnd.removeAll()
        lastCommitted.removeAll()
    }
}

func wallClockMillis() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

extension Logger {
    func with(label: String) -> Logger {
        var copy = Logger(label: label)
        copy.logLevel = logLevel
        return copy
    }
}
