import Prometheus
import TrackingDomain
import Synchronization

/// The worker's Prometheus metrics. Counters are bumped once per batch, not per message, so
/// the hot path pays nothing for them.
public final class PipelineMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    let consumed: Counter
    let accepted: Counter
    let replayedFinal: Counter
    let emitted: Counter
    let openWindows: Gauge
    let retainedEntries: Gauge
    let lagTotal: Gauge
    let watermark: Gauge
    let emitDelay: ValueHistogram
    private let filteredByReason: MetricFamily<Counter>
    private let deadLettersByReason: MetricFamily<Counter>
    private let lagByPartition: MetricFamily<Gauge>

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        consumed = registry.makeCounter(name: "trackpipe_messages_consumed_total", help: "Messages read from the input topic.")
        accepted = registry.makeCounter(name: "trackpipe_hits_accepted_total", help: "Hits counted in a window.")
        replayedFinal = registry.makeCounter(
            name: "trackpipe_hits_replayed_final_total", help: "Replayed hits whose window was already final before a restart.")
        emitted = registry.makeCounter(name: "trackpipe_aggregates_emitted_total", help: "Aggregate records produced.")
        openWindows = registry.makeGauge(name: "trackpipe_windows_open", help: "Delivery windows held in memory (open or retained).")
        retainedEntries = registry.makeGauge(name: "trackpipe_window_entries", help: "Broadlog entries held in window state.")
        lagTotal = registry.makeGauge(name: "trackpipe_consumer_lag", help: "Messages behind the end of the input topic, all partitions.")
        watermark = registry.makeGauge(name: "trackpipe_watermark_ms", help: "Event-time watermark (epoch ms).")
        emitDelay = registry.makeValueHistogram(
            name: "trackpipe_emit_delay_seconds",
            buckets: [0.5, 1, 5, 10, 30, 60, 120, 300, 900, 3600, 86400],
            help: "Wall-clock time from a window's end to its emission.")
        filteredByReason = MetricFamily { reason in
            registry.makeCounter(
                name: "trackpipe_hits_filtered_total", labels: [("reason", reason)], help: "Hits dropped by the tracking rule.")
        }
        deadLettersByReason = MetricFamily { reason in
            registry.makeCounter(
                name: "trackpipe_dead_letters_total", labels: [("reason", reason)], help: "Messages sent to the dead-letter topic.")
        }
        lagByPartition = MetricFamily { partition in
            registry.makeGauge(
                name: "trackpipe_consumer_lag_partition", labels: [("partition", partition)],
                help: "Messages behind the end of one input partition.")
        }
        // Every reason is visible at zero before it first happens, so alerts can refer to it.
        _ = filtered(FilterReason.trackingOff.rawValue)
        for reason in RejectReason.allCases.map(\.rawValue) + [Pipeline.futureTimestamp] { _ = deadLetters(reason) }
    }

    func filtered(_ reason: String) -> Counter { filteredByReason[reason] }
    func deadLetters(_ reason: String) -> Counter { deadLettersByReason[reason] }
    func lag(partition: Int32) -> Gauge { lagByPartition[String(partition)] }

    func record(_ batch: Accounting) {
        if batch.consumed > 0 { consumed.increment(by: Int64(batch.consumed)) }
        if batch.accepted > 0 { accepted.increment(by: Int64(batch.accepted)) }
        if batch.replayedFinal > 0 { replayedFinal.increment(by: Int64(batch.replayedFinal)) }
        if batch.emitted > 0 { emitted.increment(by: Int64(batch.emitted)) }
        for (reason, count) in batch.filtered where count > 0 { filtered(reason).increment(by: Int64(count)) }
        for (reason, count) in batch.deadLettered where count > 0 { deadLetters(reason).increment(by: Int64(count)) }
    }
}

/// One metric per label value, made on first use and then reused.
private final class MetricFamily<Metric: Sendable>: Sendable {
    private let make: @Sendable (String) -> Metric
    private let members = Mutex<[String: Metric]>([:])

    init(_ make: @escaping @Sendable (String) -> Metric) { self.make = make }

    subscript(label: String) -> Metric {
        members.withLock { members in
            if let metric = members[label] { return metric }
            let metric = make(label)
            members[label] = metric
            return metric
        }
    }
}
