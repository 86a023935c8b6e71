import Runner
import Foundation
import Kafka
import TrackingDomain
import Windowing

/// What a run did, for the exit summary and for tests: one part per stage.
public struct PipelineSummary: Sendable {
    public var stages: [StageSummary]
    public var elapsedMilliseconds: Int64
    /// The window starts a backfill writes (`replay --from/--to`); nil for a run of all time.
    public var range: Range<Int64>? = nil

    /// The run end to end: messages, filters and dead letters as the first stage saw them,
    /// counted hits and emissions as the last one did, dead letters of every stage. It balances
    /// for a single instance that ran without crashing; with several instances, balance each
    /// stage instead.
    public var accounting: Accounting {
        guard let first = stages.first, let last = stages.last else { return Accounting() }
        var total = Accounting()
        total.consumed = first.accounting.consumed
        total.filtered = first.accounting.filtered
        total.accepted = last.accounting.accepted
        total.rereadFinal = last.accounting.rereadFinal
        total.tooLateForSize = last.accounting.tooLateForSize
        total.emitted = last.accounting.emitted
        total.duplicates = stages.count > 1 ? last.accounting.duplicates : 0
        total.acceptedOutsideRange = last.accounting.acceptedOutsideRange
        total.filteredOutsideRange = first.accounting.filteredOutsideRange
        for stage in stages { total.deadLetteredOutsideRange.add(stage.accounting.deadLetteredOutsideRange) }
        for stage in stages { total.deadLettered.add(stage.accounting.deadLettered) }
        return total
    }

    /// Committed positions on the input topic.
    public var committed: [TopicPartitionOffset] { stages.first?.committed ?? [] }

    public var text: String {
        let seconds = max(Double(elapsedMilliseconds) / 1000, 0.001)
        var lines = ["trackpipe summary"]
        for stage in stages {
            let a = stage.accounting
            let behindShuffle = stages.count > 1 && stage.stage == "aggregate"
            if stages.count > 1 { lines.append("stage \(stage.stage) (reading \(stage.topic))") }
            let unit = behindShuffle ? "events" : "messages"
            let rate = Int(Double(a.consumed) / seconds)
            if let range { lines.append("  range         " + Self.describe(range)) }
            lines.append("  consumed      \(a.consumed) \(unit) in \(String(format: "%.1f", seconds)) s (\(rate)/s)" + (a.reread > 0 ? ", \(a.reread) of them reread" : ""))
            let acceptedNote = stage.stage == "normalize" ? " (sent on to the repartition topic)" : (a.rereadFinal > 0 ? " (\(a.rereadFinal) reread, already final)" : "")
            lines.append("  accepted      \(a.accepted)" + (range != nil ? " (in windows of the range)" : acceptedNote))
            if !behindShuffle { lines.append("  filtered      \(a.filteredTotal)" + reasons(a.filtered)) }
            if behindShuffle { lines.append("  duplicates    \(a.duplicates) (sent twice upstream, dropped)") }
            lines.append("  dead-lettered \(a.deadLetteredTotal)" + reasons(a.deadLettered))
            if !a.tooLateForSize.isEmpty {
                lines.append("  late for size \(WindowSize.text(counts: a.tooLateForSize)) (hits too late for that size's windows, counted in a larger size's)")
            }
            if stage.stage != "normalize" { lines.append("  emitted       \(a.emitted) aggregate records") }
            if range != nil || a.outsideRangeTotal > 0 {
                var parts = ["\(a.acceptedOutsideRange) hits of other windows"]
                let filteredOutside = a.filteredOutsideRange.total
                if filteredOutside > 0 { parts.append("\(filteredOutside) filtered" + reasons(a.filteredOutsideRange)) }
                parts.append("\(a.deadLetteredOutsideRange.total) dead letters not sent" + reasons(a.deadLetteredOutsideRange))
                lines.append("  outside range \(a.outsideRangeTotal) read and left aside, nothing written: " + parts.joined(separator: ", "))
            }
            var equation = behindShuffle ? "accepted + duplicates + dead-lettered" : "accepted + filtered + dead-lettered"
            if range != nil || a.outsideRangeTotal > 0 { equation += " + outside range" }
            lines.append("  balanced      \(a.balanced ? "yes" : "NO"): consumed = \(equation)")
            if a.staleDropped > 0 || a.offsetGaps > 0 {
                lines.append("  guarded       \(a.staleDropped) stale records dropped, \(a.offsetGaps) offset gaps")
            }
            if !stage.lostInput.isEmpty {
                lines.append(
                    "  lost          \(stage.lostInput.reduce(Int64(0)) { $0 + $1.count }) offsets, deleted before they were read: \(Self.describe(stage.lostInput))")
            }
            if let pending = stage.gaugesAtEnd.pendingText() { lines.append("  pending       " + pending) }
            if !stage.committed.isEmpty {
                lines.append("  committed     " + stage.committed.map { "\($0.partition)@\($0.offset)" }.joined(separator: " "))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// A backfill's range as the summary names it: `windows starting 2026-11-22T08:10:00Z to
    /// 2026-11-22T08:20:00Z (exclusive)`, or open at one end.
    public static func describe(_ range: Range<Int64>) -> String {
        switch (range.lowerBound == .min, range.upperBound == .max) {
        case (true, true): "every window"
        case (false, true): "windows starting from \(RFC3339.format(epochMillis: range.lowerBound)) on"
        case (true, false): "windows starting before \(RFC3339.format(epochMillis: range.upperBound))"
        case (false, false):
            "windows starting from \(RFC3339.format(epochMillis: range.lowerBound)) to \(RFC3339.format(epochMillis: range.upperBound)) (exclusive)"
        }
    }

    /// Lost offsets, as an operator looks them up: `tracking-hits[0] offsets 120 to 559 (440)`,
    /// `g-repartition[3] offsets before 2040` (every record before it), the first `limit` of them
    /// and how many more.
    public static func describe(_ lost: [InputSpan], limit: Int = 10) -> String {
        var parts = lost.prefix(limit).map { range in
            let partition = "\(range.partition.topic)[\(range.partition.partition)]"
            guard let from = range.from else { return "\(partition) offsets before \(range.to)" }
            return range.count == 1 ? "\(partition) offset \(from)" : "\(partition) offsets \(from) to \(range.to - 1) (\(range.count))"
        }
        if lost.count > limit { parts.append("and \(lost.count - limit) more ranges") }
        return parts.joined(separator: ", ")
    }

    /// Where each stage's wall time went (`run --timings`).
    public var timelineText: String {
        (["trackpipe timings"] + stages.map { "  \($0.stage): \($0.timeline.text)" }).joined(separator: "\n")
    }

    private func reasons(_ counts: ReasonCounts<some CountedReason>) -> String {
        counts.total > 0 ? " (\(counts))" : ""
    }
}
