import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// Raw hits, read where they were produced: normalized, filtered and dead-lettered here. For
/// input already keyed by delivery (one stage) and for `replay`.
package struct RawHitInput: AggregateInput {
    /// Each partition is its own only source.
    package var taskSources: TaskSources { .partitionRead }
    let intake: HitIntake

    package init(limits: NormalizerLimits, maxFutureSkew: Int64) {
        intake = HitIntake(limits: limits, maxFutureSkew: maxFutureSkew)
    }

    package func decode(_ record: PolledRecord, at index: Int, into batch: inout DecodedBatch) {
        let reference = DeadLetterReference(record: index)
        switch intake.take(record) {
        case .accepted(let event):
            let eventTime = event.eventTime!  // the intake accepts no hit without one
            let source = SourceKey(incarnation: 0, partition: record.partition)
            batch.append(
                event, partition: record.partition, offset: record.offset, source: source, sourceOffset: record.offset, reference: reference)
            // A hit moves its partition's event time no further than its arrival: a device clock
            // ahead of the collector's must not make everyone else's hits late.
            batch.marks.note(source: source, watermark: min(eventTime, record.timestamp ?? eventTime))
        case .filtered(let reason):
            batch.filtered.append((record.offset, reason, record.timestamp))
        case .rejected(let reason, let detail):
            batch.rejections.append(
                DecodedBatch.Rejection(reason: reason, detail: detail, reference: reference, offset: record.offset, time: record.timestamp))
        }
    }

    package func deadLetter(
        _ reference: DeadLetterReference, of record: PolledRecord, reason: RejectReason, detail: String, sourceTopic: String
    ) -> OutgoingDeadLetter {
        OutgoingDeadLetter(record, reason: reason, detail: detail, sourceTopic: sourceTopic)
    }
}
