import Kafka
import Logging
import Synchronization
import TrackingDomain

/// Drives one `Stage` against Kafka: owns the consumer and the producer, admits records
/// (guarding against librdkafka 2.0.x's stale or skipped deliveries), passes time, commits, follows
/// rebalances and stops at its bound.
///
/// Everything that differs between `run`, `run --until-end`, the two stages of the scaled-out
/// worker and a replay is configuration: where partitions come from (a group subscription or
/// a fixed assignment), where reading stops (nowhere, the end offsets at assignment, or the end
/// once an upstream runner finished) and whether offsets are committed.
///
/// Commit safety: an offset is committed only after a producer flush (every record sent so
/// far, on every destination, is acknowledged) and only as far as the stage's commit point,
/// which is below anything the stage still holds in memory.
public final class StageRunner<S: Stage>: @unchecked Sendable {
    // @unchecked: `stage`, `progress`, `consumer`, `producer`, `fatal` and the counters are
    // touched only by the thread inside `run` (rebalance callbacks run inside `poll`, on that
    // thread). What other threads read or call — `requestStop`, `healthProblem` — is atomic or
    // behind a mutex.

    public typealias Settings = RunnerSettings

    public let settings: Settings
    private let logger: Logger
    private let metrics: StageMetrics?
    private let clock: @Sendable () -> Int64
    private let onProgress: (@Sendable (RunnerProgress) -> Void)?
    private let stopRequested = Atomic<Bool>(false)
    private let deliveryFailure = Mutex<String?>(nil)
    /// A fatal client error reported by librdkafka's error callback; the loop stops on it.
    private let clientFatal = Mutex<KafkaError?>(nil)
    private let lastLoopMillis = Atomic<Int64>(0)
    private let startedMillis = Atomic<Int64>(0)
    /// When the group last handed this member an assignment (possibly empty); 0: never.
    private let assignedMillis = Atomic<Int64>(0)

    private var stage: S
    private var consumer: KafkaConsumer?
    private var producer: KafkaProducer?
    private var progress: ProgressTable = [:]
    private var fatal: PipelineError?
    private var totals = Accounting()
    /// Records handed to the stage since the last report (for progress between reports).
    private var pendingConsumed = 0
    /// Messages behind the end of the owned partitions, as of the last report.
    private var lastLag: Int64 = 0
    /// Partitions whose lag gauge was last set, to zero it once they are given away.
    private var lagReported: Set<Int32> = []
    private var upstreamEndsTaken = false
    /// Whether the group ever gave this runner partitions: an unknown topic after that means
    /// the topic was deleted.
    private var everAssigned = false
    private var timeline = RunnerTimeline()
    /// Bytes sent and not yet acknowledged, on every destination.
    private let backlog = OutputBacklog()
    /// Whether the input is paused because the output is behind.
    private var paused = false
    private var pauses = 0
    private var lastUnknownTopicLog: Int64 = .min / 2
    private var lastGuardLog: Int64 = .min / 2

    public init(
        stage: S, settings: Settings, logger: Logger, metrics: StageMetrics? = nil,
        clock: @escaping @Sendable () -> Int64 = wallClockMillis, onProgress: (@Sendable (RunnerProgress) -> Void)? = nil
    ) {
        self.onProgress = onProgress
        self.stage = stage
        self.settings = settings
        self.logger = logger
        self.metrics = metrics
        self.clock = clock
    }

    /// Asks `run` to stop after the batch in flight; it then commits and returns. Any thread.
    public func requestStop() {
        stopRequested.store(true, ordering: .sequentiallyConsistent)
    }

    /// nil while healthy; else why not (for `/health`).
    public var healthProblem: String? {
        if let failure = deliveryFailure.withLock({ $0 }) { return "\(stage.name): delivery failed: \(failure)" }
        let now = clock()
        let limit = settings.unhealthyAfter
        let last = lastLoopMillis.load(ordering: .relaxed)
        if last > 0 && now - last > limit {
            return "\(stage.name): the consume loop has not turned for \((now - last) / 1000) s (stuck in a call to Kafka or in a stage)"
        }
        let started = startedMillis.load(ordering: .relaxed)
        if case .group = settings.source, started > 0, assignedMillis.load(ordering: .relaxed) == 0, now - started > limit {
            return "\(stage.name): the group \(settings.consumer["group.id"] ?? "") has not assigned partitions of \(settings.topic) for \((now - started) / 1000) s (a restarted member waits about session.timeout.ms; otherwise check the group coordinator)"
        }
        return nil
    }

