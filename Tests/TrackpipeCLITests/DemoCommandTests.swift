import Foundation
import Testing
import TrackpipeTestSupport
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
        // What the run's summary says it wrote is what the topics received (the demo reads them back).
        let written = try #require(
            out.firstMatch(
                of: #/Written, as the run's summary counts it: (\d+) aggregate records to tracking-aggregates, (\d+) dead letters to tracking-hits-dlq \(the topics, read back above, hold (\d+) and (\d+)\)/#),
            "\(out)")
        let producedCount = try #require(out.firstMatch(of: #/\((\d+) records produced, /#)).output.1
        let lettersCount = try #require(out.firstMatch(of: #/Dead letters: (\d+) in tracking-hits-dlq/#)).output.1
        #expect(written.output.1 == producedCount && written.output.3 == producedCount, "\(written.output.0)")
        #expect(written.output.2 == lettersCount && written.output.4 == lettersCount, "\(written.output.0)")
        let deadLettered = try #require(out.firstMatch(of: #/\+ dead-lettered (\d+)  \[/#)).output.1
        #expect(deadLettered == lettersCount)
        let tableCounts = out.split(separator: "\n").compactMap { $0.firstMatch(of: #/^  [a-z_]+ +([0-9]+) +\S/#).flatMap { Int($0.output.1) } }
        #expect(tableCounts.reduce(0, +) == Int(lettersCount), "the reasons' counts add up to the letters read back")
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
            // The legend's word for it: rev is the hit count.
            #expect(Int(cells[14]) == impr + clicks + opens, "rev is not impr + clicks + opens: \(row)")
        }

        // A legend that is true: revision is the hit count, not a correction counter.
        #expect(out.contains("rev: the record's revision, the number of hits counted in its window (impr + clicks + opens)"))
        #expect(!out.contains("rev > 1"), "the old legend read revision as a number of corrections")
        let produced = try #require(out.firstMatch(of: /\((\d+) records produced, (\d+) keys\)/))
        if produced.output.1 == produced.output.2 {
            #expect(out.contains("Here no key was emitted more than once."))
        } else {
            #expect(out.contains("of the records produced were earlier revisions"))
        }
        // The rows without impressions are explained, and only when there are some.
        let silent = rows.filter { $0.split(separator: " ").map(String.init)[3] == "0" }
        #expect(!silent.isEmpty, "the default stream's clicks spill into the window after its last impressions")
        #expect(out.contains("Rows with impr 0 hold only clicks and opens: the generated impressions end at 10:10"))
        // The window size, and that run's differs.
        #expect(out.contains("counting in windows of 5m (--window; trackpipe run counts in 1m windows unless told otherwise)"))
        // The next commands, each as DemoCommand.nextSteps has them (a test below runs them).
        #expect(out.contains("Next, in another terminal for the broker:"))
        for (command, _) in DemoCommand.nextSteps { #expect(out.contains("  \(command)"), "\(command)") }

        // Example details are cut to 90 characters, and a cut one says so.
        let details = out.split(separator: "\n").compactMap { line -> Substring? in
            guard let match = line.firstMatch(of: /^  [a-z_]+ +[0-9]+ +(.+)$/) else { return nil }
            return match.output.1
        }
        #expect(details.count >= 5)
        #expect(details.allSatisfy { $0.count <= 90 })
        #expect(details.contains { $0.hasSuffix("…") })
        // A detail of exactly 90 is shown whole (the table cannot tell it from a cut one).
        let (whole, long) = (String(repeating: "w", count: 90), String(repeating: "l", count: 91))
        #expect(DemoCommand.shortened(whole, to: 90) == whole && DemoCommand.shortened(long, to: 90) == String(long.prefix(89)) + "…")
    }

    @Test("the commands the demo prints at the end work as printed: a broker, generate, run, kcat")
    func nextStepsWork() throws {
        let binary = try TrackpipeBinary.locate()
        let broker = try BackgroundTrackpipe(binary, ["embedded-broker"])
        defer { broker.signal(SIGTERM); _ = broker.waitForExit(seconds: SafetyDeadline.seconds) }
        let started = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { broker.stdout.contains("bootstrap: ") }
        try #require(started, "the embedded broker never printed its address: \(broker.stderr)")
        let address = try #require(broker.stdout.firstMatch(of: /bootstrap: (\S+)/)).output.1
        var outputs: [String] = []
        for (command, _) in DemoCommand.nextSteps.dropFirst() {
            // As a user would type it in a shell, with the broker's address and this build's binary.
            let line = command.replacingOccurrences(of: "ADDRESS", with: String(address))
                .replacingOccurrences(of: "trackpipe ", with: "'\(binary.url.path)' ")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", line]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(line)")
            outputs.append(String(decoding: data, as: UTF8.self))
        }
        #expect(outputs[1].contains("trackpipe summary") && outputs[1].contains("balanced      yes"), "run: \(outputs[1].suffix(800))")
        let aggregates = outputs[2].split(separator: "\n")
        #expect(!aggregates.isEmpty && aggregates.allSatisfy { $0.contains("@") && $0.contains("\"revision\":") }, "kcat: \(outputs[2].prefix(400))")
        #expect(outputs[3].contains("trackpipe.error.reason="), "kcat on the dead letters: \(outputs[3].prefix(400))")
    }

    @Test("Ctrl-C (SIGINT) stops the demo with exit 130, showing nothing more")
    func interrupted() throws {
        let demo = try BackgroundTrackpipe(try TrackpipeBinary.locate(), ["demo"])
        defer { demo.signal(SIGKILL) }
        let started = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { demo.stdout.contains("1. embedded Kafka on ") }
        try #require(started, "the demo never started: \(demo.stderr)")
        demo.signal(SIGINT)
        let status = demo.waitForExit(seconds: SafetyDeadline.seconds)
        #expect(status == 130, "exit status \(String(describing: status)); stderr: \(demo.stderr)")
        #expect(demo.process.terminationReason == .exit, "it exited by itself, not killed by the signal")
        #expect(!demo.stdout.contains("Accounting:"), "the demo went on after the interruption")
        #expect(demo.stderr.contains("trackpipe demo: SIGINT received, stopping"))
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
