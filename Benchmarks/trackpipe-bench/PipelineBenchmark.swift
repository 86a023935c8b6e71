import ArgumentParser
import Benchmarking
import Foundation
import HitGenerator
import TrackingDomain
import Windowing

/// The whole worker as a new user meets it: `trackpipe run --until-end` (two stages, and the
/// single stage of `--input-keyed-by-delivery`) against `kcat -G` reading the same topic, on an
/// embedded cluster in a process of its own, alternating rounds, fresh groups every time.
///
/// Every contender pays a group join (the embedded broker holds the first join about 3 s);
/// each one's join is read from its own log (the moment it is handed its partitions) and
/// subtracted, so the ratios compare the work after the join. CPU seconds of each contender
/// and of the broker are measured too, and CPU per hit is compared with kcat's: kcat's wall
/// time swings with the embedded broker's fetch waits, its CPU does not. kcat writes its
/// records to /dev/null (each value and a newline, unless `--kcat-format` says otherwise).
struct PipelineBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "trackpipe run --until-end (two stages and one) vs kcat -G, broker in its own process.")

    @Option(help: "Hits to preload.") var count = 800_000
    @Option(help: "Partitions of the input topic (the embedded broker keeps about 5 MB per partition).")
    var partitions = 64
    @Option(help: "Alternating rounds of each contender.") var rounds = 3
    @Option(help: "Windowing shards for trackpipe.") var shards = 2
    @Option(help: "Share of bad messages in the generated stream.") var badRate = 0.03
    @Option(help: "One delivery in this many has tracking off.") var trackingOffEvery = 4
    @Option(help: "Contenders, comma-separated: kcat, two (stages), one (stage), three (two stages counting 1m, 1h and 1d), three-apart (three two-stage runs of one size each, one after the other); with --baseline also two-base, one-base.")
    var contenders = "kcat,two,one"
    @OptionGroup var builds: TrackpipeBuilds
    @Option(parsing: .singleValue, help: "Extra -X property for trackpipe (repeatable), to try settings.")
    var property: [String] = []
    @Option(help: "kcat's output format (-f), e.g. '%o\\n'; default: its default output, each record's value and a newline.")
    var kcatFormat: String?
    @Flag(help: "kcat writes its records into a pipe this benchmark reads (as earlier versions of it did) instead of /dev/null.")
    var kcatToPipe = false
    @Flag(
        help:
            "Hits of the last ten minutes (ending at the start of the benchmark, as `trackpipe generate` makes them) instead of a fixed hour days ago: live traffic, where the normalize stage rules out every hit as too late and sends it without its original. By default every hit is days old, so may be too late and carries its original (a recount of history).")
    var recent = false
    @Flag(help: "Print trackpipe's run summaries.") var verbose = false
    @Flag(help: "Run trackpipe with --timings (times every produce call, which costs a little) and print the timelines.")
    var timings = false
    @Flag(help: "Preload, print the broker's address and each contender's command line, and keep the broker up until interrupted: for profiling one contender by hand (perf record, perf stat).")
    var hold = false

    func run() throws {
        let (binary, base) = try builds.resolved()
        let chosen = contenders.split(separator: ",").map(String.init)
        let groups = (1...rounds).map { "bench-\(UUID().uuidString.prefix(6).lowercased())-\($0)" }
        // The embedded broker creates only what it is told to (every topic with the same
        // partition count): the input, the outputs, each two-stage round's repartition and state
        // topics, and each one-stage round's state topic.
        let broker = try BrokerProcess(
            binary: binary,
            topics: ["tracking-hits", "tracking-hits-by-delivery", "tracking-aggregates", "tracking-hits-dlq"]
                + ["agg-1m", "agg-1h", "agg-1d", "apart-1m", "apart-1h", "apart-1d"] + groups.flatMap(Self.internalTopics),
            partitions: partitions)
        defer { broker.stop() }
        // Recent hits span ten minutes ending at the present, as `trackpipe generate` makes them
        // (a click comes up to 63 s after its impression): they stay within half the hour's
        // retention for the twenty minutes or so a benchmark of several rounds takes.
        let span: Int64 = recent ? 10 * 60_000 : 60 * 60_000
        var config = HitStreamConfig(count: count, seed: 99, deliveries: 200, span: span, badRate: badRate, trackingOffEvery: trackingOffEvery)
        if recent { config.start = Int64(Date().timeIntervalSince1970 * 1_000) - span - 63_000 }
        let hits = HitStream(config).generate()
        let bytes = hits.map(\.value.count).reduce(0, +)
        print(
            "preloading \(count) generated hits (\(bytes / 1_000_000) MB, avg \(bytes / max(count, 1)) bytes) into \(partitions) partitions of an embedded broker at \(broker.bootstrapServers)..."
        )
        try BenchSupport.preload(
            bootstrapServers: broker.bootstrapServers, topic: "tracking-hits", partitions: partitions, values: hits.map(\.value),
            timestamps: hits.map(\.kafkaTimestamp))
        if chosen.contains("one") || chosen.contains("one-base") {
            // The single stage is for input keyed by delivery: the same hits, each in its
            // delivery's partition (hits without one, round-robin).
            let placed = hits.enumerated().map { index, hit -> Int32 in
                switch hit.truth {
                case .counted(let expected), .stale(let expected):
                    DeliveryHash.partition(of: DeliveryID(expected.deliveryId), count: Int32(partitions))
                default: Int32(index % partitions)
                }
            }
            try BenchSupport.preload(
                bootstrapServers: broker.bootstrapServers, topic: "tracking-hits-by-delivery", partitions: partitions,
                values: hits.map(\.value), timestamps: hits.map(\.kafkaTimestamp), placement: placed)
        }

        if hold {
            holdForProfiling(binary, broker, groups: groups)
            return
        }
        var results: [String: [TimedRun]] = [:]
        for (round, group) in groups.enumerated() {
            for contender in chosen {
                let run: TimedRun
                switch contender {
                case "kcat": run = try kcat(broker)
                case "two": run = try trackpipeRun(binary, broker, group: group, keyedByDelivery: false)
                case "one": run = try trackpipeRun(binary, broker, group: group + "-one", keyedByDelivery: true)
                case "three":
                    run = try trackpipeRun(
                        binary, broker, group: group + "-three", keyedByDelivery: false,
                        window: ["--window", "1m,1h,1d", "--output-topic", "agg-1m,agg-1h,agg-1d"])
                case "three-apart":
                    // Three pipelines of one size each, one after the other: what several sizes cost without them.
                    let runs = try ["1m", "1h", "1d"].map { size in
                        try trackpipeRun(
                            binary, broker, group: group + "-apart-" + size, keyedByDelivery: false,
                            window: ["--window", size, "--output-topic", "apart-" + size])
                    }
                    run = runs.dropFirst().reduce(runs[0]) { total, next in
                        var total = total
                        total.wall += next.wall
                        total.joined = (total.joined ?? 0) + (next.joined ?? 0)
                        total.cpu += next.cpu
                        total.cpuAtJoin = (total.cpuAtJoin ?? 0) + (next.cpuAtJoin ?? 0)
                        total.pageFaults += next.pageFaults
                        total.brokerCPU += next.brokerCPU
                        return total
                    }
                case "two-base", "one-base":
                    guard let base else { throw BenchError("\(contender) needs --baseline PATH") }
                    run = try trackpipeRun(base, broker, group: group + "-base" + (contender == "one-base" ? "-one" : ""), keyedByDelivery: contender == "one-base")
                default: throw BenchError("unknown contender \(contender): use kcat, two, one, three, three-apart, two-base, one-base")
                }
                results[contender, default: []].append(run)
                print(
                    String(
                        format: "round %d %@: wall %.2f s, join %.2f s, after join %.2f s (%@), CPU %.2f s (%.2f µs per hit, %.0f %% of the time after the join; %.3f s after the join), %d page faults, broker CPU %.2f s",
                        round + 1, name(contender), run.wall, run.joined ?? 0, run.afterJoin, BenchSupport.rate(count, run.afterJoin),
                        run.cpu, run.cpu * 1e6 / Double(count), 100 * run.cpu / max(run.afterJoin, 0.001), run.cpuAfterJoin, run.pageFaults,
                        run.brokerCPU))
                if (verbose || timings) && contender != "kcat" {
                    print(verbose ? run.stdout : run.stdout.split(separator: "\n").drop { !$0.hasPrefix("trackpipe timings") }.joined(separator: "\n"))
                }
            }
        }
        print("medians over \(rounds) rounds (after the join):")
        for contender in chosen {
            let runs = results[contender] ?? []
            let after = BenchSupport.median(runs.map(\.afterJoin))
            let cpu = BenchSupport.median(runs.map(\.cpu))
            let live = BenchSupport.median(runs.map(\.cpuAfterJoin))
            let faults = BenchSupport.median(runs.map { Double($0.pageFaults) })
            print(
                String(
                    format: "  %@: %.2f s (%@; best round %.2f s), join %.2f s, CPU %.2f s = %.2f µs per hit (%.2f µs after the join), %.0f page faults (%.1f per 1000 hits), broker CPU %.2f s",
                    name(contender), after, BenchSupport.rate(count, after), runs.map(\.afterJoin).min() ?? 0,
                    BenchSupport.median(runs.map { $0.joined ?? 0 }), cpu, cpu * 1e6 / Double(count), live * 1e6 / Double(count), faults,
                    faults * 1000 / Double(count), BenchSupport.median(runs.map(\.brokerCPU))))
        }
        if let k = results["kcat"], let kcatBest = k.map(\.afterJoin).min() {
            print("kcat ran as: \(kcatDescription)")
            for contender in chosen where contender != "kcat" {
                let runs = results[contender] ?? []
                // The ratio of each round (same moment of the machine), then the median of those.
                let ratios = zip(k, runs).map { $0.afterJoin / $1.afterJoin }
                // kcat's wall time swings with the embedded broker's fetch waits: against its
                // best round, a slow kcat round cannot flatter trackpipe.
                let againstBest = kcatBest / BenchSupport.median(runs.map(\.afterJoin))
                print(
                    String(
                        format: "ratio %@ / kcat (rates after the join): median %.2f, rounds %@; against kcat's best round %.2f (target >= 0.8)",
                        name(contender), BenchSupport.median(ratios), ratios.map { String(format: "%.2f", $0) }.joined(separator: " "),
                        againstBest))
                let cpuRatios = zip(k, runs).map { $1.cpu / max($0.cpu, 0.001) }
                print(
                    String(
                        format: "CPU %@ / kcat (per hit): median %.2f×, rounds %@%@", name(contender),
                        BenchSupport.median(cpuRatios), cpuRatios.map { String(format: "%.2f", $0) }.joined(separator: " "),
                        contender == "two" ? " (target <= 1.8×)" : contender == "one" ? " (target <= 1.65×)" : ""))
                let liveRatios = zip(k, runs).map { $1.cpuAfterJoin / max($0.cpuAfterJoin, 0.001) }
                print(
                    String(
                        format: "CPU after the join %@ / kcat: median %.2f×, rounds %@", name(contender), BenchSupport.median(liveRatios),
                        liveRatios.map { String(format: "%.2f", $0) }.joined(separator: " ")))
            }
        }
        // What the shuffle costs (two stages over one, target 1.1×) and what a change costs
        // (this build over the baseline), round by round as above.
        for (numerator, denominator, target) in [
            ("two", "one", " (target <= 1.1×)"), ("two-base", "one-base", ""), ("two", "two-base", ""), ("one", "one-base", ""),
        ] {
            guard let top = results[numerator], let bottom = results[denominator] else { continue }
            let cpuRatios = zip(top, bottom).map { $0.cpu / max($1.cpu, 0.001) }
            print(
                String(
                    format: "CPU %@ / %@: median %.2f×, rounds %@%@", name(numerator), name(denominator), BenchSupport.median(cpuRatios),
                    cpuRatios.map { String(format: "%.2f", $0) }.joined(separator: " "), target))
            // What a live worker pays per hit: the start-up and the group join left out.
            let liveRatios = zip(top, bottom).map { $0.cpuAfterJoin / max($1.cpuAfterJoin, 0.001) }
            print(
                String(
                    format: "CPU after the join %@ / %@: median %.2f×, rounds %@", name(numerator), name(denominator),
                    BenchSupport.median(liveRatios), liveRatios.map { String(format: "%.2f", $0) }.joined(separator: " ")))
        }
    }

    /// Prints how to run each contender against the preloaded broker, then waits for SIGINT or
    /// SIGTERM with the broker up.
    func holdForProfiling(_ binary: String, _ broker: BrokerProcess, groups: [String]) {
        print("broker: \(broker.bootstrapServers) (pid \(broker.processIdentifier)); fresh groups for the contenders: \(groups.joined(separator: " "))")
        print("kcat:       kcat -b \(broker.bootstrapServers) -G kcat-NAME -o beginning -e -X session.timeout.ms=6000 tracking-hits > /dev/null")
        for (name, keyed) in [("two stages", false), ("one stage", true)] {
            let arguments = trackpipeArguments(broker, group: keyed ? "\(groups[0])-one" : groups[0], keyedByDelivery: keyed)
            print("\(name): \(binary) \(arguments.joined(separator: " "))")
        }
        print("holding the broker until SIGINT or SIGTERM...")
        fflush(nil)  // every stream: the address must reach a pipe or file before the wait
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        sigprocmask(SIG_BLOCK, &signals, nil)
        var received: Int32 = 0
        sigwait(&signals, &received)
    }

    /// How kcat is run, for the report: its output format decides how much work it does per record.
    var kcatDescription: String {
        "kcat -G GROUP -o beginning -e -X session.timeout.ms=6000 \(kcatFormat.map { "-f '\($0)' " } ?? "")tracking-hits \(kcatToPipe ? "| (this benchmark)" : "> /dev/null") (\(kcatFormat == nil ? "each record's value and a newline, kcat's default output" : "records in that format"), stderr read for its assignment)"
    }

    func name(_ contender: String) -> String {
        switch contender {
        case "kcat": "kcat -G"
        case "two": "trackpipe two stages"
        case "one": "trackpipe one stage"
        case "three": "trackpipe two stages, --window 1m,1h,1d"
        case "three-apart": "trackpipe two stages, 1m then 1h then 1d"
        case "two-base": "baseline two stages"
        case "one-base": "baseline one stage"
        default: contender
        }
    }

    func kcat(_ broker: BrokerProcess) throws -> TimedRun {
        guard let kcat = BenchSupport.kcat else { throw BenchError("kcat is not installed: apt-get install -y kcat") }
        // Not -q: kcat reports its assignment on stderr ("... rebalanced ...: assigned: ..."),
        // which marks the end of its join. Records go to /dev/null, as a raw consume's would.
        return try TimedRun.measure(
            kcat,
            ["-b", broker.bootstrapServers, "-G", "kcat-\(UUID().uuidString.prefix(8))", "-o", "beginning", "-e", "-X", "session.timeout.ms=6000"]
                + (kcatFormat.map { ["-f", $0] } ?? []) + ["tracking-hits"],
            broker: broker, assignmentMarker: "assigned", discardingOutput: !kcatToPipe)
    }

    /// A round's groups' internal topics. A baseline may be a build with or without the state topic.
    static func internalTopics(of group: String) -> [String] {
        let groups: [String] = [group, group + "-base", group + "-three", group + "-apart-1m", group + "-apart-1h", group + "-apart-1d"]
        return groups.flatMap { (name: String) -> [String] in [name + "-repartition", name + "-state", name + "-one-state"] }
    }

    func trackpipeArguments(_ broker: BrokerProcess, group: String, keyedByDelivery: Bool, window: [String] = []) -> [String] {
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", keyedByDelivery ? "tracking-hits-by-delivery" : "tracking-hits",
                "--group", group, "--until-end", "--shards", "\(shards)", "--log-level", "info", "--progress-interval", "0s",
                "-X", "session.timeout.ms=6000",
            ] + property.flatMap { ["-X", $0] } + (keyedByDelivery ? ["--input-keyed-by-delivery"] : [])
            + (timings ? ["--timings"] : []) + window
    }

    func trackpipeRun(_ binary: String, _ broker: BrokerProcess, group: String, keyedByDelivery: Bool, window: [String] = []) throws -> TimedRun {
        let arguments = trackpipeArguments(broker, group: group, keyedByDelivery: keyedByDelivery, window: window)
        let run = try TimedRun.measure(binary, arguments, broker: broker, assignmentMarker: ": assigned ")
        guard run.stdout.contains("consumed      \(count) messages") else {
            throw BenchError("trackpipe run did not consume all \(count) messages: \(run.stdout)")
        }
        return run
    }
}
