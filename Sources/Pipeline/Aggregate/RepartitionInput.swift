import TrackingDomain
import Windowing

/// The repartition topic, behind the shuffle: events keyed by delivery, each with its source
/// position and its source's watermark, and marks records with every source's watermark.
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

    /// The incarnation of a source partition of `origin`.
    func incarnation(of origin: RepartitionRecord.Origin, epoch: UInt32) -> UInt64 {
        SourceKey.incarnation(topic: origin.sourceTopic, epoch: epoch)
    }

    /// Notes how the record's events were routed; a record routed by another partition count
    /// than the topic has means instances disagree on it.
    private func checkRouting(_ origin: RepartitionRecord.Origin, into batch: inout DecodedBatch) {
        if origin.routedPartitions != Int(partitionCount), batch.misrouted == nil {
            batch.misrouted = (origin.routedPartitions, Int(partitionCount))
        }
    }

    public func decode(_ record: InputRecord, at index: Int, into batch: inout DecodedBatch) {
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
        case .marks(let record):
            batch.markRecords += 1
            checkRouting(record.origin, into: &batch)
            for (mark, epoch) in zip(record.marks, record.epochs) {
                let incarnation = incarnation(of: record.origin, epoch: epoch)
                batch.sourcePartitions[incarnation] = max(batch.sourcePartitions[incarnation] ?? 0, record.origin.sourcePartitions)
                batch.marks.note(
                    source: SourceKey(incarnation: incarnation, partition: mark.source), watermark: mark.watermark, idle: mark.idle)
            }
        case .events(let events):
            guard let first = events.first else { return }
            checkRouting(first.origin, into: &batch)
            // The events of one record share their origin, and mostly their sources' epoch: the
            // incarnation (a hash of the topic's name) is worked out once per epoch met in a row.
            var epoch = first.sourceEpoch
            var incarnation = incarnation(of: first.origin, epoch: epoch)
            noteSourcePartitions(first.sourcePartitions, of: incarnation, into: &batch)
            for (number, event) in events.enumerated() {
                if event.sourceEpoch != epoch {
                    epoch = event.sourceEpoch
                    incarnation = self.incarnation(of: event.origin, epoch: epoch)
                    noteSourcePartitions(event.sourcePartitions, of: incarnation, into: &batch)
                }
                take(event, incarnation: incarnation, reference: DeadLetterReference(record: index, event: number), of: record, into: &batch)
            }
        }
    }

    private func noteSourcePartitions(_ count: Int, of incarnation: UInt64, into batch: inout DecodedBatch) {
        batch.sourcePartitions[incarnation] = max(batch.sourcePartitions[incarnation] ?? 0, count)
    }

    private func take(
        _ event: RepartitionRecord.Event, incarnation: UInt64, reference: DeadLetterReference, of record: InputRecord,
        into batch: inout DecodedBatch
    ) {
        let source = SourceKey(incarnation: incarnation, partition: event.sourcePartition)
        batch.marks.note(source: source, watermark: event.sourceWatermark)
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
        _ detail: String, _ reference: DeadLetterReference, of record: InputRecord, into batch: inout DecodedBatch
    ) {
        batch.rejections.append(
            DecodedBatch.Rejection(
                reason: unreadableRecord, detail: "\(unreadableRecord): \(detail)", reference: reference, offset: record.offset,
                time: nil))
    }

    /// A hit that crossed the shuffle is dead-lettered as it first arrived: the original key,
    /// value and timestamp it carried, and its position in the input topic. A record that could
    /// not be read is sent as found.
    public func deadLetter(
        _ reference: DeadLetterReference, of record: InputRecord, reason: String, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter {
        if let value = record.value, let number = reference.event, let event = Self.event(number, in: value) {
            let letter = DeadLetter(
                reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: event.sourcePartition,
                sourceOffset: event.sourceOffset)
            guard let shape = event.leftInInput else {
                return OutgoingDeadLetter(letter: letter, key: event.originalKey, value: event.originalValue, timestamp: event.originalTimestamp)
            }
            // The record names the topic its events came from.
            let topic = String(decoding: event.origin.sourceTopic, as: UTF8.self)
            return OutgoingDeadLetter(
                letter: letter, key: nil, value: nil, timestamp: event.originalTimestamp,
                leftOriginal: LeftOriginal(
                    position: InputPosition(topic: topic, partition: event.sourcePartition, offset: event.sourceOffset), shape: shape,
                    timestamp: event.originalTimestamp, standIn: Self.standIn(event)))
        }
        return OutgoingDeadLetter(
            letter: DeadLetter(
                reason: reason, detail: detail, sourceTopic: "\(sourceTopic) (via the repartition topic)",
                sourcePartition: record.partition, sourceOffset: record.offset),
            key: record.key, value: record.value, timestamp: record.timestamp)
    }

    /// The hit as normalized, in the form `trackpipe normalize` writes events.
    private static func standIn(_ event: RepartitionRecord.Event) -> [UInt8] {
        let tracking = TrackingEvent(
            deliveryId: String(decoding: event.deliveryId, as: UTF8.self),
            broadlogId: String(decoding: event.broadlogId, as: UTF8.self), action: event.action, channel: event.channel,
            platform: event.platform, eventTime: event.eventTime, shape: event.shape)
        var writer = JSONWriter()
        tracking.writeJSON(into: &writer)
        return writer.bytes
    }

    /// Event `number` of a record, without decoding the record's other events: a burst of late
    /// hits from one record costs one pass each.
    private static func event(_ number: Int, in value: UnsafeRawBufferPointer) -> RepartitionRecord.Event? {
        (try? RepartitionRecord.event(number, in: value)) ?? nil
    }
}
