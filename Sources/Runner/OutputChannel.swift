import RecordFormats
import Kafka
import Logging
import Synchronization

/// Where a stage's records go, and how far behind the broker is: the producer, the sink the
/// stage writes through, the bytes that wait for acknowledgement, and the pause of the input
/// while too many do. A slow output therefore costs neither unbounded memory nor the group
/// membership: the loop keeps polling (rebalances, liveness, ticks) while the input is paused.
struct OutputChannel: RunnerPart {
    let context: RunnerContext
    let producer: any ProducerClient
    var sink: ProducerSink
    /// Unacknowledged bytes above which the input is paused (it resumes below half); 0: never.
    let limit: Int
    private let backlog: OutputBacklog
    /// Where the records sent to the state topic and to each output topic lie, as far as acknowledged.
    private let changelogEnds: AcknowledgedOffsets, outputs: [String: AcknowledgedOffsets]
    /// Dead letters the broker refused for their size, to be sent again cut smaller.
    private let refused: RefusedDeadLetters
    let control: RunnerControl
    /// How often the input was paused because the output was behind.
    private(set) var pauses = 0

    init(_ context: RunnerContext, control: RunnerControl, onClientError: @escaping @Sendable (KafkaError) -> Void) throws {
        let settings = context.settings
        let backlog = OutputBacklog()
        let changelogEnds = AcknowledgedOffsets()
        let outputs = Dictionary(uniqueKeysWithValues: settings.outputTopics.map { ($0, AcknowledgedOffsets()) })
        let refused = RefusedDeadLetters()
        let stateTopic = settings.destinations[.changelog]
        let deadLetterTopic = settings.destinations[.deadLetter]
        let recordLimit = settings.recordLimit
        let outputList = outputs.map { (topic: $0.key, offsets: $0.value) }
        producer = try settings.clients.producer(
            config: settings.producer, logger: context.logger.with(label: "trackpipe.kafka.producer"),
            onDelivery: { report in
                backlog.acknowledged(Int(report.token))
                guard let error = report.error else {
                    // Compared, not hashed: a report names its topic with the String its topic
                    // handle was made from, the settings' own like these, which `==` then tells
                    // by identity; hashing it into `outputs` cost about 480 instructions a report
                    // (callgrind).
                    if report.topic == stateTopic { changelogEnds.acknowledged(partition: report.partition, offset: report.offset) }
                    if let output = outputList.first(where: { $0.topic == report.topic }) {
                        output.offsets.acknowledged(partition: report.partition, offset: report.offset)
                    }
                    return
                }
                // A dead letter the topic refused for its size is that one record's failure: it
                // goes again, cut smaller (`resendRefused`). Anything else belongs to the topic or
                // the cluster, and the run stops on it.
                if report.topic == deadLetterTopic, error.isRecordTooLarge, let record = report.refused {
                    refused.add(record)
                    return
                }
                control.deliveryFailed(Self.refusal(of: report, error: error, recordLimit: recordLimit.bytes))
            },
            onError: onClientError,
            isStopping: { control.isStopRequested })
        sink = try ProducerSink(
            producer: producer, topics: settings.destinations, outputsBySize: settings.outputsBySize, lines: settings.lineOutputs, discarded: settings.discarded,
            backlog: backlog, recordLimit: recordLimit, timesSends: settings.timings)
        self.backlog = backlog
        (self.changelogEnds, self.outputs) = (changelogEnds, outputs)
        self.refused = refused
        self.control = control
        self.limit = settings.outputBacklogLimit
        self.context = context
    }

    /// What the run stops with when the broker refuses one of trackpipe's own records: the
    /// topic's settings or permissions are wrong, and the sentence says which to change.
    static func refusal(of report: DeliveryReport, error: KafkaError, recordLimit: Int) -> String {
        let at = "\(report.topic)[\(report.partition)]"
        if error.isRecordTooLarge {
            let size = report.refused.map { DeadLetterCut.size(keyBytes: $0.key?.count ?? 0, valueBytes: $0.value?.count ?? 0, headers: $0.headers) }
            return "\(at): \(error). trackpipe keeps its own records within \(recordLimit) bytes (the producer's message.max.bytes\(size.map { "; this one took about \($0)" } ?? "")), and the topic takes less: raise the topic's max.message.bytes to at least \(recordLimit), or lower -X message.max.bytes below what it takes"
        }
        if error.isUnknownTopic {
            return "\(at): \(error). The topic does not exist and the cluster does not create it: create it (docs/deploy.md lists every topic trackpipe writes)"
        }
        return "\(at): \(error). \(error.remedy)"
    }

