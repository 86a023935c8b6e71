import Foundation
import Kafka

/// What a run did, for the exit summary and for tests.
public struct PipelineSummary: Sendable {
    public var accounting: Accounting
    public var elapsedMilliseconds: Int64
    public var committed: [TopicPartitionOffset]

    public var text: String {
        let a = accounting
        let seconds = max(Double(elapsedMilliseconds) / 1000, 0.001)
        let rate = Int(Double(a.consumed) / seconds)
        let elapsed = String(format: "%.1f", seconds)
        var lines: [String] = [
            "trackpipe summary",
            "  consumed      \(a.consumed) messages in \(elapsed) s (\(rate) msg/s)",
            "  accepted      \(a.accepted)" + (a.replayedFinal > 0 ? " (\(a.replayedFinal) replayed, already final)" : ""),
            "  filtered      \(a.filteredTotal)" + reasons(a.filtered),
            "  dead-lettered \(a.deadLetteredTotal)" + reasons(a.deadLettered),
            "  emitted       \(a.emitted) aggregate records",
            "  balanced      \(a.balanced ? "yes" : "NO"): consumed = accepted + filtered + dead-lettered",
        ]
        if !committed.isEmpty {
            lines.append("  committed     " + committed.map { "\($0.partition)@\($0.offset)" }.joined(separator: " "))
        }
        return lines.joined(separator: "\n")
    }

    private func reasons(_ counts: [String: Int]) -> String {
        guard !counts.isEmpty else { return "" }
        return " (" + counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
    }
}
