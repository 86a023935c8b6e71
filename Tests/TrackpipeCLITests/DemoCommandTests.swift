import Foundation
import Testing

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
    }
}
