import Kafka
import Logging
import Synchronization

/// Where a stage's records go, and how far behind the broker is: the producer, the sink the
/// stage writes through, the bytes that wait for acknowledgement, and the pause of the input
/// while too many do. A slow output therefore costs neither unbounded memory nor the group
/// membership: the loop keeps polling (rebalances, liveness, ticks) while the input is paused.
struct OutputChannel {
    let producer: KafkaProducer
    var sink: ProducerSink
    /// Unacknowledged bytes above which the input is paused (it resumes below half); 0: never.
    let limit: Int
    private let backlog: OutputBacklog
    /// Where each partition of the state topic ends, as far as acknowledged.
    private let changelogEnds: AcknowledgedEnds
    private let control: RunnerControl
    private let stageName: String
    private let logger: Logger
    private let metrics: StageMetrics?
    /// Whether the input is paused because the output is behind, and how often it was.
    private(set) var paused = false
    private(set) var pauses = 0

    init(
        stageName: String, settings: RunnerSettings, control: RunnerControl, logger: Logger, metrics: StageMetrics?,
        onClientError: @escaping @Sendable (KafkaError) -> Void
    ) throws {
        let backlog = OutputBacklog()
        let changelogEnds = AcknowledgedEnds()
        let stateTopic = settings.destinations[.changelog]
        producer = try KafkaProducer(
            config: settings.producer, logger: logger.with(label: "trackpipe.kafka.producer"),
            onDelivery: { report in
                backlog.acknowledged(Int(report.token))
                guard let error = report.error else {
                    if report.topic == stateTopic { changelogEnds.acknowledged(partition: report.partition, offset: report.offset) }
                    return
                }
                control.deliveryFailed("\(report.topic)[\(report.partition)]: \(error)")
            },
            onError: onClientError,
            isStopping: { control.isStopRequested })
        sink = ProducerSink(
            producer: producer, topics: settings.destinations, lines: settings.lineOutputs, discarded: settings.discarded,
            backlog: backlog, timesSends: settings.timings)
        self.backlog = backlog
        self.changelogEnds = changelogEnds
        self.control = control
        self.limit = settings.outputBacklogLimit
        self.stageName = stageName
        self.logger = logger
        self.metrics = metrics
    }

    /// The most bytes that waited for acknowledgement at once.
    var largestBacklog: Int { backlog.largest }

    /// Per partition of the state topic, the offset after the last record acknowledged.
    var acknowledgedChangelogEnds: [Int32: Int64] { changelogEnds.ends }

    /// Serves the producer's delivery reports that arrived since the last call.
    func serveReports() { producer.poll() }

    /// Waits until every record sent so far is acknowledged; throws if any was not.
    func awaitAcknowledgements(timeline: inout RunnerTimeline) throws {
        let begin = RunnerTimeline.now()
        defer { timeline.add(.awaitingAcknowledgements, since: begin) }
        do {
            try producer.flush(timeoutMilliseconds: 60_000)
        } catch {
            throw PipelineError.deliveryFailed("\(error)")
        }
        if let failure = control.deliveryFailure { throw PipelineError.deliveryFailed(failure) }
    }

    /// Pauses every owned partition while more than `limit` bytes wait for the broker's
    /// acknowledgement, and resumes below half of it.
    mutating func applyBackpressure(to consumer: KafkaConsumer, owned partitions: [TopicPartition]) throws {
        guard limit > 0 else { return }
        let bytes = backlog.bytes
        if !paused, bytes > limit {
            try consumer.pause(partitions)
            paused = true
            pauses += 1
            metrics?.paused(true)
            logger.notice(
                "\(stageName): \(bytes / 1024) KiB of output wait for the broker's acknowledgement, more than \(limit / 1024) KiB (half of queue.buffering.max.kbytes): pausing the input until the output catches up")
        } else if paused, bytes <= limit / 2 {
            try consumer.resume(partitions)
            paused = false
            metrics?.paused(false)
            logger.info("\(stageName): output caught up (\(bytes / 1024) KiB waiting): resuming the input")
        }
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
    /// Records sent to the state topic, for its metric.
    private(set) var changelogRecords = 0

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
            if destination == .changelog { changelogRecords += 1 }
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

/// The end of each partition of one topic as far as its records are acknowledged. Delivery
/// reports write it on whichever thread serves them; the runner reads it after a flush.
final class AcknowledgedEnds: Sendable {
    private let state = Mutex<[Int32: Int64]>([:])

    func acknowledged(partition: Int32, offset: Int64) {
        guard offset >= 0 else { return }
        state.withLock { $0[partition] = max($0[partition] ?? 0, offset + 1) }
    }

    var ends: [Int32: Int64] { state.withLock { $0 } }
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
