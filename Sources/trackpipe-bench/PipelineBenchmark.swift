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
        commandName: "pipeline",
        abstract: "trackpipe run --until-end, two stages and one, vs kcat -G on the same preloaded embedded topic.")

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
        let binary = try BenchSupport.trackpipeBinary(trackpipe)
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

        var twoStage: [Double] = []
        var oneStage: [Double] = []
        var kcat: [Double] = []
        var twoFixed: [Double] = []
        var oneFixed: [Double] = []
        var kcatFixed: [Double] = []
        for round in 1...rounds {
            kcat.append(try timeKcat(broker, topic: "tracking-hits"))
            twoStage.append(try timeTrackpipe(binary, broker, topic: "tracking-hits", expected: count, keyedByDelivery: false))
            oneStage.append(try timeTrackpipe(binary, broker, topic: "tracking-hits", expected: count, keyedByDelivery: true))
            kcatFixed.append(try timeKcat(broker, topic: "tiny"))
            twoFixed.append(try timeTrackpipe(binary, broker, topic: "tiny", expected: partitions, keyedByDelivery: false))
            oneFixed.append(try timeTrackpipe(binary, broker, topic: "tiny", expected: partitions, keyedByDelivery: true))
            print(
                "round \(round): kcat -G \(BenchSupport.rate(count, kcat.last!)) (\(f(kcat.last!)) s), two stages \(BenchSupport.rate(count, twoStage.last!)) (\(f(twoStage.last!)) s), one stage \(BenchSupport.rate(count, oneStage.last!)) (\(f(oneStage.last!)) s); fixed cost kcat \(f(kcatFixed.last!)) s, two stages \(f(twoFixed.last!)) s, one stage \(f(oneFixed.last!)) s"
            )
        }
        let k = BenchSupport.median(kcat), two = BenchSupport.median(twoStage), one = BenchSupport.median(oneStage)
        let kf = BenchSupport.median(kcatFixed), twof = BenchSupport.median(twoFixed), onef = BenchSupport.median(oneFixed)
        print("median whole runs: kcat \(BenchSupport.rate(count, k)), two stages \(BenchSupport.rate(count, two)), one stage \(BenchSupport.rate(count, one))")
        print(String(format: "ratios of rates, whole runs incl. group joins: two stages / kcat %.2f, one stage / kcat %.2f, two stages / one stage %.2f (target >= 0.5)", k / two, k / one, one / two))
        if two - twof > 0.1 && one - onef > 0.1 {
            print(
                "net of each one's fixed cost: two stages \(BenchSupport.rate(count, two - twof)), one stage \(BenchSupport.rate(count, one - onef)), two stages / one stage \(String(format: "%.2f", (one - onef) / (two - twof)))"
            )
        }
        if k - kf > 0.1 {
            print("net kcat: \(BenchSupport.rate(count, k - kf))")
        } else {
            print("net kcat: not measurable in this run (its volume cost is within the noise of its group join)")
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

    func timeTrackpipe(_ binary: String, _ broker: EmbeddedBroker, topic: String, expected: Int, keyedByDelivery: Bool) throws -> Double {
        let group = "trackpipe-\(UUID().uuidString.prefix(8))"
        // The embedded broker cannot create topics on request: make the repartition topic
        // with the input's partition count, as trackpipe does on a real cluster.
        if !keyedByDelivery { try broker.createTopic("\(group)-repartition", partitions: partitions) }
        let start = BenchSupport.now()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", topic, "--group", group,
            "--until-end", "--shards", "\(shards)", "--log-level", "warning", "-X", "session.timeout.ms=6000",
        ] + fetchWait + (keyedByDelivery ? ["--input-keyed-by-delivery"] : [])
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