    // MARK: The loop

    public func run() throws -> StageSummary {
        let started = clock()
        startedMillis.store(started, ordering: .relaxed)
        let producer = try KafkaProducer(
            config: settings.producer, logger: logger.with(label: "trackpipe.kafka.producer"),
            onDelivery: { [weak self] report in
                guard let self else { return }
                self.backlog.acknowledged(Int(report.token))
                guard let error = report.error else { return }
                self.deliveryFailure.withLock { if $0 == nil { $0 = "\(report.topic)[\(report.partition)]: \(error)" } }
                self.requestStop()
            },
            onError: { [weak self] in self?.clientError($0, client: "producer") },
            isStopping: { [weak self] in self?.stopRequested.load(ordering: .relaxed) ?? true })
        self.producer = producer
        let consumer = try KafkaConsumer(
            config: settings.consumer, logger: logger.with(label: "trackpipe.kafka.consumer"),
            rebalance: RebalanceHandler(
                partitionsAssigned: { [weak self] in self?.partitionsAssigned($0) },
                partitionsRevoking: { [weak self] in self?.partitionsRevoking($0) },
                assignmentFailed: { [weak self] in self?.assignmentFailed($0) }),
            maxBatch: settings.maxBatch, onError: { [weak self] in self?.clientError($0, client: "consumer") })
        self.consumer = consumer
        var sink = ProducerSink(
            producer: producer, topics: settings.destinations, lines: settings.lineOutputs, discarded: settings.discarded,
            backlog: backlog, timesSends: settings.timings)
        switch settings.source {
        case .group:
            try consumer.subscribe(topics: [settings.topic])
        case .assignment(let offsets):
            try consumer.assign(offsets)
            partitionsAssigned(offsets.map(\.topicPartition), startingAt: offsets)
        }

        var lastTick = started
        var lastCommit = started
        var lastReport = started
        var lastProgress = started
        var lastProgressLine = started
        var lastWaitingLog = started
        var lineBase = Accounting()
        do {
            while !stopRequested.load(ordering: .relaxed) {
                var mark = RunnerTimeline.now()
                var inBatch = 0.0
                let polled = try consumer.pollBatch(timeoutMilliseconds: 100) { batch in
                    let begin = RunnerTimeline.now()
                    defer { inBatch = timeline.add(.processing, since: begin) - begin }
                    return try handle(batch, into: &sink)
                }
                mark = timeline.add(polled == nil ? .idlePolling : .polling, since: mark + inBatch)
                if let fatal { throw fatal }
                if let error = clientFatal.withLock({ $0 }) { throw fatalError(error) }
                let now = clock()
                lastLoopMillis.store(now, ordering: .relaxed)
                if polled == nil || now - lastTick >= settings.tickInterval {
                    try stage.tick(now: now, into: &sink)
                    lastTick = now
                    mark = timeline.add(.ticking, since: mark)
                }
                producer.poll()
                mark = timeline.add(.servingReports, since: mark)
                try applyBackpressure()
                if settings.commits && now - lastCommit >= settings.commitInterval {
                    try commit()
                    lastCommit = now
                    mark = RunnerTimeline.now()
                }
                if now - lastReport >= 1_000 {
                    report()
                    lastReport = now
                    mark = timeline.add(.reporting, since: mark)
                }
                if case .group = settings.source, assignedMillis.load(ordering: .relaxed) == 0, now - lastWaitingLog >= 10_000 {
                    lastWaitingLog = now
                    logger.notice(
                        "\(stage.name): waiting for partition assignment of \(settings.topic) (group \(settings.consumer["group.id"] ?? ""), \((now - started) / 1000) s so far; a member restarting in a group waits about session.timeout.ms)")
                }
                if settings.progressInterval > 0, now - lastProgressLine >= settings.progressInterval {
                    report()
                    logProgress(since: lineBase, seconds: Double(now - lastProgressLine) / 1000)
                    lineBase = totals
                    lastProgressLine = now
                }
                if let onProgress, now - lastProgress >= 250 {
                    onProgress(progressSnapshot(started: started, now: now))
                    lastProgress = now
                }
                takeUpstreamBound()
                if boundReached { break }
            }
            if let error = clientFatal.withLock({ $0 }) { throw fatalError(error) }
            if let failure = deliveryFailure.withLock({ $0 }) { throw PipelineError.deliveryFailed(failure) }
            var mark = RunnerTimeline.now()
            if settings.isBounded { try stage.finish(now: clock(), into: &sink) }
            mark = timeline.add(.finishing, since: mark)
            try awaitAcknowledgements(producer)
            for writer in settings.lineOutputs.values { try writer.flush() }
            try commit()
        } catch {
            fatal = error as? PipelineError ?? .kafka("\(error)")
            logger.error("\(stage.name): stopping without committing further: \(error)")
            consumer.close()
            report()
            throw error
        }
        // Closing revokes the partitions, which forgets their progress: read it first.
        let committed = progress.sorted { $0.key.partition < $1.key.partition }.compactMap { tp, state in
            state.lastCommitted.map { TopicPartitionOffset(tp, offset: $0.offset, metadata: $0.metadata) }
        }
        let closing = RunnerTimeline.now()
        consumer.close()
        timeline.add(.closing, since: closing)
        report()
        onProgress?(progressSnapshot(started: started, now: clock(), finished: true))
        timeline.add(.producing, seconds: sink.sendSeconds)
        timeline.total = timeline.elapsed()
        return StageSummary(
            stage: stage.name, topic: settings.topic, accounting: totals, elapsedMilliseconds: clock() - started,
            committed: committed, timeline: timeline, pauses: pauses, largestBacklog: backlog.largest)
    }