    /// The most bytes that waited for acknowledgement at once.
    var largestBacklog: Int { backlog.largest }

    /// Per partition of the state topic, the offset after the last record acknowledged.
    var acknowledgedChangelogEnds: [Int32: Int64] { changelogEnds.records.spans.mapValues(\.upperBound) }

    /// Where the records sent to the output topic lie, as far as acknowledged.
    var acknowledgedOutput: [String: AcknowledgedRecords] { outputs.mapValues(\.records) }

    /// Serves the producer's delivery reports that arrived since the last call, and sends again,
    /// cut smaller, the dead letters the broker refused for their size.
    mutating func serveReports() throws {
        producer.poll(timeoutMilliseconds: 0)
        try resendRefused()
    }

    /// Each refused dead letter goes again at half the size it was refused at: the broker does
    /// not say what it takes, and halving finds it in a few rounds. One refused at the floor
    /// (`ProducerSink.smallestCut`) would be refused whatever it held: the topic is misconfigured.
    private mutating func resendRefused() throws {
        for record in refused.take() {
            let size = DeadLetterCut.size(keyBytes: record.key?.count ?? 0, valueBytes: record.value?.count ?? 0, headers: record.headers)
            guard size > ProducerSink.smallestCut else {
                throw PipelineError.deliveryFailed(
                    "the dead-letter topic refused a dead letter of \(size) bytes as too large: its max.message.bytes is below what any dead letter needs; raise it (1048588 is Kafka's default)")
            }
            logger.warning("\(stageName): the dead-letter topic refused a dead letter of about \(size) bytes as too large: sending it again cut to \(size / 2)")
            try sink.send(OwnedDeadLetter(record), limit: max(ProducerSink.smallestCut, size / 2))
        }
        if sink.cutDeadLetters > 0 {
            metrics?.deadLettersCut(sink.cutDeadLetters)
            sink.cutDeadLetters = 0
        }
    }

    /// How long `awaitAcknowledgements` waits for the broker; either way no longer than
    /// `stopGrace` after a stop was requested.
    enum Patience {
        /// As long as it takes while the run goes on (an outage is waited out).
        case untilStopped
        /// At most this many milliseconds: inside a rebalance callback, where the whole group waits.
        case bounded(Int64)
    }

    /// The most the run waits for acknowledgements after a stop was requested, all its waits
    /// together (the last commit, a revoke while leaving the group), before it gives up its last
    /// commit: well inside the time orchestrators give a stop (Docker 10 s by default, the
    /// compose file 30 s, Kubernetes 30 s by default and the manifest 60 s) once the batch in
    /// flight is done.
    static let stopGrace: Int64 = 10_000

    /// Waits until every record sent so far is acknowledged (dead letters refused for their size
    /// sent again, cut); false if `patience` ran out first. Throws if a record was refused for
    /// good. The wait is in slices, each a turn of the loop as far as liveness goes: waiting on
    /// the cluster is not what a restart would fix.
    mutating func awaitAcknowledgements(timeline: inout RunnerTimeline, patience: Patience = .untilStopped) throws -> Bool {
        let begin = RunnerTimeline.now()
        defer { timeline.add(.awaitingAcknowledgements, since: begin) }
        let clock = control.clock
        let started = clock()
        while true {
            let acknowledged = try control.waitingOnKafka("the broker to acknowledge \(producer.outstanding) records", since: started) {
                do {
                    try producer.flush(timeoutMilliseconds: 1_000)
                    return true
                } catch let error as KafkaError where error.isTimedOut {
                    return false
                }
            }
            try resendRefused()
            if let failure = control.deliveryFailure { throw PipelineError.deliveryFailed(failure) }
            if acknowledged && producer.outstanding == 0 { return true }
            if let sinceStop = control.sinceStopRequested, sinceStop >= Self.stopGrace { return false }
            if case .bounded(let limit) = patience, clock() - started >= limit { return false }
        }
    }

