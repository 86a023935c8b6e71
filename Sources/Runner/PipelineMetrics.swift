import Kafka
import Prometheus
import Synchronization
import TrackingDomain
import Windowing

/// The worker's Prometheus metrics, one registry per process. Per-stage series carry a
/// `stage` label (`normalize`, `aggregate`), so one dashboard shows both halves of the
/// scaled-out worker; series about windows carry a `window` label too (`1m`, as `--window`
/// names the size), one series per size even of one size, so that a dashboard or an alert
/// written for one size holds for several. Counters are bumped once a second from a stage's
/// report, not per message, so the hot path pays nothing for them.
public final class PipelineMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    let emitDelay: ValueHistogram
    /// 1 while a broker answers metadata requests, 0 while none does.
    package let brokerReachable: Gauge
    /// What `/health/ready` would answer at the moment of a scrape: Prometheus cannot read it
    /// itself, and an alert on it needs a series.
    private let healthy: Gauge
    /// 1 once the run has stopped on a failure (the worker then exits 1): without it a fatal
    /// error would be visible to Prometheus only as a target that went away.
    private let runFailed: Gauge
    private let process: ProcessMetrics
    private let counters: MetricFamily<Counter>
    private let gauges: MetricFamily<Gauge>

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        emitDelay = registry.makeValueHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "trackpipe_emit_delay", unitName: "seconds",
                helpText: "Wall-clock time from a window's end to its emission."),
            buckets: [0.5, 1, 5, 10, 30, 60, 120, 300, 900, 3600, 86400])
        brokerReachable = registry.gauge(
            "trackpipe_broker_reachable", help: "1 while a Kafka broker answers, 0 while none has answered the last check.")
        healthy = registry.gauge(
            "trackpipe_healthy", help: "1 while /health/ready answers 200, 0 while it answers 503 (read at each scrape).")
        runFailed = registry.gauge(
            "trackpipe_run_failed",
            help: "1 once the worker has stopped on an error that retrying cannot fix; it exits 1 after the next scrape.")
        healthy.set(Double(1))
        runFailed.set(Double(0))
        process = ProcessMetrics(registry: registry)
        counters = MetricFamily(
            make: { name, labels in
                registry.makeCounter(
                    descriptor: MetricNameDescriptor(metricName: name, unitName: "total", helpText: Self.help[name] ?? name),
                    labels: labels)
            }, drop: { registry.unregisterCounter($0) })
        gauges = MetricFamily(
            make: { name, labels in registry.gauge(name, help: Self.help[name] ?? name, labels: labels) },
            drop: { registry.unregisterGauge($0) })
    }

    /// The Prometheus text for one scrape, with the gauges that are read rather than pushed
    /// (health, the process's memory) brought up to date first.
    /// - Parameter healthProblem: what `/health/ready` would answer: nil when ready.
    public func exposition(healthProblem: String?) -> [UInt8] {
        healthy.set(Double(healthProblem == nil ? 1 : 0))
        process.refresh()
        return registry.emitToBuffer()
    }

    /// Marks the run as failed, for the scrape the worker waits for before it exits.
    public func markRunFailed() {
        runFailed.set(Double(1))
        healthy.set(Double(0))
    }

    static let help: [String: String] = [
        "trackpipe_messages_consumed": "Messages read by a stage (the input topic for normalize, events of the repartition topic for aggregate).",
        "trackpipe_hits_accepted": "Hits sent on to the repartition topic (normalize) or counted in a window (aggregate).",
        "trackpipe_hits_filtered": "Hits dropped by the tracking rule.",
        "trackpipe_dead_letters": "Messages sent to the dead-letter topic, by reason.",
        "trackpipe_duplicates_dropped": "Events an upstream stage sent twice (after a crash), recognised by source position and dropped.",
        "trackpipe_messages_reread": "Messages re-read below where the window state read back had counted (after a crash), skipped.",
        "trackpipe_hits_reread_final": "Reread hits whose window was already final before the restart or rebalance.",
        "trackpipe_messages_replayed": "Deprecated: trackpipe_messages_reread under its former name, removed in the release after the one that renamed it.",
        "trackpipe_hits_replayed_final": "Deprecated: trackpipe_hits_reread_final under its former name, removed in the release after the one that renamed it.",
        "trackpipe_watermark_marks": "Watermark marks read from the repartition topic.",
        "trackpipe_aggregates_emitted": "Aggregate records produced.",
        "trackpipe_stale_records_dropped": "Records of unassigned partitions or already-processed offsets, dropped (librdkafka 2.0.x guard).",
        "trackpipe_offset_gaps": "Times a partition's offsets jumped forward (transaction markers and compaction make such jumps without losing anything).",
        "trackpipe_lost_offsets": "Offsets of the stage's input deleted (retention, a size limit) before the group read them: their hits are not counted.",
        "trackpipe_capacity_evictions": "Times a partition's window state reached its share of --max-entries and its oldest windows were finalized early.",
        "trackpipe_windows_finalized_early": "Delivery windows finalized early because window state reached --max-entries, by window size; later hits for them are too_late.",
        "trackpipe_hits_too_late_for_size": "Hits too late for the windows of one size and counted in a larger size's, by the size they missed (a hit too late for every size is a too_late dead letter instead).",
        "trackpipe_windows_open": "Delivery windows held in memory (open or retained), by window size.",
        "trackpipe_window_entries": "Broadlog entries held in window state, by window size.",
        "trackpipe_windows_pending": "Delivery windows counted and not written yet, by window size (with --emit final, every window until event time passes its end plus the retention).",
        "trackpipe_first_window_due_seconds": "Event time, in seconds, the stage's watermark has still to cover before the first pending window of a size is written; absent while none is pending or there is no watermark.",
        "trackpipe_watermark_ms": "Lowest event-time watermark over the stage's partitions (epoch ms).",
        "trackpipe_event_time_lag_seconds": "Seconds from the stage's lowest event-time watermark to the wall clock; absent while the stage has no watermark.",
        "trackpipe_consumer_lag": "Messages behind the end of the stage's input topic, all owned partitions; absent while the stage owns none.",
        "trackpipe_partitions_owned": "Partitions of the stage's input topic this instance owns (0: another instance owns them all).",
        "trackpipe_consumer_lag_partition": "Messages behind the end of one partition of the stage's input topic.",
        "trackpipe_input_paused": "1 while the stage's input is paused because its output waits for the broker (more than half of queue.buffering.max.kbytes unacknowledged).",
        "trackpipe_input_pauses": "Times the stage paused its input because its output was behind.",
        "trackpipe_tasks_restoring": "Window tasks reading their state back from the state topic (their input waits meanwhile).",
        "trackpipe_restore_records": "Records read back from the state topic to restore window tasks.",
        "trackpipe_changelog_records": "Records written to the state topic (window states, tombstones of evicted windows, task records).",
        "trackpipe_dead_letters_cut": "Dead letters whose original key or value was cut to fit the dead-letter topic (headers carry the original sizes and SHA-256).",
        "trackpipe_late_hits_without_original": "too_late dead letters carrying the hit as normalized, its original message not having crossed the shuffle (its window evicted early by --max-entries, or its record overtaken beyond the normalize stage's allowance).",
        "trackpipe_kafka_errors": "Errors librdkafka reported, by severity: transient ones (connections, leaders, timeouts) it retries by itself; a fatal one stops the worker.",
        "trackpipe_repartition_purges": "Partitions of the repartition topic the aggregate stage asked the cluster to purge up to its commits (DeleteRecords), by outcome: purged, unsupported (the cluster does not delete records), not_authorized (no Delete grant), transient, failed.",
    ]

    /// Renamed metrics, by their new name: each is exported under its former name too, with the
    /// same value, by the release that renamed it and no later (docs/operations.md, "Renamed
    /// metrics").
    static let formerNames = ["trackpipe_messages_reread": "trackpipe_messages_replayed", "trackpipe_hits_reread_final": "trackpipe_hits_replayed_final"]

    /// The metrics of one stage; every reason is visible at zero before it first happens, so
    /// alerts can refer to it.
    public func stage(_ name: String) -> StageMetrics {
        let metrics = StageMetrics(parent: self, stage: name)
        _ = counter("trackpipe_hits_filtered", stage: name, ("reason", FilterReason.trackingOff.rawValue))
        for reason in RejectReason.allCases { _ = counter("trackpipe_dead_letters", stage: name, ("reason", reason.rawValue)) }
        // The counters alerts divide or compare over time (consumed, marks) must exist before
        // the first message: a stage stuck from its start would otherwise have no series to
        // alert on.
        for name in Self.accountingCounters.map(\.name) + [
            "trackpipe_stale_records_dropped", "trackpipe_offset_gaps", "trackpipe_capacity_evictions",
            "trackpipe_restore_records", "trackpipe_changelog_records", "trackpipe_dead_letters_cut",
        ] + Self.formerNames.values {
            _ = counter(name, stage: metrics.stage)
        }
        for severity in ["transient", "fatal", "other"] { _ = counter("trackpipe_kafka_errors", stage: name, ("severity", severity)) }
        _ = counter("trackpipe_input_pauses", stage: name)
        metrics.paused(false)
        metrics.restoring(0)
        return metrics
    }

    /// The counters a report's `Accounting` bumps, each by its count.
    static let accountingCounters: [(name: String, count: KeyPath<Accounting, Int> & Sendable)] = [
        ("trackpipe_messages_consumed", \.consumed), ("trackpipe_hits_accepted", \.accepted), ("trackpipe_hits_reread_final", \.rereadFinal),
        ("trackpipe_duplicates_dropped", \.duplicates), ("trackpipe_messages_reread", \.reread), ("trackpipe_watermark_marks", \.marks),
        ("trackpipe_aggregates_emitted", \.emitted), ("trackpipe_late_hits_without_original", \.lateWithoutOriginal),
    ]

    func counter(_ name: String, stage: String, _ extra: (String, String)...) -> Counter {
        counters[name, [("stage", stage)] + extra]
    }

    func gauge(_ name: String, stage: String, _ extra: (String, String)...) -> Gauge {
        gauges[name, [("stage", stage)] + extra]
    }

    func removeGauge(_ name: String, stage: String, _ extra: (String, String)...) {
        gauges.remove(name, [("stage", stage)] + extra)
    }
}

