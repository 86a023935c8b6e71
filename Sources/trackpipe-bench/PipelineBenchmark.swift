import ArgumentParser
import Foundation
import HitGenerator
import Kafka

/// `trackpipe run --until-end` over a preloaded topic against kcat consuming the same topic in
/// a consumer group, same run: what the whole worker (normalize, window, produce, commit) costs
/// over just reading the bytes. Both include joining a group (the embedded broker's join takes
/// about 3 s), so the steady-state rates after the first record are printed too.
struct PipelineBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline", abstract: "trackpipe run --until-end vs kcat -G on the same preloaded embedded topic.")

    @Option(help: "Hits to preload.") var count = 400_000
    @Option(help: "Partitions of the input topic.") var partitions = 32
    @Option(help: "Alternating rounds of each contender.") var rounds = 3
    @Option(help: "Windowing shards for trackpipe.") var shards = 2
    @Option(help: "Path of the trackpipe binary (default: next to this one).") var trackpipe: String?
    @Option(
        help:
            "fetch.wait.max.ms for both contenders (default: librdkafka's 500). The embedded broker holds fetches up to this long once some partitions are drained, which real brokers do not; 10 shows the steady state."
    )
    var fetchWaitMs: Int?
    @Flag(help: "Print trackpipe's run summaries.") var verbose = false

    func run() throws {
        let binary = trackpipe ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("trackpipe").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw BenchError("no trackpipe binary at \(binary): swift build -c release --product trackpipe")
        }
        let broker = try EmbeddedBroker()
        try broker.createTopic("tracking-aggregates", partitions: 8)
        try broker.createTopic("tracking-hits-dlq", partitions: 4)
        let hits = HitStream(HitStreamConfig(count: count, seed: 99, deliveries: 200, span: 60 * 60_000)).generate()
        let bytes = hits.map(\.value.count).reduce(0, +)
        print("preloading \(count) generated hits (avg \(bytes / max(count, 1)) bytes) into \(partitions) partitions...")
        // Record timestamps as a tracking collector would set them (the hits' own time), so the
        // worker sees the realistic mix and not a topic full of "future" hits.
        try BenchSupport.preload(
            broker, topic: "tracking-hits", partitions: partitions, values: hits.map(\.value), timestamps: hits.map(\.kafkaTimestamp))

        // The same topic layout with one record per partition: what each contender pays
        // whatever the volume (process start, joining the group, reaching the ends).
        try BenchSupport.preload(
            broker, topic: "tiny", partitions: partitions, values: Array(hits.prefix(partitions).map(\.value)),
            timestamps: Array(hits.prefix(partitions).map(\.kafkaTimestamp)))

        var ours: [Double] = []
        var kcat: [Double] = []
        var oursFixed: [Double] = []
        var kcatFixed: [Double] = []
        for round in 1...rounds {
            kcat.append(try timeKcat(broker, topic: "tracking-hits"))
            ours.append(try timeTrackpipe(binary, broker, topic: "tracking-hits", expected: count))
            kcatFixed.append(try timeKcat(broker, topic: "tiny"))
            oursFixed.append(try timeTrackpipe(binary, broker, topic: "tiny", expected: partitions))
            print(
                "round \(round): kcat -G \(BenchSupport.rate(count, kcat.last!)) (\(f(kcat.last!)) s), trackpipe run --until-end \(BenchSupport.rate(count, ours.last!)) (\(f(ours.last!)) s); fixed cost kcat \(f(kcatFixed.last!)) s, trackpipe \(f(oursFixed.last!)) s"
            )
        }
        let k = BenchSupport.median(kcat), o = BenchSupport.median(ours)
        let kf = BenchSupport.median(kcatFixed), of = BenchSupport.median(oursFixed)
        print("median whole runs: kcat \(BenchSupport.rate(count, k)), trackpipe \(BenchSupport.rate(count, o))")
        print(String(format: "ratio (trackpipe / kcat rate, whole runs incl. group join): %.2f  (target >= 0.5, goal 0.8)", k / o))
        if k - kf > 0.1 && o - of > 0.1 {
            print(
                "net of each one's fixed cost (noisy: the group join varies by about a second): kcat \(BenchSupport.rate(count, k - kf)), trackpipe \(BenchSupport.rate(count, o - of)), ratio \(String(format: "%.2f", (k - kf) / (o - of)))"
            )
        } else {
            print("net of fixed cost: not measurable in this run (kcat's volume cost is within the noise of its group join)")
        }
    }
}

extension PipelineBenchmark {
    func f(_ seconds: Double) -> String { String(format: "%.2f", seconds) }

    var fetchWait: [String] { fetchWaitMs.map { ["-X", "fetch.wait.max.ms=\($0)"] } ?? [] }

    func timeKcat(_ broker: EmbeddedBroker, topic: String) throws -> Double {
        guard
            let seconds = try BenchSupport.timeKcat([
                "-b", broker.bootstrapServers, "-G", "kcat-\(UUID().uuidString.prefix(8))", "-o", "beginning", "-e", "-q",
                "-X", "session.timeout.ms=6000", "-f", "%o\\n",
            ] + fetchWait + [topic])
        else { throw BenchError("kcat is not installed: apt-get install -y kcat") }
        return seconds
    }

    func timeTrackpipe(_ binary: String, _ broker: EmbeddedBroker, topic: String, expected: Int) throws -> Double {
        let start = BenchSupport.now()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", topic, "--group", "trackpipe-\(UUID().uuidString.prefix(8))",
            "--until-end", "--shards", "\(shards)", "--log-level", "warning", "-X", "session.timeout.ms=6000",
        ] + fetchWait
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let summary = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let seconds = BenchSupport.now() - start
        guard process.terminationStatus == 0, summary.contains("consumed      \(expected) messages") else {
            throw BenchError("trackpipe run on \(topic) failed: \(summary)")
        }
        if verbose { print(summary) }
        return seconds
    }
}
