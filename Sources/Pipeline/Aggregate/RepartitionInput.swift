import TrackingDomain
import Windowing

/// The repartition topic, behind the shuffle: events keyed by delivery, each with its source
/// position and its source's watermark, and marks records with every source's watermark.
public struct RepartitionInput: AggregateInput {
    public static let crossesShuffle = true

    /// The dead-letter reason for a repartition record this version cannot read.
    public static let unreadableRecord = "unreadable_repartition_record"

    public init() {}

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
            return Self.reject(
                "\(error); only trackpipe of the same major version should write to the repartition topic",
                DeadLetterReference(record: index), of: record, into: &batch)
        }
        switch decoded {
        case .marks(let count, let sourceMarks):
            batch.markRecords += 1
            batch.sourcePartitions = max(batch.sourcePartitions, count)
            for mark in sourceMarks { batch.marks.note(source: mark.source, watermark: mark.watermark, idle: mark.idle) }
        case .event(let event):
            Self.take(event, deliveryId: record.key, reference: DeadLetterReference(record: index), of: record, into: &batch)
        case .events(let events):
            for (number, event) in events.enumerated() {
                Self.take(
                    event, deliveryId: event.deliveryId, reference: DeadLetterReference(record: index, event: number), of: record,
                    into: &batch)
            }
        }
    }

    private static func take(
        _ event: RepartitionRecord.Event, deliveryId: UnsafeRawBufferPointer?, reference: DeadLetterReference, of record: InputRecord,
        into batch: inout DecodedBatch
    ) {
        batch.sourcePartitions = max(batch.sourcePartitions, event.sourcePartitions)
        batch.marks.note(source: event.sourcePartition, watermark: event.sourceWatermark)
        guard let deliveryId, !deliveryId.isEmpty else {
            return reject("an event without its delivery id", reference, of: record, into: &batch)
        }
        let tracking = TrackingEvent(
            deliveryId: String(decoding: deliveryId, as: UTF8.self), broadlogId: String(decoding: event.broadlogId, as: UTF8.self),
            action: event.action, channel: event.channel, platform: event.platform, eventTime: event.eventTime, shape: event.shape)
        batch.events.append(
            DecodedBatch.Event(
                event: tracking, source: event.sourcePartition, sourceOffset: event.sourceOffset, partition: record.partition,
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
        if let value = record.value, let event = Self.event(reference.event, in: value) {
            return OutgoingDeadLetter(
                letter: DeadLetter(
                    reason: reason, detail: detail, sourceTopic: sourceTopic, sourcePartition: event.sourcePartition,
                    sourceOffset: event.sourceOffset),
                key: event.originalKey, value: event.originalValue, timestamp: event.originalTimestamp)
        }
        return OutgoingDeadLetter(
            letter: DeadLetter(
                reason: reason, detail: detail, sourceTopic: "\(sourceTopic) (via the repartition topic)",
                sourcePartition: record.partition, sourceOffset: record.offset),
            key: record.key, value: record.value, timestamp: record.timestamp)
    }

    /// Event `number` of a record (nil: the one event of a version 1 record).
    private static func event(_ number: Int?, in value: UnsafeRawBufferPointer) -> RepartitionRecord.Event? {
        switch try? RepartitionRecord.decode(value) {
        case .event(let event)?: event
        case .events(let events)?: number.flatMap { events.indices.contains($0) ? events[$0] : nil }
        default: nil
        }
    }
}
