import Kafka
import Logging
import TrackingDomain
import Windowing

/// What a runner tells the people watching it: the running totals, the metrics (once a second),
/// a progress line every `--progress-interval`, a notice while a group member waits for its
/// assignment, the consumer guard's warnings, lost input (`loss`), a progress callback for
/// displays, and where the wall time went (`timeline`).
struct RunnerObserver: RunnerPart {
    let context: RunnerContext
    var progressInterval: Int64 { settings.progressInterval }
    /// Whether the stage emits aggregate records (the progress line then says how many).
    var emits: Bool { settings.destinations[.output] != nil || settings.lineOutputs[.output] != nil }
    let onProgress: (@Sendable (RunnerProgress) -> Void)?
    /// Wall-clock ms when the run started.
    private(set) var started: Int64 = 0

    private(set) var totals = Accounting()
    /// Every jump the guard saw, for the summary.
    private(set) var gaps: [InputSpan] = []
    /// What of the input its group never read, judged lost or not (a bounded run refuses to end
    /// well on lost input).
    var loss: LossWatch
    var timeline = RunnerTimeline()
    /// Records handed to the stage since the last report (for progress between reports).
    private var pendingConsumed = 0
    /// Messages behind the end of the owned partitions, as of the last report; nil while the
    /// stage owns none (its lag is its partitions' owners' to report, not 0).
    private var lastLag: Int64? = 0
    /// Partitions whose lag gauge was last set, to take it away once they are given away.
    private var lagReported: Set<Int32> = []
    private var lastReport: Int64 = 0
    private var lastProgress: Int64 = 0
    private var lastProgressLine: Int64 = 0
    private var lastWaitingLog: Int64 = 0
    private var lastGuardLog: Int64 = .min / 2
    /// The totals as of the last progress line.
    private var lineBase = Accounting()
    /// The watermark as of the last progress line, and when: how fast event time moves.
    private var paceBase: (watermark: Int64, at: Int64)?

    init(_ context: RunnerContext, onProgress: (@Sendable (RunnerProgress) -> Void)?) {
        self.context = context
        self.onProgress = onProgress
        loss = LossWatch(context)
    }

    mutating func begin(at now: Int64) {
        started = now
        lastReport = now
        lastProgress = now
        lastProgressLine = now
        lastWaitingLog = now
    }

    // MARK: Events of the loop

    mutating func partitionsAssigned() {
        if timeline.assignedAt == nil { timeline.assignedAt = timeline.elapsed() }
    }

    mutating func handedToStage(_ count: Int) {
        pendingConsumed += count
        guard count > 0 else { return }
        let at = timeline.elapsed()
        if timeline.firstRecordAt == nil { timeline.firstRecordAt = at }
        timeline.lastRecordAt = at
    }

    /// The admission guard dropped `stale` records and saw offsets jump (`gaps`): what of the
    /// jumps the log start has passed is lost (`loss`), the rest were never records.
    mutating func guarded(stale: Int, gaps: [InputSpan], consumer: any ConsumerClient, now: Int64) {
        guard stale > 0 || !gaps.isEmpty else { return }
        totals.staleDropped += stale
        totals.offsetGaps += gaps.count
        self.gaps += gaps
        metrics?.guarded(stale: stale, gaps: gaps.count)
        loss.judge(gaps, consumer: consumer, now: now)
        if stale > 0 && now - lastGuardLog >= 10_000 {
            lastGuardLog = now
            logger.warning(
                "\(stageName): dropped \(stale) records of partitions not assigned to this worker, or at offsets already processed (the consumer guard against librdkafka 2.0.x's stale deliveries); nothing is lost: their owner reads them")
        }
    }

    /// Once per turn of the loop: reports, the waiting notice, the progress line and callback,
    /// each when it is due.
    mutating func turn<S: Stage>(
        now: Int64, stage: inout S, tracker: PartitionTracker, consumer: any ConsumerClient, awaitsAssignment: Bool
    ) {
        if now - lastReport >= 1_000 {
            let begin = RunnerTimeline.now()
            report(stage: &stage, tracker: tracker, consumer: consumer, now: now)
            lastReport = now
            timeline.add(.reporting, since: begin)
        }
        if awaitsAssignment, now - lastWaitingLog >= 10_000 {
            lastWaitingLog = now
            logger.notice(
                "\(stageName): waiting for partition assignment of \(topic) (group \(group), \((now - started) / 1000) s so far; a member restarting in a group waits about session.timeout.ms)")
        }
        if progressInterval > 0, now - lastProgressLine >= progressInterval {
            report(stage: &stage, tracker: tracker, consumer: consumer, now: now)
            let gauges = stage.gauges()
            logProgress(seconds: Double(now - lastProgressLine) / 1000, pending: pendingText(gauges, now: now))
            lineBase = totals
            lastProgressLine = now
            paceBase = gauges.watermark.map { ($0, now) }
        }
        if let onProgress, now - lastProgress >= 250 {
            onProgress(progress(tracker: tracker, now: now))
            lastProgress = now
        }
    }