    private func progressSnapshot(started: Int64, now: Int64, finished: Bool = false) -> RunnerProgress {
        var position: Int64 = 0
        var total: Int64 = 0
        var known = !progress.isEmpty
        for state in progress.values {
            guard let end = state.end, let first = state.first else {
                known = false
                continue
            }
            total += max(0, end - first)
            position += max(0, min(state.next ?? first, end) - first)
        }
        return RunnerProgress(
            elapsedMilliseconds: now - started, consumed: totals.consumed + pendingConsumed, done: known ? position : nil,
            total: known ? total : nil, finished: finished)
    }

    /// One line of what happened since the previous one, and a warning when the share of
    /// `too_late` hits jumps: that is a clock or a replay far from now, not a trickle of
    /// offline devices, and it silently fills the dead-letter topic.
    private func logProgress(since base: Accounting, seconds: Double) {
        let delta = totals.subtracting(base)
        let letters = delta.deadLettered.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        var line = "\(stage.name): consumed \(delta.consumed) (\(Int(Double(delta.consumed) / max(seconds, 0.001)))/s), lag \(lastLag), accepted \(delta.accepted)"
        if delta.filteredTotal > 0 { line += ", filtered \(delta.filteredTotal)" }
        if settings.destinations[.output] != nil || settings.lineOutputs[.output] != nil { line += ", emitted \(delta.emitted)" }
        if delta.duplicates > 0 { line += ", duplicates dropped \(delta.duplicates)" }
        if delta.replayed > 0 { line += ", replayed \(delta.replayed)" }
        line += ", dead-lettered \(delta.deadLetteredTotal)" + (letters.isEmpty ? "" : " (\(letters))")
        line += " in the last \(Int(seconds.rounded())) s"
        logger.info("\(line)")
        let late = delta.deadLettered[RejectReason.tooLate.rawValue] ?? 0
        let hits = delta.accepted + late
        if late >= 10 && Double(late) > 0.01 * Double(hits) {
            logger.warning(
                "\(stage.name): \(late) of the last \(hits) hits (\(Int((100 * Double(late) / Double(hits)).rounded())) %) were too late for their windows and went to the dead-letter topic. Event time is far ahead of them: a device or producer clock far in the future, or old input replayed into a live worker (backfill old data with trackpipe replay), or --retention too short for how late hits arrive.")
        }
    }

