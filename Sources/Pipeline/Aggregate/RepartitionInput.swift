import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// The repartition topic, behind the shuffle: events keyed by delivery, each with its source
/// position, and every record with the watermarks of its source partitions.
public struct RepartitionInput: AggregateInput {
    /// The repartition topic's partition count, which every instance must route by.
    public let partitionCount: Int32
    /// The pipeline whose normalize stage writes the topic: the judge refuses a record another
    /// group wrote, which stops the stage rather than be counted as this group's.
    public let identity: GroupIdentity

    public init(partitionCount: Int32, identity: GroupIdentity) {
        self.partitionCount = partitionCount
        self.identity = identity
    }

    /// The input partitions upstream, of every incarnation the records name.
    public var taskSources: TaskSources { .upstream }

    /// Notes how `record`'s events were routed and who wrote it; a record routed by another
    /// partition count than the topic has means instances disagree on it, and one of another
    /// group means two groups write the topic.
    private func checkRouting(_ origin: RepartitionRecord.Origin, of record: PolledRecord, into batch: inout DecodedBatch) {
        if origin.routedPartitions != Int(partitionCount), batch.misrouted == nil {
            batch.misrouted = (origin.routedPartitions, Int(partitionCount))
        }
        guard batch.refusal == nil, case .refuse(let refusal) = identity.judge(.repartitionRecord(writer: origin.group, partition: record.partition, offset: record.offset)) else { return }
        batch.refusal = refusal
    }

    /// The key of each source partition in a record's table. A record's sources are mostly of
    /// one incarnation, and a table names up to every input partition: its incarnation is worked
    /// out once per run of one epoch.
    private static func keys(of marks: [SourceMark], epochs: [UInt32], topic: String) -> [SourceKey] {
        var keys: [SourceKey] = []
        keys.reserveCapacity(marks.count)
        var current: (epoch: UInt32, incarnation: UInt64)?
        for (mark, epoch) in zip(marks, epochs) {
            let incarnation: UInt64
            if let current, current.epoch == epoch {
                incarnation = current.incarnation
            } else {
                incarnation = SourceKey.incarnation(topic: topic, epoch: epoch)
                current = (epoch, incarnation)
            }
            keys.append(SourceKey(incarnation: incarnation, partition: mark.source))
        }
        return keys
    }

    /// Notes a record's table of source partitions (a marks record's, or an events record's
    /// closing one), with their `keys`, and the record at `offset`.
    private func note(
        _ keys: [SourceKey], _ marks: [SourceMark], begins: [Bool], of origin: RepartitionRecord.Origin, at offset: Int64,
        into batch: inout DecodedBatch
    ) {
        // A batch's records name the input partitions upstream a few more at a time: grown
        // from empty, the table was rebuilt about five times a batch (callgrind).
        if batch.firstSightings.isEmpty { batch.firstSightings = .init(minimumCapacity: min(max(origin.sourcePartitions, keys.count), 256)) }
        var noted: UInt64?
        for (index, (key, mark)) in zip(keys, marks).enumerated() {
            if noted != key.incarnation {
                batch.sourcePartitions[key.incarnation] = max(batch.sourcePartitions[key.incarnation] ?? 0, origin.sourcePartitions)
                noted = key.incarnation
            }
            batch.marks.note(source: key, watermark: mark.watermark, idle: mark.idle, quietSince: mark.quietSince)
            batch.sighted(key, at: offset, begins: index < begins.count && begins[index])
        }
    }

    /// What the records' headers say (`RepartitionRecord.eventCount`): a record carries the
    /// events of a whole input batch bound for its partition.
    public func eventCount(of records: [PolledRecord], at indices: [Int]) -> Int {
        var count = 0
        for index in indices { count += records[index].value.map(RepartitionRecord.eventCount(in:)) ?? 0 }
        return count
    }

    public func eventCount(of records: [PolledRecord], at range: Range<Int>) -> Int {
        var count = 0
        for index in range { count += records[index].value.map(RepartitionRecord.eventCount(in:)) ?? 0 }
        return count
    }

    /// A record's events are appended as they are read (`RepartitionRecord.EventsReader`), and
    /// what its tables say noted once they all were: a record that cannot be read is refused
    /// whole, the events read before the error taken back.
    public func decode(_ record: PolledRecord, at index: Int, into batch: inout DecodedBatch) {
        guard let value = record.value else {
            return Self.reject(
                "an empty record on the repartition topic; only trackpipe should write to it", DeadLetterReference(record: index),
                of: record, into: &batch)
        }
        let (events, rejections) = (batch.events.count, batch.rejections.count)
        do throws(RepartitionRecord.DecodingError) {
            switch try RepartitionRecord.read(value) {
            case .marks(let marks):
                batch.markRecords += 1
                batch.writerClock = max(batch.writerClock ?? marks.writerClock, marks.writerClock)
                checkRouting(marks.origin, of: record, into: &batch)
                let keys = Self.keys(of: marks.marks, epochs: marks.epochs, topic: marks.origin.sourceTopic)
                note(keys, marks.marks, begins: marks.begins, of: marks.origin, at: record.offset, into: &batch)
            case .events(var reader):
                let keys = Self.keys(of: reader.marks, epochs: reader.epochs, topic: reader.origin.sourceTopic)
                try Self.append(&reader, keys: keys, of: record, at: index, into: &batch)
                batch.writerClock = max(batch.writerClock ?? reader.writerClock, reader.writerClock)
                checkRouting(reader.origin, of: record, into: &batch)
                note(keys, reader.marks, begins: reader.begins, of: reader.origin, at: record.offset, into: &batch)
            }
        } catch {
            // Refused whole, as when a record was read whole before its events were taken.
            batch.removeEvents(from: events)
            batch.rejections.removeSubrange(rejections...)
            let detail = error.writtenByAnotherVersion ? "\(error)" : "\(error); only trackpipe should write to the repartition topic"
            Self.reject(detail, DeadLetterReference(record: index), of: record, into: &batch)
        }
    }

