import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

/// `trackpipe-check`, the long checks' tool (docs/simulation.md), as a developer runs it: built
/// beside `trackpipe`, it says how many schedules failed, exits 1 when one did, and prints the
/// command that replays a failing seed alone.
@Suite("trackpipe-check")
struct CheckToolTests {
    static func tool() throws -> TrackpipeBinary {
        let trackpipe = try TrackpipeBinary.locate()
        let url = trackpipe.url.deletingLastPathComponent().appendingPathComponent("trackpipe-check")
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw TrackpipeBinary.LocateError.notFound([url.path + " (swift build --product trackpipe-check)"])
        }
        return TrackpipeBinary(url: url)
    }

    @Test("simulate: schedules that pass exit 0 and say none failed")
    func simulatePasses() throws {
        let result = try Self.tool().run(["simulate", "--quick", "--family", "steady", "--schedules", "3"])
        #expect(result.exitCode == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("3 schedules in"))
        #expect(result.stdout.contains("; 0 failed"))
    }

    @Test("simulate: a planted defect exits 1 with each failing seed, and the printed command replays one alone, failing the same way")
    func simulateFailureReplays() throws {
        let tool = try Self.tool()
        let result = try tool.run(["simulate", "--quick", "--family", "steady", "--fault", "skip-one-record", "--schedules", "12"])
        #expect(result.exitCode == 1, "\(result.stdout)\(result.stderr)")
        let failures = result.stdoutLines.filter { $0.hasPrefix("FAILED steady seed ") }
        try #require(!failures.isEmpty, "no schedule caught the skipped record: \(result.stdout)")
        // The report's replay line carries this run's options (--quick, the fault).
        let replayLine = try #require(result.stdoutLines.first { $0.hasPrefix("replay: trackpipe-check simulate --family steady --seed ") })
        let arguments = replayLine.dropFirst("replay: trackpipe-check ".count).split(separator: " ").map(String.init)
        #expect(arguments.contains("--fault") && arguments.contains("--quick"))
        let seed = try #require(arguments.firstIndex(of: "--seed").map { arguments[$0 + 1] })
        let alone = try tool.run(arguments)
        #expect(alone.exitCode == 1, "\(alone.stdout)\(alone.stderr)")
        #expect(alone.stdoutLines.filter { $0.hasPrefix("FAILED ") } == failures.filter { $0.hasPrefix("FAILED steady seed \(seed):") })
    }

    @Test("simulate-runner: a family's seeds run against the simulated cluster and exit 0 when every count is exact")
    func simulateRunnerPasses() throws {
        let result = try Self.tool().run(["simulate-runner", "--family", "rebalances", "--seeds", "2"])
        #expect(result.exitCode == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("rebalances: 2 seeds, 0 failed"))
        #expect(result.stdout.contains("2 schedules in"))
    }

    @Test("state: a short live run per window size (one size, or 1m,1h from one pipeline) says what the state topic was written against what it keeps, per size at most 2×, reads the state back after SIGKILL and holds each size's output to its reference")
    func stateCosts() throws {
        let result = try Self.tool().run([
            "state", "--rate", "300", "--seconds", "12", "--windows", "1m", "1h", "1m,1h", "--partitions", "2", "--deliveries", "2",
            "--commit-interval", "1s",
        ])
        #expect(result.exitCode == 0, "\(result.stdout)\(result.stderr.suffix(2_000))")
        // One pipeline of two sizes: each size's share of the one state topic, and its output.
        let round = result.stdoutLines.drop { !$0.hasPrefix("  round 1 this build --window 1m,1h: wrote ") }
        for size in ["1m", "1h"] {
            let line = try #require(round.first { $0.hasPrefix("    \(size): wrote ") }, "\(result.stdout)")
            let ratio = line.components(separatedBy: ": ").dropFirst(2).first.flatMap { Double($0.prefix { $0 != "×" }) }
            #expect(ratio.map { $0 >= 1 && $0 <= 2 } == true && line.contains("output exact ("), "\(line)")
        }
        #expect(round.contains { $0.hasPrefix("    task records (every size's): wrote ") }, "\(result.stdout)")
        for window in ["1m", "1h", "1m,1h"] {
            let round = try #require(result.stdoutLines.first { $0.hasPrefix("  round 1 this build --window \(window): wrote ") }, "\(result.stdout)")
            #expect(round.contains("× the live state") && round.contains("output exact ("), "\(round)")
            // State was written and read back: the restart after SIGKILL restored some records.
            let restored = round.components(separatedBy: "restore after SIGKILL read ").last?.split(separator: " ").first.flatMap { Int($0) }
            #expect((restored ?? 0) > 0, "\(round)")
            #expect(result.stdout.contains("  this build --window \(window): wrote "), "the medians name it")
        }
        #expect(result.stdout.contains("every output exact"))
    }

    @Test("state --brokers: a run already made, of 1m,1h from one pipeline over 150 minutes, has its state topic tallied per size: written against live, and for the windows still kept (the expired ones deleted) at most 2×")
    func stateOfARun() throws {
        let broker = try EmbeddedBroker()
        for topic in ["hits", "agg-1m", "agg-1h", "dlq", "made-repartition", "made-state"] { try broker.createTopic(topic, partitions: 4) }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 6_000, seed: 5, deliveries: 4, span: 150 * 60_000)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let run = try TrackpipeBinary.locate().run([
            "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--window", "1m,1h", "--output-topic", "agg-1m,agg-1h",
            "--dlq-topic", "dlq", "--group", "made", "--commit-interval", "200ms", "--log-level", "warning", "-X", "session.timeout.ms=6000",
        ])
        #expect(run.exitCode == 0, "\(run.stderr.suffix(2_000))")
        let result = try Self.tool().run(["state", "--brokers", broker.bootstrapServers, "--state-topic", "made-state", "--partitions", "4"])
        #expect(result.exitCode == 0, "\(result.stdout)\(result.stderr)")
        for size in ["1m", "1h"] {
            let line = try #require(result.stdoutLines.first { $0.hasPrefix("  windows of \(size): wrote ") }, "\(result.stdout)")
            let kept = line.components(separatedBy: "for the windows still kept, ").last?.components(separatedBy: ": ").last
            let ratio = kept.flatMap { Double($0.prefix { $0 != "×" }) }
            #expect(ratio.map { $0 >= 1 && $0 <= 2 } == true, "\(line)")
        }
        // 150 minutes of 1m windows, an hour's retention: most were written, expired and deleted.
        let minutes = try #require(result.stdoutLines.first { $0.hasPrefix("  windows of 1m: wrote ") })
        let all = minutes.components(separatedBy: "records: ").dropFirst().first.flatMap { Double($0.prefix { $0 != "×" }) }
        #expect((all ?? 0) > 2, "\(minutes)")
    }

    @Test("an unknown family is refused with the names there are")
    func unknownFamily() throws {
        let result = try Self.tool().run(["simulate", "--family", "nope", "--schedules", "1"])
        #expect(result.exitCode == 64)
        #expect(result.stderr.contains("no family nope; one of: "))
        #expect(result.stderr.contains("steady"))
    }
}