    private var boundReached: Bool {
        switch settings.bound {
        case .unbounded: return false
        case .endAtAssignment: break
        case .endWhenUpstreamFinishes: if !upstreamEndsTaken { return false }
        }
        return !progress.isEmpty && progress.values.allSatisfy(\.atEnd)
    }

    // MARK: One batch

    private func handle(_ batch: ConsumerBatch, into sink: inout ProducerSink) throws -> Int {
        var records: [InputRecord] = []
        records.reserveCapacity(batch.count)
        var current: TopicPartition?
        var state = PartitionProgress()
        var owned = false
        var stale = 0
        var gaps: [(TopicPartition, Int64, Int64)] = []
        func putBack() {
            if let current, owned { progress[current] = state }
        }
        for index in batch.indices {
            switch batch[index] {
            case .record(let record):
                let partition = record.partition
                if current?.partition != partition {
                    putBack()
                    let key = TopicPartition(topic: settings.topic, partition: partition)
                    current = key
                    if let known = progress[key] {
                        state = known
                        owned = true
                    } else {
                        owned = false
                    }
                }
                // A record of a partition this runner no longer owns (librdkafka 2.0.x has
                // handed out records of revoked partitions).
                guard owned else {
                    stale += 1
                    continue
                }
                if let end = state.end, record.offset >= end {
                    state.atEnd = true
                    continue
                }
                switch state.admit(offset: record.offset) {
                case .stale:
                    stale += 1
                    continue
                case .gap(let skipped):
                    gaps.append((current!, record.offset - skipped, record.offset))
                case .take:
                    break
                }
                if let end = state.end, record.offset + 1 >= end { state.atEnd = true }
                records.append(InputRecord(record))
            case .partitionEOF(let tp, let offset):
                putBack()
                current = nil
                if var known = progress[tp], let end = known.end, offset >= end {
                    known.atEnd = true
                    progress[tp] = known
                }
            case .error(let error):
                try consumerError(error)
            }
        }
        putBack()
        if stale > 0 || !gaps.isEmpty { reportGuard(stale: stale, gaps: gaps) }
        pendingConsumed += records.count
        if !records.isEmpty {
            let at = timeline.elapsed()
            if timeline.firstRecordAt == nil { timeline.firstRecordAt = at }
            timeline.lastRecordAt = at
        }
        try stage.process(records, now: clock(), into: &sink)
        return batch.count
    }

    private func reportGuard(stale: Int, gaps: [(TopicPartition, Int64, Int64)]) {
        totals.staleDropped += stale
        totals.offsetGaps += gaps.count
        metrics?.guarded(stale: stale, gaps: gaps.count)
        for (tp, expected, got) in gaps {
            logger.warning(
                "\(stage.name): offsets of \(tp) jumped from \(expected) to \(got): \(got - expected) offsets were never delivered. Expected on compacted or transactional topics, or after retention deleted unread data; otherwise librdkafka skipped those messages (its 2.0.x batch call did, which trackpipe no longer uses): re-read them with trackpipe replay."
            )
        }
        let now = clock()
        if stale > 0 && now - lastGuardLog >= 10_000 {
            lastGuardLog = now
            logger.warning(
                "\(stage.name): dropped \(stale) records of partitions not assigned to this worker, or at offsets already processed (the consumer guard against librdkafka 2.0.x's stale deliveries); nothing is lost: their owner reads them")
        }
    }