/// One stage's view of the metrics.
public struct StageMetrics: Sendable {
    let parent: PipelineMetrics
    let stage: String

    func record(_ report: StageReport) {
        let a = report.accounting
        for (name, count) in PipelineMetrics.accountingCounters { bump(name, a[keyPath: count]) }
        for (reason, count) in a.filtered.counted {
            parent.counter("trackpipe_hits_filtered", stage: stage, ("reason", reason.rawValue)).increment(by: Int64(count))
        }
        for (reason, count) in a.deadLettered.counted {
            parent.counter("trackpipe_dead_letters", stage: stage, ("reason", reason.rawValue)).increment(by: Int64(count))
        }
        for delay in report.emitDelays { parent.emitDelay.record(delay) }
        // The memory cap's effect: logged as a warning by the runner, counted here for alerts.
        bump("trackpipe_capacity_evictions", report.capacityEvictions.count)
        for eviction in report.capacityEvictions {
            for (size, windows) in eviction.windowsEvictedBySize { window("trackpipe_windows_finalized_early", size).increment(by: Int64(windows)) }
        }
        for (size, hits) in a.tooLateForSize { window("trackpipe_hits_too_late_for_size", size).increment(by: Int64(hits)) }
    }

    /// A counter of one window size's.
    private func window(_ name: String, _ size: Int64) -> Counter {
        parent.counter(name, stage: stage, ("window", WindowSize.text(size)))
    }