    /// Takes the stage's report into the totals and the metrics, with gauges and lag, and judges
    /// what it found unread (`final`: the run ends, and a log start that cannot be read now
    /// never will be).
    mutating func report<S: Stage>(
        stage: inout S, tracker: PartitionTracker, consumer: (any ConsumerClient)?, now: Int64, final: Bool = false
    ) {
        let drained = stage.drainReport()
        totals.add(drained.accounting)
        pendingConsumed = 0
        for notice in drained.notices { logger.notice("\(stageName): \(notice)") }
        loss.judge(drained.unread, consumer: consumer, now: now, final: final)
        for eviction in drained.capacityEvictions {
            logger.warning(
                "window state reached its cap of \(eviction.maxEntries) entries in one partition: \(eviction.windowsEvicted) windows (\(WindowSize.text(counts: eviction.windowsEvictedBySize))) were finalized early (\(eviction.windowsEmittedEarly) emitted before their time); later hits for them go to the dead-letter topic as too_late. Raise --max-entries or lower --retention."
            )
        }
        let lags = consumer.map { tracker.lags(from: $0) } ?? [:]
        lastLag = tracker.isEmpty ? nil : lags.values.reduce(0, +)
        // A partition given away keeps no stale lag: its new owner reports it.
        let reporting = Set(lags.keys)
        let released = lagReported.subtracting(reporting)
        lagReported = reporting
        guard let metrics else { return }
        metrics.record(drained)
        metrics.gauges(stage.gauges(), now: now)
        metrics.lag(lags, released: released, owned: tracker.partitions.count)
    }

    func progress(tracker: PartitionTracker, now: Int64, finished: Bool = false) -> RunnerProgress {
        let bounded = tracker.boundedProgress
        return RunnerProgress(
            elapsedMilliseconds: now - started, consumed: totals.consumed + pendingConsumed, done: bounded?.done,
            total: bounded?.total, finished: finished)
    }

    /// The pending windows for the progress line, with roughly when on the wall clock the first
    /// is due if event time keeps the pace it had since the previous line.
    private func pendingText(_ gauges: StageGauges, now: Int64) -> String? {
        guard var text = gauges.pendingText() else { return nil }
        guard let due = gauges.firstPendingDue, let watermark = gauges.watermark, let base = paceBase, now > base.at else { return text }
        let interval = "\((now - base.at + 500) / 1000) s"
        if due <= watermark {
            text += ": due now"
        } else if watermark > base.watermark {
            let wallMillis = Double(due - watermark) * Double(now - base.at) / Double(watermark - base.watermark)
            text += ": in \(Self.roughly(Int64(min(wallMillis, 1e15)))) if event time keeps the pace of the last \(interval)"
        } else {
            text += ": event time has not moved in the last \(interval) (no new hits, or a partition without any)"
        }
        return text
    }

    /// A wall-clock span as a person says it: `about 40 s`, `about 52 min`, `about 3 h`.
    static func roughly(_ millis: Int64) -> String {
        let seconds = max(0, millis) / 1000
        if seconds < 90 { return "about \(seconds) s" }
        if seconds < 90 * 60 { return "about \((seconds + 30) / 60) min" }
        if seconds < 48 * 3600 { return "about \((seconds + 1800) / 3600) h" }
        return "about \((seconds + 43_200) / 86_400) days"
    }

    /// One line of what happened since the previous one, and a warning when the share of
    /// `too_late` hits jumps: that is a clock or a replay far from now, not a trickle of
    /// offline devices, and it silently fills the dead-letter topic.
    private func logProgress(seconds: Double, pending: String?) {
        let delta = totals.subtracting(lineBase)
        let letters = delta.deadLettered.description
        var line = "\(stageName): consumed \(delta.consumed) (\(Int(Double(delta.consumed) / max(seconds, 0.001)))/s), \(lastLag.map { "lag \($0)" } ?? "owns no partitions"), accepted \(delta.accepted)"
        if delta.filteredTotal > 0 { line += ", filtered \(delta.filteredTotal)" }
        if emits { line += ", emitted \(delta.emitted)" }
        if delta.duplicates > 0 { line += ", duplicates dropped \(delta.duplicates)" }
        if delta.reread > 0 { line += ", reread \(delta.reread)" }
        line += ", dead-lettered \(delta.deadLetteredTotal)" + (letters.isEmpty ? "" : " (\(letters))")
        if !delta.tooLateForSize.isEmpty { line += ", late for size \(WindowSize.text(counts: delta.tooLateForSize))" }
        line += " in the last \(Int(seconds.rounded())) s"
        if let pending { line += "; " + pending }
        logger.info("\(line)")
        let late = delta.deadLettered[.tooLate]
        let hits = delta.accepted + late
        if late >= 10 && Double(late) > 0.01 * Double(hits) {
            logger.warning(
                "\(stageName): \(late) of the last \(hits) hits (\(Int((100 * Double(late) / Double(hits)).rounded())) %) were too late for their windows and went to the dead-letter topic. Event time is far ahead of them: a device or producer clock far in the future, or old input sent again to a live worker (backfill old data with trackpipe replay), or --retention too short for how late hits arrive.")
        }
    }
}