    private func consumerError(_ error: KafkaError) throws {
        if error.isUnknownTopic {
            if settings.isBounded { throw PipelineError.inputTopicMissing(settings.topic) }
            if everAssigned {
                throw PipelineError.kafka(
                    "\(stage.name): the topic \(settings.topic) no longer exists on the cluster (deleted while trackpipe was reading it): \(error). Nothing past what was delivered was committed. Recreate the topic (or point --input-topic at the right one) and restart.")
            }
            let now = clock()
            if now - lastUnknownTopicLog > 60_000 {
                logger.error("\(PipelineError.inputTopicMissing(settings.topic)); waiting for it")
                lastUnknownTopicLog = now
            }
        } else if error.severity == .fatal {
            throw fatalError(error)
        } else {
            metrics?.kafkaError(error.severity)
            logger.warning("\(stage.name): consumer: \(error)")
        }
    }

    /// librdkafka's error callback, on this runner's thread (inside a poll). Fatal errors stop
    /// the loop; the rest are librdkafka retrying by itself: a warning and a counter.
    private func clientError(_ error: KafkaError, client: String) {
        metrics?.kafkaError(error.severity)
        if error.severity == .fatal {
            logger.error("\(stage.name): \(client): \(error)")
            clientFatal.withLock { if $0 == nil { $0 = error } }
            requestStop()
        } else {
            logger.warning("\(stage.name): \(client): \(error) (librdkafka retries by itself)")
        }
    }

    /// What the run ends with on a fatal Kafka error: the cause and what to do about it.
    private func fatalError(_ error: KafkaError) -> PipelineError {
        .kafka(
            "\(stage.name): Kafka reported an error that retrying cannot fix: \(error). \(error.remedy) Nothing past what was delivered was committed; restart once it is fixed.")
    }

    private func report() {
        let drained = stage.drainReport()
        totals.add(drained.accounting)
        pendingConsumed = 0
        for eviction in drained.capacityEvictions {
            logger.warning(
                "window state reached its cap of \(eviction.maxEntries) entries in one partition: \(eviction.windowsEvicted) windows were finalized early (\(eviction.windowsEmittedEarly) emitted before their time); later hits for them go to the dead-letter topic as too_late. Raise --max-entries or lower --retention."
            )
        }
        var lags: [Int32: Int64] = [:]
        if let consumer {
            for (tp, state) in progress {
                guard let marks = consumer.cachedWatermarks(tp) else { continue }
                lags[tp.partition] = max(0, marks.high - (state.next ?? marks.low))
            }
        }
        lastLag = lags.values.reduce(0, +)
        // A partition given away keeps no stale lag: its new owner reports it.
        let reporting = Set(lags.keys)
        for partition in lagReported.subtracting(reporting) { lags[partition] = 0 }
        lagReported = reporting
        guard let metrics else { return }
        metrics.record(drained)
        metrics.gauges(stage.gauges(), now: clock())
        metrics.lag(lags)
    }

    // MARK: Backpressure

    /// Pauses every owned partition while more than `outputBacklogLimit` bytes wait for the
    /// broker's acknowledgement, and resumes below half of it. The loop keeps polling while
    /// paused (rebalances, group liveness, ticks), so a slow output costs neither unbounded
    /// memory nor the group membership.
    private func applyBackpressure() throws {
        guard let consumer, settings.outputBacklogLimit > 0 else { return }
        let bytes = backlog.bytes
        if !paused, bytes > settings.outputBacklogLimit {
            try consumer.pause(Array(progress.keys))
            paused = true
            pauses += 1
            metrics?.paused(true)
            logger.notice(
                "\(stage.name): \(bytes / 1024) KiB of output wait for the broker's acknowledgement, more than \(settings.outputBacklogLimit / 1024) KiB (half of queue.buffering.max.kbytes): pausing the input until the output catches up")
        } else if paused, bytes <= settings.outputBacklogLimit / 2 {
            try consumer.resume(Array(progress.keys))
            paused = false
            metrics?.paused(false)
            logger.info("\(stage.name): output caught up (\(bytes / 1024) KiB waiting): resuming the input")
        }
    }

    // MARK: Offsets and rebalances

