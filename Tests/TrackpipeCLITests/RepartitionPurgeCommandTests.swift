import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

@testable import TrackpipeCLI

/// The purge of the repartition topic, end to end on the embedded broker, which refuses it
/// (no DeleteRecords: `_UNSUPPORTED_FEATURE`, see RecordDeleterTests): the worker asks after its
/// commits, says the refusal once with what it means, counts every refused partition, and
/// counts every hit all the same. What a purge that goes through does to the log, and that it
/// never takes a record a new owner needs, is the simulators' (docs/simulation.md): no broker
/// here deletes records.
@Suite("trackpipe run: purging the repartition topic", .serialized)
struct RepartitionPurgeCommandTests {
    static let minute: Int64 = 60_000
    static let refusal = "the cluster does not delete records"

    func makeBroker(group: String) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        // The internal topics too: librdkafka 2.16's embedded broker creates no topic on first
        // use, nor answers CreateTopics (docs/compatibility.md).
        try broker.createTopic("\(group)-repartition", partitions: 4)
        try broker.createTopic("\(group)-state", partitions: 4)
        try broker.createTopic("aggregates", partitions: 2)
        try broker.createTopic("dlq", partitions: 1)
        return broker
    }

    func arguments(_ broker: EmbeddedBroker, group: String) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--group", group, "--shards", "2", "--commit-interval", "200ms", "--log-level", "notice",
            // The embedded broker holds a rejoin for about the session timeout; real brokers do not.
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
    }

    /// The value of one series of `/metrics`, whatever the order of its labels.
    static func value(of name: String, labels: [String], in text: String) -> Double? {
        text.split(separator: "\n").first { line in line.hasPrefix(name + "{") && labels.allSatisfy { line.contains($0) } }
            .flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
    }

    @Test("a live worker: every purge refused, said once as a warning, each refused partition counted, and the input read and counted as it comes")
    func liveWorkerGoesOn() throws {
        let group = "purging"
        let broker = try makeBroker(group: group)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 41, deliveries: 4)).generate())
        try corpus.produce(0..<1_000, to: "hits", on: broker)
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), arguments(broker, group: group) + ["--purge-interval", "300ms", "--metrics-port", "\(port)"])
        defer { worker.signal(SIGKILL) }
        func metrics() -> String { (try? HTTPGet.fetch(port: port, path: "/metrics").body) ?? "" }
        let unsupported = ["outcome=\"unsupported\"", "stage=\"aggregate\""]
        // Several purges asked and refused (four partitions each), while the input is read.
        let refusedAgain = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            (Self.value(of: "trackpipe_repartition_purges_total", labels: unsupported, in: metrics()) ?? 0) >= 12
        }
        try #require(refusedAgain, "stderr: \(worker.stderr.suffix(2_000))")
        // More input after the refusals: read and counted all the same.
        try corpus.produce(1_000..<2_000, to: "hits", on: broker)
        let readAll = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            Self.value(of: "trackpipe_messages_consumed_total", labels: ["stage=\"normalize\""], in: metrics()) == 2_000
        }
        #expect(readAll, "stderr: \(worker.stderr.suffix(2_000))")
        let text = metrics()
        #expect(Self.value(of: "trackpipe_repartition_purges_total", labels: ["outcome=\"purged\"", "stage=\"aggregate\""], in: text) == 0)
        #expect(Self.value(of: "trackpipe_repartition_purges_total", labels: ["outcome=\"not_authorized\"", "stage=\"aggregate\""], in: text) == 0)
        #expect(!text.contains("trackpipe_repartition_purges_total{stage=\"normalize\"") && !text.contains("stage=\"normalize\",outcome="),
            "the normalize stage purges nothing: no series")
        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr.suffix(2_000))")
        let said = worker.stderr.components(separatedBy: Self.refusal).count - 1
        #expect(said == 1, "the refusal is said once; stderr: \(worker.stderr.suffix(3_000))")
        #expect(worker.stderr.contains("\(group)-repartition cannot be purged"), "\(worker.stderr.suffix(2_000))")
        #expect(worker.stdout.contains("balanced      yes"), "\(worker.stdout)")
    }

    @Test("bounded runs: two stages purge after commits (refused here, said once, exact counts); --purge-interval 0s asks nothing; one stage never purges the user's input")
    func boundedRuns() throws {
        let binary = try TrackpipeBinary.locate()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 1_500, seed: 43, deliveries: 4)).generate())

        let broker = try makeBroker(group: "bounded")
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let purging = try binary.run(arguments(broker, group: "bounded") + ["--until-end", "--purge-interval", "100ms"])
        #expect(purging.exitCode == 0, "\(purging.stderr.suffix(2_000))")
        #expect(purging.stderr.components(separatedBy: Self.refusal).count - 1 == 1, "\(purging.stderr.suffix(3_000))")
        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 2, dlq: "dlq", dlqPartitions: 1)
        let problems = out.mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")

        let never = try makeBroker(group: "never")
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: never)
        let off = try binary.run(arguments(never, group: "never") + ["--until-end", "--purge-interval", "0s"])
        #expect(off.exitCode == 0, "\(off.stderr.suffix(2_000))")
        #expect(!off.stderr.contains("purg"), "\(off.stderr.suffix(2_000))")

        // One stage reads the user's topic: whatever --purge-interval says, nothing is asked.
        let single = try EmbeddedBroker()
        try single.createTopic("hits", partitions: 4)
        try single.createTopic("aggregates", partitions: 2)
        try single.createTopic("dlq", partitions: 1)
        try single.createTopic("keyed-state", partitions: 4)
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: single)
        let keyed = try binary.run(
            arguments(single, group: "keyed") + ["--until-end", "--input-keyed-by-delivery", "--purge-interval", "100ms", "--commit-interval", "50ms"])
        #expect(keyed.exitCode == 0, "\(keyed.stderr.suffix(2_000))")
        #expect(!keyed.stderr.contains("purg"), "\(keyed.stderr.suffix(2_000))")
    }

    @Test("--purge-interval and TRACKPIPE_PURGE_INTERVAL: 30s by default, 0s turns purging off, a duration without its unit is refused")
    func setting() throws {
        #expect(try RunCommand.parse([]).resolve(Environment([:])).config.purgeInterval == 30_000)
        #expect(try RunCommand.parse(["--purge-interval", "0s"]).resolve(Environment([:])).config.purgeInterval == 0)
        #expect(try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_PURGE_INTERVAL": "2m"])).config.purgeInterval == 120_000)
        #expect(try RunCommand.parse(["--purge-interval", "5s"]).resolve(Environment(["TRACKPIPE_PURGE_INTERVAL": "2m"])).config.purgeInterval == 5_000)
        #expect(throws: (any Error).self) { try RunCommand.parse(["--purge-interval", "30"]).resolve(Environment([:])) }
    }
}
