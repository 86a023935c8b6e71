import Foundation
import Testing
@testable import TrackpipeCLI

@Suite("trackpipe demo")
struct DemoCommandTests {
    @Test("runs end to end with no arguments and prints the aggregates table, dead letters and balanced accounting")
    func demoRuns() throws {
        let result = try TrackpipeBinary.locate().run(["demo", "--count", "4000"])
        #expect(result.exitCode == 0, "\(result.stderr)")
        let out = result.stdout
        #expect(out.contains("Aggregates: last record per delivery and window"))
        #expect(out.contains("open rate"))
        #expect(out.contains("Dead letters:"))
        #expect(out.contains("unknown_action"))
        #expect(out.contains("Accounting: consumed 4000 = accepted"))
        #expect(out.contains("[balanced]"))
        // One table row per delivery and window: the default stream has 4 deliveries over 10 minutes in 5-minute windows.
        let rows = out.split(separator: "\n").filter { $0.range(of: #"^  d[0-9a-f]{5}  "#, options: .regularExpression) != nil }
        #expect(rows.count >= 8)

        // The platform columns, unknown included, add up to the hits: ios + android + unknown = impr + clicks + opens.
        #expect(out.contains("  ios  android  unknown  rev"))
        for row in rows {
            // delivery, "11-22", "10:00-10:05", impr, clicks, opens, u.impr, u.clicks, u.opens, dismissed, open rate, ios, android, unknown, rev
            let cells = row.split(separator: " ").map(String.init)
            try #require(cells.count == 15, "\(row)")
            let (impr, clicks, opens) = (Int(cells[3])!, Int(cells[4])!, Int(cells[5])!)
            let (ios, android, unknown) = (Int(cells[11])!, Int(cells[12])!, Int(cells[13])!)
            #expect(ios + android + unknown == impr + clicks + opens, "\(row)")
        }

        // Example details are cut to 90 characters, and a cut one says so.
        let details = out.split(separator: "\n").compactMap { line -> Substring? in
            guard let match = line.firstMatch(of: /^  [a-z_]+ +[0-9]+ +(.+)$/) else { return nil }
            return match.output.1
        }
        #expect(details.count >= 5)
        #expect(details.allSatisfy { $0.count <= 90 })
        #expect(details.allSatisfy { $0.count < 90 || $0.hasSuffix("…") })
        #expect(details.contains { $0.hasSuffix("…") })
    }

    @Test("a shortened text ends with … and keeps the limit; a short one is unchanged")
    func shortened() {
        #expect(DemoCommand.shortened("abcdef", to: 4) == "abc…")
        #expect(DemoCommand.shortened("abcd", to: 4) == "abcd")
    }

    @Test("nonsense sizes are refused at once, before any broker starts", arguments: [
        (["--partitions", "0"], "--partitions must be at least 1"),
        (["--deliveries", "0"], "--deliveries must be at least 1"),
        (["--count", "0"], "--count must be at least 1"),
        (["--window", "-5s"], "--window -5s: durations cannot be negative"),
        (["--window=-5s"], "--window -5s: durations cannot be negative"),
        (["--window", "0s"], "--window must be longer than 0"),
    ])
    func refusals(arguments: [String], message: String) throws {
        let result = try TrackpipeBinary.locate().run(["demo"] + arguments)
        #expect(result.exitCode == 64)
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.contains("Usage: trackpipe demo"), "the demo's own usage, not the top-level one")
        // Before any broker: the demo's first line (and its broker's address) never came out.
        #expect(result.stdout.isEmpty, "the demo started before refusing: \(result.stdout)")
    }
}