    /// Waits until every record sent so far is acknowledged; throws if any was not.
    private func awaitAcknowledgements(_ producer: KafkaProducer) throws {
        let begin = RunnerTimeline.now()
        defer { timeline.add(.awaitingAcknowledgements, since: begin) }
        do {
            try producer.flush(timeoutMilliseconds: 60_000)
        } catch {
            throw PipelineError.deliveryFailed("\(error)")
        }
        if let failure = deliveryFailure.withLock({ $0 }) { throw PipelineError.deliveryFailed(failure) }
    }

    /// Waits for every record sent so far to be acknowledged, then commits each partition's
    /// commit point (all owned partitions, or only `partitions`).
    private func commit(only partitions: Set<Int32>? = nil) throws {
        guard settings.commits, fatal == nil, let producer, let consumer, !progress.isEmpty else { return }
        try awaitAcknowledgements(producer)
        let points = stage.commitPoints()
        var offsets: [TopicPartitionOffset] = []
        for (tp, state) in progress.sorted(by: { $0.key.partition < $1.key.partition })
        where partitions?.contains(tp.partition) ?? true {
            guard let point = points[tp.partition], point != state.lastCommitted else { continue }
            if let metadata = point.metadata, metadata.utf8.count > Checkpoint.maxEncodedBytes {
                logger.error(
                    "\(stage.name): the checkpoint of \(tp) needs \(metadata.utf8.count) bytes of commit metadata, more than brokers accept (offset.metadata.max.bytes, 4096 by default); not committing it. Use fewer input partitions.")
                continue
            }
            offsets.append(TopicPartitionOffset(tp, offset: point.offset, metadata: point.metadata))
        }
        guard !offsets.isEmpty else { return }
        let begin = RunnerTimeline.now()
        defer { timeline.add(.committing, since: begin) }
        do {
            try consumer.commit(offsets)
            for offset in offsets {
                progress[offset.topicPartition]?.lastCommitted = CommitPoint(offset: offset.offset, metadata: offset.metadata)
            }
        } catch {
            logger.warning("\(stage.name): commit failed, will retry at the next interval: \(error)")
        }
    }

    private func partitionsAssigned(_ partitions: [TopicPartition], startingAt explicit: [TopicPartitionOffset]? = nil) {
        assignedMillis.store(clock(), ordering: .relaxed)
        if timeline.assignedAt == nil { timeline.assignedAt = timeline.elapsed() }
        if partitions.contains(where: { $0.topic == settings.topic }) { everAssigned = true }
        guard let consumer else { return }
        let mine = partitions.filter { $0.topic == settings.topic }
        guard !mine.isEmpty else { return }
        var committed: [TopicPartitionOffset] = explicit ?? []
        if explicit == nil {
            // Without the checkpoints, windows already final would be replayed partially and
            // dead letters sent again: retry, then stop; never carry on without them.
            for attempt in 1...3 {
                do {
                    committed = try consumer.committed(mine)
                    break
                } catch {
                    guard attempt < 3 else {
                        fatal = .kafka(
                            "\(stage.name): cannot read the committed offsets of \(settings.topic) after 3 attempts (\(error)); stopping rather than replaying without checkpoints. Check the broker and the group's ACLs, then restart.")
                        return
                    }
                    logger.warning("\(stage.name): reading committed offsets failed (attempt \(attempt) of 3): \(error)")
                }
            }
        }
        var starts: [PartitionStart] = []
        for tp in mine {
            let position = committed.first { $0.topicPartition == tp }
            let offset = position.flatMap { $0.offset >= 0 ? $0.offset : nil }
            starts.append(PartitionStart(partition: tp.partition, committedOffset: offset, metadata: position?.metadata))
            progress[tp] = PartitionProgress(next: offset)
        }
        stage.assign(starts, now: clock())
        if paused {
            do {
                try consumer.pause(mine)
            } catch {
                fatal = .kafka("\(stage.name): cannot pause newly assigned partitions while the output is behind: \(error)")
            }
        }
        if case .endAtAssignment = settings.bound { takeEnds(of: mine) }
        logger.info(
            "\(stage.name): assigned \(mine.count) partitions of \(settings.topic): \(mine.map(\.partition).sorted()); their state rebuilds from the committed offsets",
            metadata: ["client": "\(settings.consumer["client.id"] ?? "")"])
    }