    /// Whether the input, paused for the output's sake or not (`paused`), should change: paused
    /// while more than `limit` bytes wait for the broker's acknowledgement, resumed below half
    /// of it; nil: as it is. `apply` pauses or resumes it; the change is then counted and said.
    mutating func backpressure(paused: Bool, apply: (_ pause: Bool) throws -> Void) throws -> Bool? {
        guard limit > 0 else { return nil }
        let bytes = backlog.bytes
        if !paused, bytes > limit {
            try apply(true)
            pauses += 1
            metrics?.paused(true)
            logger.notice(
                "\(stageName): \(bytes / 1024) KiB of output wait for the broker's acknowledgement, more than \(limit / 1024) KiB (half of queue.buffering.max.kbytes): pausing the input until the output catches up")
            return true
        } else if paused, bytes <= limit / 2 {
            try apply(false)
            metrics?.paused(false)
            logger.info("\(stageName): output caught up (\(bytes / 1024) KiB waiting): resuming the input")
            return false
        }
        return nil
    }
}

/// Sends a stage's records through the producer to the topic of each destination; a record
/// larger than a record may be becomes what its type makes of it (`OutgoingRecord.fit`).
struct ProducerSink: RecordSink {
    let producer: any ProducerClient
    let topics: [Destination: ProducerTopic]
    /// Each window size's output topic, where there are several (`RunnerSettings.outputsBySize`).
    let outputsBySize: [Int64: ProducerTopic]
    let lines: [Destination: LineWriter]
    let discarded: Set<Destination>
    let backlog: OutputBacklog
    /// The most bytes one record may take (see `RecordLimit`).
    let recordLimit: RecordLimit
    /// Whether to time each produce call (two clock reads a record) into `sendSeconds`.
    var timesSends = false
    private(set) var sendSeconds = 0.0
    /// Records sent to the state topic, for its metric, and to the output topic.
    private(set) var changelogRecords = 0, outputRecords = 0
    /// Records cut to fit since the metric last took them: dead letters, the one kind that cuts.
    var cutDeadLetters = 0

    /// The smallest size a dead letter is cut to: its headers alone take a few hundred bytes.
    static let smallestCut = 4_096

    init(
        producer: any ProducerClient, topics: [Destination: String], outputsBySize: [Int64: String] = [:], lines: [Destination: LineWriter], discarded: Set<Destination>,
        backlog: OutputBacklog, recordLimit: RecordLimit = RecordLimit(bytes: RecordLimit.librdkafkaDefault), timesSends: Bool = false
    ) throws {
        self.producer = producer
        self.backlog = backlog
        self.topics = try topics.mapValues { try producer.topic($0) }
        self.outputsBySize = try outputsBySize.mapValues { try producer.topic($0) }
        self.lines = lines
        self.discarded = discarded
        self.recordLimit = recordLimit
        self.timesSends = timesSends
    }

    mutating func send(_ record: some OutgoingRecord) throws {
        try send(record, limit: recordLimit.bytes)
    }

    /// `limit`: the most bytes the record may take before its type decides what becomes of it
    /// (`OutgoingRecord.fit`); below the producer's own for a dead letter the topic refused.
    mutating func send(_ record: some OutgoingRecord, limit: Int) throws {
        let destination = record.destination
        // An output record goes to its size's topic where each size has one.
        let topic = destination == .output ? record.windowSize.flatMap { outputsBySize[$0] } ?? topics[.output] : topics[destination]
        if let topic {
            try produce(record, to: topic, limit: limit)
            if destination == .changelog { changelogRecords += 1 }
            if destination == .output { outputRecords += 1 }
        } else if let writer = lines[destination] {
            try record.withBytes { _, value in try writer.write(value ?? UnsafeRawBufferPointer(start: nil, count: 0)) }
        } else if !discarded.contains(destination) {
            throw PipelineError.configuration("a stage sent a record to the \(destination) destination, which has no topic here")
        }
    }