    func paused(_ paused: Bool) {
        parent.gauge("trackpipe_input_paused", stage: stage).set(Double(paused ? 1 : 0))
        if paused { parent.counter("trackpipe_input_pauses", stage: stage).increment() }
    }

    /// The stage purges its input: every outcome of a purge (as the purge labels them) exists
    /// from the start, at 0.
    func purgeOutcomesRegistered(_ outcomes: [String]) {
        for outcome in outcomes { _ = parent.counter("trackpipe_repartition_purges", stage: stage, ("outcome", outcome)) }
    }

    func purged(_ outcome: String) {
        parent.counter("trackpipe_repartition_purges", stage: stage, ("outcome", outcome)).increment()
    }

    func kafkaError(_ severity: KafkaError.Severity) {
        parent.counter("trackpipe_kafka_errors", stage: stage, ("severity", severity.rawValue)).increment()
    }

    func restoring(_ tasks: Int) {
        parent.gauge("trackpipe_tasks_restoring", stage: stage).set(Double(tasks))
    }

    func restoredRecords(_ count: Int) { bump("trackpipe_restore_records", count) }

    func changelogRecords(_ count: Int) { bump("trackpipe_changelog_records", count) }

    func deadLettersCut(_ count: Int) { bump("trackpipe_dead_letters_cut", count) }

    func guarded(stale: Int, gaps: Int) {
        bump("trackpipe_stale_records_dropped", stale)
        bump("trackpipe_offset_gaps", gaps)
    }

    /// Offsets of `topic` lost before they were read; 0 makes the series exist, so that an
    /// alert on its increase sees the first loss.
    func lost(_ offsets: Int64, topic: String) {
        let counter = parent.counter("trackpipe_lost_offsets", stage: stage, ("topic", topic))
        if offsets > 0 { counter.increment(by: offsets) }
    }