    private func partitionsRevoking(_ partitions: [TopicPartition]) {
        let mine = partitions.filter { $0.topic == settings.topic && progress[$0] != nil }
        guard !mine.isEmpty else { return }
        do {
            try commit(only: Set(mine.map(\.partition)))
        } catch {
            logger.error("\(stage.name): commit before revoke failed: \(error)")
            if fatal == nil { fatal = error as? PipelineError ?? .kafka("\(error)") }
        }
        stage.revoke(mine.map(\.partition))
        for tp in mine { progress[tp] = nil }
        logger.info(
            "\(stage.name): revoked \(mine.count) partitions of \(settings.topic): \(mine.map(\.partition).sorted())",
            metadata: ["client": "\(settings.consumer["client.id"] ?? "")"])
    }

    private func assignmentFailed(_ error: KafkaError) {
        guard fatal == nil else { return }
        fatal = .kafka(
            "\(stage.name): librdkafka refused the partitions the group \(settings.consumer["group.id"] ?? "") decided: \(error). This member and the group disagree on what it owns; stopping without committing further (a restart rejoins cleanly).")
    }

    /// Notes where each partition ends now; a partition already there is at its end.
    private func takeEnds(of partitions: [TopicPartition]) {
        guard let consumer, !partitions.isEmpty else { return }
        do {
            let ends = try consumer.endOffsets(partitions)
            let unknown = partitions.filter { progress[$0]?.next == nil }
            let beginnings = unknown.isEmpty ? [] : try consumer.beginningOffsets(unknown)
            for end in ends {
                guard var state = progress[end.topicPartition] else { continue }
                state.end = end.offset
                let start = state.next ?? beginnings.first { $0.topicPartition == end.topicPartition }?.offset ?? 0
                state.first = state.first ?? start
                if start >= end.offset { state.atEnd = true }
                progress[end.topicPartition] = state
            }
        } catch {
            fatal = .kafka("\(stage.name): cannot read the end offsets of \(settings.topic): \(error)")
        }
    }

    private func takeUpstreamBound() {
        guard case .endWhenUpstreamFinishes(let upstream) = settings.bound, !upstreamEndsTaken, upstream.isFinished,
            !progress.isEmpty
        else { return }
        upstreamEndsTaken = true
        takeEnds(of: Array(progress.keys))
    }
}

/// Sends a stage's records through the producer to the topic of each destination.
struct ProducerSink: RecordSink {
    let producer: KafkaProducer
    let topics: [Destination: KafkaProducer.Topic]
    let lines: [Destination: LineWriter]
    let discarded: Set<Destination>
    let backlog: OutputBacklog
    /// Whether to time each produce call (two clock reads a record) into `sendSeconds`.
    var timesSends = false
    private(set) var sendSeconds = 0.0

    init(
        producer: KafkaProducer, topics: [Destination: String], lines: [Destination: LineWriter], discarded: Set<Destination>,
        backlog: OutputBacklog, timesSends: Bool = false
    ) {
        self.producer = producer
        self.backlog = backlog
        self.topics = topics.mapValues { producer.topic($0) }
        self.lines = lines
        self.discarded = discarded
        self.timesSends = timesSends
    }

    mutating func send(
        _ destination: Destination, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?
    ) throws {
        if let topic = topics[destination] {
            let begin = timesSends ? RunnerTimeline.now() : 0
            defer { if timesSends { sendSeconds += RunnerTimeline.now() - begin } }
            // The record's size is its token: its delivery report takes it off the backlog.
            let size = (key?.count ?? 0) + (value?.count ?? 0)
            backlog.sent(size)
            do {
                try producer.send(
                    to: topic, partition: partition, key: key, value: value, headers: headers, timestamp: timestamp,
                    token: UInt64(size))
            } catch {
                backlog.acknowledged(size)
                throw error
            }
        } else if let writer = lines[destination] {
            try writer.write(value ?? UnsafeRawBufferPointer(start: nil, count: 0))
        } else if !discarded.contains(destination) {
            throw PipelineError.configuration("a stage sent a record to the \(destination) destination, which has no topic here")
        }
    }
}