    /// Appends an events record's events to `batch`, each with the key of its source, which the
    /// record's table lists (the reader checks), and the id of its delivery, made once per
    /// table entry rather than once per event.
    private static func append(
        _ reader: inout RepartitionRecord.EventsReader, keys: [SourceKey], of record: PolledRecord, at index: Int,
        into batch: inout DecodedBatch
    ) throws(RepartitionRecord.DecodingError) {
        let deliveryIds = reader.deliveries.map { DeliveryID($0) }
        var source = keys.first
        var number = -1
        while reader.remaining > 0 {
            let event = try reader.next()
            number += 1
            let reference = DeadLetterReference(record: index, event: number)
            if source?.partition != event.sourcePartition {
                source = keys.first { $0.partition == event.sourcePartition }
            }
            guard let source, !event.deliveryId.isEmpty else {
                Self.reject("an event without its delivery id", reference, of: record, into: &batch)
                continue
            }
            batch.append(
                event.tracking(deliveryIds[event.delivery]), partition: record.partition, offset: record.offset, source: source,
                sourceOffset: event.sourceOffset, reference: reference, carriesOriginal: event.original != nil)
        }
        try reader.finish()
    }

    private static func reject(
        _ detail: String, _ reference: DeadLetterReference, of record: PolledRecord, into batch: inout DecodedBatch
    ) {
        batch.rejections.append(
            DecodedBatch.Rejection(
                reason: .unreadableRepartitionRecord, detail: detail, reference: reference, offset: record.offset,
                time: nil))
    }

    /// A hit that crossed the shuffle is dead-lettered as it first arrived: the original key,
    /// value and timestamp it carried (cut as the normalize stage cut it, if it was too large to
    /// travel whole), and its position in the input topic; one that crossed without its original
    /// (`OriginalRule`'s exceptions: the detail says which) as trackpipe normalized it. A record
    /// that could not be read is sent as found.
    public func deadLetter(
        _ reference: DeadLetterReference, of record: PolledRecord, reason: RejectReason, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter {
        let event = record.value.flatMap { value in reference.event.flatMap { (try? RepartitionRecord.event($0, in: value)) ?? nil } }
        return Self.deadLetter(event, of: record, reason: reason, detail: detail, sourceTopic: sourceTopic)
    }

    /// Each record is read once for all its letters: events have no length of their own, so
    /// reading one means reading those before it, and a backlog of late hits would read a
    /// record once per letter.
    public func deadLetters(_ pending: [PendingDeadLetter], of records: [PolledRecord], sourceTopic: String) -> [OutgoingDeadLetter] {
        var decoded: (record: Int, events: [RepartitionRecord.Event])?
        return pending.map { letter in
            let index = letter.reference.record
            var event: RepartitionRecord.Event?
            if let number = letter.reference.event, let value = records[index].value {
                if decoded?.record != index {
                    let events: [RepartitionRecord.Event]
                    if case .events(let record)? = try? RepartitionRecord.decode(value) { events = record.events } else { events = [] }
                    decoded = (index, events)
                }
                event = decoded!.events.indices.contains(number) ? decoded!.events[number] : nil
            }
            return Self.deadLetter(event, of: records[index], reason: letter.reason, detail: letter.detail, sourceTopic: sourceTopic)
        }
    }

    private static func deadLetter(
        _ event: RepartitionRecord.Event?, of record: PolledRecord, reason: RejectReason, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter {
        guard let event else {
            return OutgoingDeadLetter(record, reason: reason, detail: detail, sourceTopic: "\(sourceTopic) (via the repartition topic)")
        }
        let letter = DeadLetter(
            reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: event.sourcePartition, sourceOffset: event.sourceOffset)
        guard let original = event.original else {
            return OutgoingDeadLetter(letter: letter, key: nil, value: nil, timestamp: event.eventTime, normalized: normalized(event))
        }
        return OutgoingDeadLetter(
            letter: letter, key: original.key, value: original.value, timestamp: original.timestamp,
            cut: original.cut.isEmpty ? [] : (try? RepartitionRecord.cutHeaders(original.cut)) ?? [])
    }

    /// The hit as normalized, in the form `trackpipe normalize` writes events.
    private static func normalized(_ event: RepartitionRecord.Event) -> [UInt8] {
        var writer = JSONWriter()
        event.tracking(DeliveryID(event.deliveryId)).writeJSON(into: &writer)
        return writer.bytes
    }
}

extension RepartitionRecord.Event {
    /// The hit it carries, with its delivery id made by the caller (a decoder makes each once per record).
    @inline(__always)
    func tracking(_ deliveryId: DeliveryID) -> TrackingEvent {
        TrackingEvent(
            deliveryId: deliveryId, broadlogId: BroadlogID(broadlogId), action: action, channel: channel, platform: platform,
            eventTime: eventTime, shape: shape)
    }
}
