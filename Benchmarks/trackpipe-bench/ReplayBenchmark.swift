import ArgumentParser
import Benchmarking
import Foundation
import HitGenerator
import Kafka

/// `trackpipe replay` of a whole topic against `trackpipe run --until-end` on the same topic,
/// alternating rounds: a backfill should be at least as fast as the live worker's bounded mode.
struct ReplayBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay", abstract: "trackpipe replay vs trackpipe run --until-end on the same preloaded embedded topic.")

    @Option(help: "Hits to preload.") var count = 400_000
    @Option(help: "Partitions of the input topic.") var partitions = 32
    @Option(help: "Alternating rounds of each contender.") var rounds = 3
    @Option(help: "Shards for both.") var shards = 2
    @OptionGroup var builds: TrackpipeBuilds

    func run() throws {
        let (binary, base) = try builds.resolved()
        let broker = try EmbeddedBroker()
        try broker.createTopic("tracking-aggregates", partitions: 8)
        try broker.createTopic("replay-out", partitions: 8)
        try broker.createTopic("tracking-hits-dlq", partitions: 4)
        let hits = HitStream(HitStreamConfig(count: count, seed: 99, deliveries: 200, span: 60 * 60_000)).generate()
        print("preloading \(count) generated hits into \(partitions) partitions...")
        try BenchSupport.preload(
            broker, topic: "tracking-hits", partitions: partitions, values: hits.map(\.value), timestamps: hits.map(\.kafkaTimestamp))
        var runs: [Double] = []
        var replays: [Double] = []
        var baseReplays: [Double] = []
        for round in 1...rounds {
            let group = "bench-\(UUID().uuidString.prefix(8))"
            try broker.createTopic("\(group)-repartition", partitions: partitions)
            try broker.createTopic("\(group)-state", partitions: partitions)
            let run = try time(binary, ["run", "--group", group, "--until-end"], broker)
            let replay = try time(binary, ["replay", "--output-topic", "replay-out"], broker)
            runs.append(run)
            replays.append(replay)
            print(String(format: "round %d: run --until-end %.2f s (%@), replay %.2f s (%@)", round, run,
                BenchSupport.rate(count, run), replay, BenchSupport.rate(count, replay)))
            if let base {
                let baseReplay = try time(base, ["replay", "--output-topic", "replay-out"], broker)
                baseReplays.append(baseReplay)
                print(String(format: "round %d: baseline replay %.2f s (%@)", round, baseReplay, BenchSupport.rate(count, baseReplay)))
            }
        }
        let r = BenchSupport.median(runs), p = BenchSupport.median(replays)
        print(String(format: "median: run --until-end %.2f s, replay %.2f s; replay / run rate %.2f (target >= 1)", r, p, r / p))
        if !baseReplays.isEmpty {
            let ratios = zip(baseReplays, replays).map { $0 / $1 }
            print(String(format: "replay / baseline replay rate: median %.2f, rounds %@", BenchSupport.median(ratios),
                ratios.map { String(format: "%.2f", $0) }.joined(separator: " ")))
        }
    }

    func time(_ binary: String, _ arguments: [String], _ broker: EmbeddedBroker) throws -> Double {
        let output = Pipe()
        let process = BenchSupport.process(
            binary,
            arguments + ["--brokers", broker.bootstrapServers, "--shards", "\(shards)", "--log-level", "warning", "-X", "session.timeout.ms=6000"],
            output: output, errors: output)
        var text = ""
        let seconds = try BenchSupport.seconds {
            try process.run()
            text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
        }
        guard process.terminationStatus == 0, text.contains("consumed      \(count) messages") else {
            throw BenchError("trackpipe \(arguments[0]) failed: \(text.suffix(2000))")
        }
        return seconds
    }
}