/// What one stage did in a run, for the exit summary and for tests.
public struct StageSummary: Sendable {
    public var stage: String
    public var topic: String
    public var accounting: Accounting
    public var elapsedMilliseconds: Int64
    public var committed: [TopicPartitionOffset]
    public var timeline = RunnerTimeline()
    /// Times the input was paused because the output was behind, and the most bytes that
    /// waited for acknowledgement at once.
    public var pauses = 0
    public var largestBacklog = 0
}

/// Bytes sent and not yet acknowledged. Sends add on the runner's thread; delivery reports
/// subtract on whichever thread serves them.
final class OutputBacklog: Sendable {
    private let current = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)

    var bytes: Int { current.load(ordering: .relaxed) }
    var largest: Int { peak.load(ordering: .relaxed) }

    func sent(_ size: Int) {
        let now = current.add(size, ordering: .relaxed).newValue
        if now > peak.load(ordering: .relaxed) { peak.store(now, ordering: .relaxed) }
    }

    func acknowledged(_ size: Int) { current.subtract(size, ordering: .relaxed) }
}

/// How a `StageRunner` meets Kafka: see `StageRunner`.
public struct RunnerSettings: Sendable {
    public enum Source: Sendable {
        /// Partitions come from a consumer group subscription; commits go to the group.
        case group
        /// A fixed assignment with explicit start offsets: no group, no rebalances.
        case assignment([TopicPartitionOffset])
    }

    public enum Bound: Sendable {
        case unbounded
        /// Stop at each partition's end offset as of its assignment.
        case endAtAssignment
        /// Stop at the end offsets as of the moment the upstream runner finished.
        case endWhenUpstreamFinishes(UpstreamSignal)
    }

    public var topic: String
    public var source: Source
    public var bound: Bound
    public var commits: Bool
    public var consumer: KafkaConfig
    public var producer: KafkaConfig
    public var destinations: [Destination: String]
    /// Destinations written as JSON Lines (one record value per line) instead of a topic.
    public var lineOutputs: [Destination: LineWriter] = [:]
    /// Destinations whose records are counted but not sent anywhere (a replay without a
    /// dead-letter topic).
    public var discarded: Set<Destination> = []
    public var commitInterval: Int64
    /// How often a progress line is logged (ms); 0 turns it off.
    public var progressInterval: Int64 = 30_000
    /// `/health` reports a problem after this long without a turn of the loop, or, in a group,
    /// without an assignment (ms).
    public var unhealthyAfter: Int64 = 60_000
    /// How often the stage is given the time when records keep coming (ms).
    public var tickInterval: Int64 = 200
    public var maxBatch: Int = 4_096
    /// Time every produce call for the timeline (`run --timings`).
    public var timings = false
    /// Unacknowledged output (bytes) above which the input is paused; 0: never pause.
    public var outputBacklogLimit = 32 << 20

    public init(
        topic: String, source: Source, bound: Bound, commits: Bool, consumer: KafkaConfig, producer: KafkaConfig,
        destinations: [Destination: String], commitInterval: Int64
    ) {
        self.topic = topic
        self.source = source
        self.bound = bound
        self.commits = commits
        self.consumer = consumer
        self.producer = producer
        self.destinations = destinations
        self.commitInterval = commitInterval
    }

    var isBounded: Bool {
        if case .unbounded = bound { false } else { true }
    }
}

/// How far a bounded runner has got, for a progress display.
public struct RunnerProgress: Sendable {
    public var elapsedMilliseconds: Int64
    /// Records handed to the stage so far.
    public var consumed: Int
    /// Offsets read and to read in all, over every partition's bounded range; nil until known.
    public var done: Int64?
    public var total: Int64?
    public var finished: Bool

    public init(elapsedMilliseconds: Int64, consumed: Int, done: Int64?, total: Int64?, finished: Bool) {
        self.elapsedMilliseconds = elapsedMilliseconds
        self.consumed = consumed
        self.done = done
        self.total = total
        self.finished = finished
    }
}
