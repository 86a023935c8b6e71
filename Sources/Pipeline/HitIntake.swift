import Runner
import Kafka
import TrackingDomain

/// Judges a raw input message: the normalizer's verdict, plus the rules that need the Kafka
/// record (too many headers, a hit without any time, and a hit stamped far after its arrival).
/// Shared by the normalize stage and the single-stage aggregate path, so both judge a message
/// the same way. A hit it accepts always has its event time: its own, or the Kafka timestamp.
struct HitIntake: Sendable {
    let normalizer: Normalizer
    /// Event time more than this after the Kafka timestamp is `future_timestamp` (ms).
    let maxFutureSkew: Int64

    init(limits: NormalizerLimits, maxFutureSkew: Int64) {
        self.normalizer = Normalizer(limits: limits)
        self.maxFutureSkew = maxFutureSkew
    }

    func take(_ record: PolledRecord) -> Verdict {
        // First, like too_large: a limit on what the record costs, checked before parsing.
        let maxHeaders = normalizer.limits.maxHeaders
        if record.headerCount > maxHeaders {
            return .rejected(.tooManyHeaders, detail: "the record has \(record.headerCount) Kafka headers, more than the limit of \(maxHeaders); trackpipe reads only a hit's key and value, so have the producer send fewer headers (or raise --max-headers if so many are legitimate)")
        }
        let verdict =
            record.value.map { normalizer.normalize($0, kafkaTimestamp: record.timestamp) }
            ?? normalizer.normalize(EmptyCollection<UInt8>(), kafkaTimestamp: record.timestamp)
        guard case .accepted(let event) = verdict else { return verdict }
        guard let eventTime = event.eventTime else {
            return .rejected(.invalidTimestamp, detail: "the hit has no timestamp and its Kafka record has none; add a \"timestamp\" field")
        }
        if let received = record.timestamp, eventTime > received + maxFutureSkew {
            return .rejected(.futureTimestamp, detail: "event time \(RFC3339.format(epochMillis: eventTime)) is \((eventTime - received) / 1000) s after the Kafka record's timestamp \(RFC3339.format(epochMillis: received)), more than the allowed \(maxFutureSkew / 1000) s; the sending device's clock is probably wrong (or raise --max-future-skew)")
        }
        return verdict
    }
}
