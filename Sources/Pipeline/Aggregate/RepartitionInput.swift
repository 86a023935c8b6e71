import Kafka
import TrackingDomain
import Windowing

/// The repartition topic, behind the shuffle: events keyed by delivery, each with its source
/// position, and every record with the watermarks of its source partitions.
public struct RepartitionInput: AggregateInput {
    /// The dead-letter reason for a repartition record this version cannot read.
    public static let unreadableRecord = "unreadable_repartition_record"

    /// The repartition topic's partition count, which every instance must route by.
    public let partitionCount: Int32

    public init(partitionCount: Int32) {
        self.partitionCount = partitionCount
    }

    /// The input partitions upstream, of every incarnation the records name.
    public var taskSources: TaskSources { .upstream }

    public func changelogSource(inputTopic: String) -> UInt64 {
        ChangelogRecord.source(crossesShuffle: true, inputTopic: inputTopic)
    }

    public func readTopicName(sourceTopic: String) -> String { "the repartition topic" }

    /// Notes how the record's events were routed; a record routed by another partition count
    /// than the topic has means instances disagree on it.
    private func checkRouting(_ origin: RepartitionRecord.Origin, into batch: inout DecodedBatch) {
        if origin.routedPartitions != Int(partitionCount), batch.misrouted == nil {
            batch.misrouted = (origin.routedPartitions, Int(partitionCount))
        }
    }

    /// Notes a record's table of source partitions (a marks record's, or an events record's
    /// closing one), the record at `offset`, and returns each one's key.
    @discardableResult
    private func note(
        _ marks: [SourceMark], epochs: [UInt32], begins: [Bool], of origin: RepartitionRecord.Origin, at offset: Int64,
        into batch: inout DecodedBatch
    ) -> [SourceKey] {
        var keys: [SourceKey] = []
        keys.reserveCapacity(marks.count)
        for (index, (mark, epoch)) in zip(marks, epochs).enumerated() {
            let incarnation = SourceKey.incarnation(topic: origin.sourceTopic, epoch: epoch)
            batch.sourcePartitions[incarnation] = max(batch.sourcePartitions[incarnation] ?? 0, origin.sourcePartitions)
            let key = SourceKey(incarnation: incarnation, partition: mark.source)
            batch.marks.note(source: key, watermark: mark.watermark, idle: mark.idle)
            batch.sighted(key, at: offset, begins: index < begins.count && begins[index])
            keys.append(key)
        }
        return keys
    }

    public func decode(_ record: PolledRecord, at index: Int, into batch: inout DecodedBatch) {
        guard let value = record.value else {
            return Self.reject(
                "an empty record on the repartition topic; only trackpipe should write to it", DeadLetterReference(record: index),
                of: record, into: &batch)
        }
        let decoded: RepartitionRecord.Decoded
        do {
            decoded = try RepartitionRecord.decode(value)
        } catch {
            let detail = error.writtenByAnotherVersion ? "\(error)" : "\(error); only trackpipe should write to the repartition topic"
            return Self.reject(detail, DeadLetterReference(record: index), of: record, into: &batch)
        }
        switch decoded {
        case .marks(let marks):
            batch.markRecords += 1
            checkRouting(marks.origin, into: &batch)
            note(marks.marks, epochs: marks.epochs, begins: marks.begins, of: marks.origin, at: record.offset, into: &batch)
        case .events(let events):
            checkRouting(events.origin, into: &batch)
            // The events of a record come in runs of one source partition: its key is looked up
            // in the record's table once per run.
            let keys = note(events.marks, epochs: events.epochs, begins: events.begins, of: events.origin, at: record.offset, into: &batch)
            var source: SourceKey?
            for (number, event) in events.events.enumerated() {
                let reference = DeadLetterReference(record: index, event: number)
                if source?.partition != event.sourcePartition {
                    source = keys.first { $0.partition == event.sourcePartition }
                }
                guard let source else {
                    Self.reject("an event of a source partition its record does not list", reference, of: record, into: &batch)
                    continue
                }
                take(event, source: source, reference: reference, of: record, into: &batch)
            }
        }
    }

    private func take(
        _ event: RepartitionRecord.Event, source: SourceKey, reference: DeadLetterReference, of record: PolledRecord,
        into batch: inout DecodedBatch
    ) {
        let deliveryId = event.deliveryId
        guard !deliveryId.isEmpty else {
            return Self.reject("an event without its delivery id", reference, of: record, into: &batch)
        }
        let tracking = TrackingEvent(
            deliveryId: String(decoding: deliveryId, as: UTF8.self), broadlogId: String(decoding: event.broadlogId, as: UTF8.self),
            action: event.action, channel: event.channel, platform: event.platform, eventTime: event.eventTime, shape: event.shape)
        batch.events.append(
            DecodedBatch.Event(
                event: tracking, source: source, sourceOffset: event.sourceOffset, partition: record.partition,
                offset: record.offset, reference: reference))
    }

    private static func reject(
        _ detail: String, _ reference: DeadLetterReference, of record: PolledRecord, into batch: inout DecodedBatch
    ) {
        batch.rejections.append(
            DecodedBatch.Rejection(
                reason: unreadableRecord, detail: "\(unreadableRecord): \(detail)", reference: reference, offset: record.offset,
                time: nil))
    }

    /// A hit that crossed the shuffle is dead-lettered as it first arrived: the original key,
    /// value and timestamp it carried (cut as the normalize stage cut it, if it was too large to
    /// travel whole), and its position in the input topic. A record that could not be read is
    /// sent as found.
    public func deadLetter(
        _ reference: DeadLetterReference, of record: PolledRecord, reason: String, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter {
        if let value = record.value, let number = reference.event, let event = Self.event(number, in: value) {
            let letter = DeadLetter(
                reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: event.sourcePartition,
                sourceOffset: event.sourceOffset)
            return OutgoingDeadLetter(
                letter: letter, key: event.originalKey, value: event.originalValue, timestamp: event.originalTimestamp,
                cut: event.originalCut.isEmpty ? [] : (try? RepartitionRecord.cutHeaders(event.originalCut)) ?? [])
        }
        return OutgoingDeadLetter(
            letter: DeadLetter(
                reason: reason, detail: detail, sourceTopic: "\(sourceTopic) (via the repartition topic)",
                sourcePartition: record.partition, sourceOffset: record.offset),
            key: record.key, value: record.value, timestamp: record.timestamp)
    }

    /// Event `number` of a record, without decoding the record's other events: a burst of late
    /// hits from one record costs one pass each.
    private static func event(_ number: Int, in value: UnsafeRawBufferPointer) -> RepartitionRecord.Event? {
        (try? RepartitionRecord.event(number, in: value)) ?? nil
    }
}