    /// Every size's window series, counters at 0 included: the stage's sizes are known from
    /// the gauges, which the runner reports before any record (alerts on an increase then see
    /// the first).
    /// - Parameter now: the runner's wall clock (epoch ms), for the event-time lag.
    func gauges(_ gauges: StageGauges, now: Int64) {
        for (size, figures) in gauges.windows {
            let label = ("window", WindowSize.text(size))
            parent.gauge("trackpipe_windows_open", stage: stage, label).set(Double(figures.openWindows + figures.retainedWindows))
            parent.gauge("trackpipe_window_entries", stage: stage, label).set(Double(figures.entries))
            parent.gauge("trackpipe_windows_pending", stage: stage, label).set(Double(figures.openWindows))
            if let due = figures.firstOpenDue, let watermark = gauges.watermark {
                parent.gauge("trackpipe_first_window_due_seconds", stage: stage, label).set(Double(due - watermark) / 1000)
            } else {
                parent.removeGauge("trackpipe_first_window_due_seconds", stage: stage, label)
            }
            _ = window("trackpipe_windows_finalized_early", size)
            _ = window("trackpipe_hits_too_late_for_size", size)
        }
        if let watermark = gauges.watermark {
            parent.gauge("trackpipe_watermark_ms", stage: stage).set(Double(watermark))
            // Negative when event time runs ahead of this machine's clock (a producer's clock
            // ahead, within --max-future-skew): shown as is rather than hidden at zero.
            parent.gauge("trackpipe_event_time_lag_seconds", stage: stage).set(Double(now - watermark) / 1000)
        } else {
            // No partition or no hit yet: there is no lag to report, and a value frozen at the
            // last partition's would keep an alert firing on a stage that owns nothing.
            parent.removeGauge("trackpipe_event_time_lag_seconds", stage: stage)
        }
    }

    /// The lag of the partitions the stage owns, and how many it owns. A partition given away
    /// (`released`) loses its series, and a stage that owns none reports no lag at all, rather
    /// than 0: its partitions' backlog is their owners' to report, and a 0 here would read as
    /// "caught up" on a dashboard of this instance while the group is behind.
    func lag(_ byPartition: [Int32: Int64], released: Set<Int32> = [], owned: Int) {
        for partition in released {
            parent.removeGauge("trackpipe_consumer_lag_partition", stage: stage, ("partition", String(partition)))
        }
        for (partition, lag) in byPartition {
            parent.gauge("trackpipe_consumer_lag_partition", stage: stage, ("partition", String(partition))).set(Double(lag))
        }
        parent.gauge("trackpipe_partitions_owned", stage: stage).set(Double(owned))
        if owned == 0 {
            parent.removeGauge("trackpipe_consumer_lag", stage: stage)
        } else {
            parent.gauge("trackpipe_consumer_lag", stage: stage).set(Double(byPartition.values.reduce(0, +)))
        }
    }

    private func bump(_ name: String, _ count: Int) {
        guard count > 0 else { return }
        parent.counter(name, stage: stage).increment(by: Int64(count))
        if let former = PipelineMetrics.formerNames[name] { parent.counter(former, stage: stage).increment(by: Int64(count)) }
    }
}

extension PrometheusCollectorRegistry {
    /// A gauge without a unit.
    func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Gauge {
        makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help), labels: labels)
    }
}

/// One metric per name and label set, made on first use and then reused until removed.
private final class MetricFamily<Metric: Sendable>: Sendable {
    private let make: @Sendable (String, [(String, String)]) -> Metric
    private let drop: @Sendable (Metric) -> Void
    private let members = Mutex<[String: Metric]>([:])

    init(make: @escaping @Sendable (String, [(String, String)]) -> Metric, drop: @escaping @Sendable (Metric) -> Void) {
        self.make = make
        self.drop = drop
    }

    subscript(name: String, labels: [(String, String)]) -> Metric {
        let key = Self.key(name, labels)
        return members.withLock { members in
            if let metric = members[key] { return metric }
            let metric = make(name, labels)
            members[key] = metric
            return metric
        }
    }

    /// Takes the series out of the exposition; a later use makes it again.
    func remove(_ name: String, _ labels: [(String, String)]) {
        let key = Self.key(name, labels)
        if let metric = members.withLock({ $0.removeValue(forKey: key) }) { drop(metric) }
    }

    private static func key(_ name: String, _ labels: [(String, String)]) -> String {
        name + labels.map { "|\($0.0)=\($0.1)" }.joined()
    }
}
