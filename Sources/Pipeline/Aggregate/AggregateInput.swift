import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// How a window stage (the aggregate stage, or `replay`'s) reads its input. The stage counts;
/// an input turns each record into what counting needs (events with their source position, the
/// sources' watermarks, and what must be dead-lettered or was filtered) and, for a dead letter,
/// finds the bytes to send.
///
/// Two inputs exist: raw hits, for input already keyed by delivery and for `replay`
/// (`RawHitInput`), and the repartition topic behind the shuffle (`RepartitionInput`).
public protocol AggregateInput: Sendable {
    /// What a task makes of the sources of its events, the one thing that differs on either
    /// side of the shuffle: behind it, the input partitions upstream (the records say how many),
    /// which send events again after a crash before their commit, recognised by their source
    /// position; before it, each partition read is its own source, and nothing arrives twice.
    var taskSources: TaskSources { get }

    /// Appends what `record` (the `index`-th of its batch) holds to `batch`.
    func decode(_ record: PolledRecord, at index: Int, into batch: inout DecodedBatch)

    /// How many events the records at `indices` (or in `range`) hold, at most: the room a
    /// batch makes before decoding them.
    func eventCount(of records: [PolledRecord], at indices: [Int]) -> Int
    func eventCount(of records: [PolledRecord], at range: Range<Int>) -> Int

    /// The record to send to the dead-letter topic for `reference`: the original key, value and
    /// timestamp of the hit, with where it was first read.
    func deadLetter(
        _ reference: DeadLetterReference, of record: PolledRecord, reason: RejectReason, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter

    /// A task's dead letters (in reference order), made from the records they are about while
    /// the batch is alive.
    func deadLetters(_ pending: [PendingDeadLetter], of records: [PolledRecord], sourceTopic: String) -> [OutgoingDeadLetter]
}

extension AggregateInput {
    /// The records at `indices`, decoded in order.
    ///
    /// Concrete index types, not `some Sequence<Int>`: the window stages run generic over their
    /// input (`AggregateStage<Input>`, called through the runner's `Stage`), where a generic
    /// sequence was walked through its witnesses, an iterator and a subscript coroutine that
    /// allocated, per record (about 450 instructions a record, 4 % of one stage's: callgrind).
    ///
    /// Room for the records' events is made first: grown by doubling, the events were copied
    /// about twice over per batch (150 instructions a hit: callgrind).
    func decode(_ records: [PolledRecord], at indices: [Int]) -> DecodedBatch {
        var batch = DecodedBatch(room: eventCount(of: records, at: indices))
        for index in indices { decode(records[index], at: index, into: &batch) }
        return batch
    }

    /// The records in `range`, decoded in order.
    func decode(_ records: [PolledRecord], at range: Range<Int>) -> DecodedBatch {
        var batch = DecodedBatch(room: eventCount(of: records, at: range))
        for index in range { decode(records[index], at: index, into: &batch) }
        return batch
    }

    /// One event a record (raw hits).
    public func eventCount(of records: [PolledRecord], at indices: [Int]) -> Int { indices.count }
    public func eventCount(of records: [PolledRecord], at range: Range<Int>) -> Int { range.count }

    /// Every record decoded on `lanes` threads over contiguous chunks, joined in record order:
    /// a batch that one task counts would otherwise decode on one thread.
    func decodeInParallel(_ records: [PolledRecord], lanes: Int) -> DecodedBatch {
        let chunks = inParallelChunks(of: records.count, lanes: lanes) { range in decode(records, at: range) }
        var joined = chunks[0]
        for chunk in chunks.dropFirst() { joined.append(chunk) }
        return joined
    }

    /// Each letter made on its own (`deadLetter`).
    public func deadLetters(_ pending: [PendingDeadLetter], of records: [PolledRecord], sourceTopic: String) -> [OutgoingDeadLetter] {
        pending.map { letter in
            deadLetter(letter.reference, of: records[letter.reference.record], reason: letter.reason, detail: letter.detail, sourceTopic: sourceTopic)
        }
    }
}

/// Which message a dead letter is about: a record of the batch, and for a record that carries
/// several events (the batched repartition format), which of them.
public struct DeadLetterReference: Sendable, Hashable, Comparable {
    /// The record's index in its batch.
    public var record: Int
    /// The event's index within the record; nil for the record as a whole.
    public var event: Int?

    public init(record: Int, event: Int? = nil) {
        self.record = record
        self.event = event
    }

    public static func < (a: Self, b: Self) -> Bool {
        (a.record, a.event ?? -1) < (b.record, b.event ?? -1)
    }
}

extension OutgoingDeadLetter: DeadLetterRecord {
    /// The dead letter of `record` as it was read, at its position in `sourceTopic`.
    init(_ record: PolledRecord, reason: RejectReason, detail: String, sourceTopic: String) {
        self.init(
            letter: DeadLetter(
                reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: record.partition, sourceOffset: record.offset),
            key: record.key, value: record.value, timestamp: record.timestamp)
    }

