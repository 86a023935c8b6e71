import Foundation
import Kafka
import Pipeline
import RecordFormats
import Runner
import Testing
import TrackpipeTestSupport

/// The exit summary as a user reads it (`trackpipe summary` of run and replay), taken back into
/// numbers so that a test can hold what it says was written to what the topics received.
struct SummaryReading {
    struct Stage {
        var name: String
        var consumed = 0
        var accepted = 0
        var filtered = 0
        var deadLettered: [String: Int] = [:]
        var deadLetteredTotal = 0
        var emitted: Int?
        /// The `outside range` line's total, for a backfill of a range.
        var outsideRange: Int?
        var balanced: Bool?
        /// The `late for size` line: hits too late for a size's windows, counted in a larger one's.
        var lateForSize: [String: Int] = [:]
    }

    var stages: [Stage] = []

    /// Reads the summary out of a command's output; fails the test if there is none.
    init(_ output: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let lines = output.split(separator: "\n").map(String.init)
        let start = try #require(lines.firstIndex(of: "trackpipe summary"), "no summary in: \(output.suffix(2_000))", sourceLocation: sourceLocation)
        for line in lines[(start + 1)...] {
            if let match = line.firstMatch(of: #/^stage (\S+) /#) {
                stages.append(Stage(name: String(match.output.1)))
                continue
            }
            guard line.hasPrefix("  ") else { break }
            if stages.isEmpty { stages.append(Stage(name: "aggregate")) }
            let fields = line.dropFirst(2)
            func number(_ label: String) -> Int? {
                guard fields.hasPrefix(label) else { return nil }
                return fields.dropFirst(label.count).firstMatch(of: #/^\s*(\d+)/#).flatMap { Int($0.output.1) }
            }
            if let n = number("consumed") { stages[stages.count - 1].consumed = n }
            if let n = number("accepted") { stages[stages.count - 1].accepted = n }
            if let n = number("filtered") { stages[stages.count - 1].filtered = n }
            if let n = number("emitted") { stages[stages.count - 1].emitted = n }
            if let n = number("outside range") { stages[stages.count - 1].outsideRange = n }
            if let n = number("dead-lettered") {
                stages[stages.count - 1].deadLetteredTotal = n
                if let reasons = fields.firstMatch(of: #/\((.*)\)$/#) {
                    for part in reasons.output.1.split(separator: ", ") {
                        let pair = part.split(separator: " ")
                        if pair.count == 2, let count = Int(pair[1]) { stages[stages.count - 1].deadLettered[String(pair[0])] = count }
                    }
                }
            }
            if fields.hasPrefix("late for size "), let list = fields.dropFirst(14).split(separator: " (").first {
                for part in list.split(separator: ", ") {
                    let pair = part.split(separator: " ")
                    if pair.count == 2, let count = Int(pair[1]) { stages[stages.count - 1].lateForSize[String(pair[0])] = count }
                }
            }
            if fields.hasPrefix("balanced") { stages[stages.count - 1].balanced = fields.contains(" yes:") }
        }
    }

    /// Every stage's dead letters, by reason.
    var deadLettered: [String: Int] {
        stages.reduce(into: [:]) { total, stage in total.merge(stage.deadLettered) { $0 + $1 } }
    }

    var emitted: Int { stages.compactMap(\.emitted).reduce(0, +) }

    /// Dead letters as a topic holds them, by the reason in their headers.
    static func byReason(_ letters: [StoredRecord]) -> [String: Int] {
        letters.reduce(into: [:]) { counts, record in
            counts[DeadLetter(headers: record.headers)?.reason.rawValue ?? "(no readable reason header)", default: 0] += 1
        }
    }

    /// Holds the summary to the topics: the dead letters it counts, by reason, are those the
    /// dead-letter topic received; the aggregate records it says it emitted are those the
    /// output topic received; the hits it says it counted are those the last record of each
    /// window holds (its revision is its window's hit count).
    func expectMatches(_ topics: TopicContents, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!stages.isEmpty && stages.allSatisfy { $0.balanced == true }, "\(stages)", sourceLocation: sourceLocation)
        #expect(deadLettered == Self.byReason(topics.deadLetters), "the summary's dead letters are what the topic received", sourceLocation: sourceLocation)
        #expect(stages.map(\.deadLetteredTotal).reduce(0, +) == topics.deadLetters.count, sourceLocation: sourceLocation)
        #expect(emitted == topics.outputRecords, "the summary's emitted records are what the output topic received", sourceLocation: sourceLocation)
        let counted = topics.lastByKey.values.map { $0["revision"] as? Int ?? 0 }.reduce(0, +)
        #expect(stages.last?.accepted == counted, "the hits the summary counted are those its windows hold", sourceLocation: sourceLocation)
    }
}