    /// The record, as its type fits it to `limit`. librdkafka refusing it for its size all the
    /// same (its count of the overhead differs) halves the limit and tries again, for a type
    /// that cuts at all.
    private mutating func produce<Record: OutgoingRecord>(_ record: Record, to topic: ProducerTopic, limit: Int) throws {
        if try produceWithHeaderBlock(record, to: topic, limit: limit) { return }
        let partition = record.partition, headers = record.headers, timestamp = record.timestamp
        var limit = limit
        try record.withBytes { key, value in
            while true {
                let fit = Record.fit(key: key, value: value, headers: headers, limit: limit)
                do {
                    if case .cut(let cut) = fit {
                        try produce(
                            to: topic, partition: partition, key: key.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.keyBytes]) },
                            value: value.map { UnsafeRawBufferPointer(rebasing: $0[0..<cut.valueBytes]) }, headers: cut.headers,
                            timestamp: timestamp)
                        cutDeadLetters += 1
                    } else {
                        try produce(to: topic, partition: partition, key: key, value: value, headers: headers, timestamp: timestamp)
                    }
                    return
                } catch let error as KafkaError where error.isRecordTooLarge && fit.cuts && limit > Self.smallestCut {
                    limit = max(Self.smallestCut, limit / 2)
                }
            }
        }
    }

    /// A record that lends its headers as bytes (a held dead letter) and fits `limit`, sent
    /// with them where they lie: as `KafkaHeader`s, each header was a String and an array, made
    /// and freed per record. false: it lends none, or it does not fit (or the producer refused
    /// it for its size all the same), and goes the general way, which cuts it.
    private mutating func produceWithHeaderBlock<Record: OutgoingRecord>(_ record: Record, to topic: ProducerTopic, limit: Int) throws -> Bool {
        let partition = record.partition, timestamp = record.timestamp, producer = self.producer
        return try record.withHeaderBlock { block in
            guard let block else { return false }
            return try record.withBytes { key, value in
                // Whatever its type, a record that fits is sent whole.
                guard DeadLetterCut.size(keyBytes: key?.count ?? 0, valueBytes: value?.count ?? 0, headerBlock: block) <= limit else { return false }
                do {
                    try produce(key: key, value: value) { token in
                        try producer.send(
                            to: topic, partition: partition, key: key, value: value, headerBlock: block, timestamp: timestamp, token: token)
                    }
                    return true
                } catch let error as KafkaError where error.isRecordTooLarge {
                    return false
                }
            }
        }
    }

    private mutating func produce(
        to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?
    ) throws {
        let producer = self.producer
        try produce(key: key, value: value) { token in
            try producer.send(to: topic, partition: partition, key: key, value: value, headers: headers, timestamp: timestamp, token: token)
        }
    }

    /// Sends through `send`, whose token is the record's size: its delivery report takes it off
    /// the backlog.
    private mutating func produce(key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, _ send: (_ token: UInt64) throws -> Void) throws {
        let begin = timesSends ? RunnerTimeline.now() : 0
        defer { if timesSends { sendSeconds += RunnerTimeline.now() - begin } }
        let size = (key?.count ?? 0) + (value?.count ?? 0)
        backlog.sent(size)
        do {
            try send(UInt64(size))
        } catch {
            backlog.acknowledged(size)
            throw error
        }
    }
}

/// Dead letters the broker refused for their size. Delivery reports add on whichever thread
/// serves them; the runner takes them after serving.
final class RefusedDeadLetters: Sendable {
    private let records = Mutex<[RefusedRecord]>([])

    func add(_ record: RefusedRecord) { records.withLock { $0.append(record) } }

    func take() -> [RefusedRecord] {
        records.withLock { records in
            defer { records = [] }
            return records
        }
    }
}

/// Where the records a run sent to one topic lie, as far as acknowledged: per partition from the
/// first offset to past the last (other writers' records may lie between), and how many.
package struct AcknowledgedRecords: Sendable, Equatable {
    package var spans: [Int32: Range<Int64>] = [:]
    package var count = 0

    package init(spans: [Int32: Range<Int64>] = [:], count: Int = 0) {
        self.spans = spans
        self.count = count
    }
}

/// `AcknowledgedRecords` of one topic. Delivery reports write it on whichever thread serves
/// them; the runner reads it after a flush.
final class AcknowledgedOffsets: Sendable {
    private let state = Mutex(AcknowledgedRecords())

    func acknowledged(partition: Int32, offset: Int64) {
        guard offset >= 0 else { return }
        state.withLock {
            // One lookup of the partition, not a read then a write (each hashed the partition).
            Self.widen(&$0.spans[partition, default: offset..<offset + 1], toHold: offset)
            $0.count += 1
        }
    }

    private static func widen(_ span: inout Range<Int64>, toHold offset: Int64) {
        span = min(span.lowerBound, offset)..<max(span.upperBound, offset + 1)
    }

    var records: AcknowledgedRecords { state.withLock { $0 } }
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