    public func withBytes<R>(_ body: (_ key: UnsafeRawBufferPointer?, _ value: UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        guard let normalized else { return try body(key, value) }
        return try normalized.withUnsafeBytes { try body(nil, $0) }
    }
}

/// What an input made of a task's share of a batch, in record order.
public struct DecodedBatch: Sendable {
    /// Where a hit to count (`inputs`, at the same index, which holds its record's partition
    /// and offset) was first read, and how it is dead-lettered.
    struct Event: Sendable {
        /// The input partition the hit was first read from, and its offset there: the key the
        /// duplicate filter recognises a re-sent event by.
        var source: SourceKey
        var sourceOffset: Int64
        var reference: DeadLetterReference
        /// Its original message can be dead-lettered as it arrived: false for an event that
        /// crossed the shuffle without it (`OriginalRule`).
        var carriesOriginal = true
    }

    /// A message that cannot be counted.
    struct Rejection: Sendable {
        var reason: RejectReason
        var detail: String
        var reference: DeadLetterReference
        /// The offset of the record it came in.
        var offset: Int64
        /// The time the message is about (its Kafka timestamp), for a backfill's range; nil when
        /// unknown.
        var time: Int64?
    }

    /// The hits to count, as the engine takes them, each tagged with its index here: a batch
    /// without copies to drop is counted as it is. Made into inputs as the task counted them,
    /// every hit was copied once more, and its ids retained and released (about 60
    /// instructions a hit: callgrind, two stages).
    var inputs: [WindowInput] = []
    var events: [Event] = []
    var rejections: [Rejection] = []
    /// Hits the tracking rule filtered: the offset of each one's record, the reason, and the
    /// time the hit is about (its Kafka timestamp) for a backfill's range; nil when unknown.
    var filtered: [(offset: Int64, reason: FilterReason, time: Int64?)] = []
    /// The sources' watermarks, as the events and marks records of the batch reported them.
    var marks = SourceMarks<SourceKey>()
    /// How many partitions each input incarnation upstream has, as the records say.
    var sourcePartitions: [UInt64: Int] = [:]
    /// Marks records read (outside the balance: they are not messages of the input).
    var markRecords = 0
    /// The newest writer's clock of the records (behind the shuffle; nil for raw hits).
    var writerClock: Int64?
    /// A record routed by another repartition partition count than the topic has: (the count
    /// it was routed by, the topic's).
    var misrouted: (routed: Int, expected: Int)?
    /// Where the batch's records first name each upstream source, and whether that record
    /// begins the group's records of it in the partition (see `RepartitionRecord`).
    var firstSightings: [SourceKey: (offset: Int64, begins: Bool)] = [:]
    /// The judge's refusal of the first record another group's normalize stage wrote.
    var refusal: PipelineError?

    /// With room for `records` events.
    init(room records: Int = 0) {
        inputs.reserveCapacity(records)
        events.reserveCapacity(records)
    }

    /// Appends a hit to count, carried by the record at `offset` of `partition` (the
    /// `reference.record`-th of the batch). The hit is taken, not copied: borrowed, it was
    /// copied into its input through its value witness (74 instructions a hit: callgrind).
    @inline(__always)
    mutating func append(
        _ event: consuming TrackingEvent, partition: Int32, offset: Int64, source: SourceKey, sourceOffset: Int64,
        reference: DeadLetterReference, carriesOriginal: Bool = true
    ) {
        let position = RecordPosition.of(offset: offset, event: reference.event ?? 0)
        inputs.append(WindowInput(event: event, partition: partition, offset: offset, tag: inputs.count, position: position))
        events.append(
            Event(source: source, sourceOffset: sourceOffset, reference: reference, carriesOriginal: carriesOriginal))
    }

    /// Takes back the events from `count` on.
    mutating func removeEvents(from count: Int) {
        inputs.removeSubrange(count...)
        events.removeSubrange(count...)
    }

    /// A record at `offset` names `source`; only the first is kept.
    mutating func sighted(_ source: SourceKey, at offset: Int64, begins: Bool) {
        if firstSightings[source] == nil { firstSightings[source] = (offset, begins) }
    }

    /// Appends a batch decoded from the records that follow this one's.
    mutating func append(_ other: DecodedBatch) {
        let shift = inputs.count
        inputs += other.inputs.lazy.map { input in
            var input = input
            input.tag += shift
            return input
        }
        events += other.events
        rejections += other.rejections
        filtered += other.filtered
        marks.merge(other.marks)
        sourcePartitions.merge(other.sourcePartitions, uniquingKeysWith: max)
        markRecords += other.markRecords
        writerClock = EventTimeMath.latest(writerClock, other.writerClock)
        misrouted = misrouted ?? other.misrouted
        firstSightings.merge(other.firstSightings) { earlier, _ in earlier }
        refusal = refusal ?? other.refusal
    }
}
