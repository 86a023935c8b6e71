import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

/// `--instance-id` (KIP-345 static membership), end to end with the real binary. The embedded
/// broker (librdkafka's mock cluster) does not honour a static member's rejoin: it rebalances
/// as for a new member (docs/deploy.md). What can be checked here is what trackpipe controls:
/// each stage's consumer joins with an id of its own, read back from the live client, and a
/// restart joins with the same ids.
@Suite("trackpipe run --instance-id: static membership", .serialized)
struct StaticMembershipTests {
    /// The `group.instance.id` each stage said it joined with, by stage name.
    static func members(in stderr: String) -> [String: String] {
        var found: [String: String] = [:]
        for match in stderr.matches(of: /([a-z]+): joining group \S+ as the static member (\S+) \(group.instance.id\)/) {
            found[String(match.output.1)] = String(match.output.2)
        }
        return found
    }

    @Test("each stage's consumer joins with a group.instance.id of its own, and a restart (flag or TRACKPIPE_INSTANCE_ID) keeps them")
    func idsPerStageKeptAcrossARestart() throws {
        let broker = try EmbeddedBroker()
        for (topic, partitions) in [("hits", 4), ("aggregates", 2), ("dlq", 2), ("static-repartition", 4), ("static-state", 4)] {
            try broker.createTopic(topic, partitions: partitions)
        }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 5, deliveries: 4)).generate())
        let binary = try TrackpipeBinary.locate()
        let arguments = [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--group", "static", "--until-end", "--shards", "2", "--log-level", "notice",
            // A static member does not leave its group on a clean stop: the mock cluster lets the
            // restarted one in after the old one's session has expired, so keep it short.
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]

        try corpus.produce(0..<1_000, to: "hits", on: broker)
        let first = try binary.run(arguments + ["--instance-id", "pod-0"])
        try #require(first.exitCode == 0, "\(first.stderr.suffix(2_000))")
        let members = Self.members(in: first.stderr)
        #expect(members == ["normalize": "pod-0-normalize", "aggregate": "pod-0-aggregate"], "\(first.stderr.suffix(2_000))")
        #expect(Set(members.values).count == 2, "the stages' ids differ")

        try corpus.produce(1_000..<2_000, to: "hits", on: broker)
        let second = try binary.run(arguments, environment: ["TRACKPIPE_INSTANCE_ID": "pod-0"])
        try #require(second.exitCode == 0, "\(second.stderr.suffix(2_000))")
        #expect(Self.members(in: second.stderr) == members, "the restart joined with the same ids: \(second.stderr.suffix(2_000))")
        #expect(second.stdout.contains("consumed      1000 messages"), "the restart went on from the first run's commits: \(second.stdout)")
    }

    @Test("without --instance-id the consumers are dynamic members")
    func dynamicByDefault() throws {
        let broker = try EmbeddedBroker()
        for (topic, partitions) in [("hits", 2), ("aggregates", 2), ("dlq", 2), ("dynamic-repartition", 2), ("dynamic-state", 2)] {
            try broker.createTopic(topic, partitions: partitions)
        }
        try Corpus(HitStream(HitStreamConfig(count: 200, seed: 6, deliveries: 2)).generate()).produce(0..<200, to: "hits", on: broker)
        let result = try TrackpipeBinary.locate().run([
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--group", "dynamic", "--until-end", "--log-level", "info",
        ])
        try #require(result.exitCode == 0, "\(result.stderr.suffix(2_000))")
        #expect(result.stderr.contains("joining group") == false, "\(result.stderr.suffix(2_000))")
        #expect(result.stderr.contains("assigned"), "the stages did join (and log their assignments)")
    }

    @Test("an id that cannot be one, or -X group.instance.id (one id for both stages), is a configuration error", arguments: [
        (["--instance-id", "pod 0"], [String: String](), "--instance-id pod 0: must be 1 to 200 printable ASCII characters"),
        ([], ["TRACKPIPE_INSTANCE_ID": "a b"], "TRACKPIPE_INSTANCE_ID=a b: must be 1 to 200 printable ASCII characters"),
        (["-X", "group.instance.id=pod-0"], [:], "use --instance-id (TRACKPIPE_INSTANCE_ID)"),
    ])
    func refusals(arguments: [String], environment: [String: String], message: String) throws {
        let result = try TrackpipeBinary.locate().run(["run", "--brokers", "127.0.0.1:1"] + arguments, environment: environment)
        #expect(result.exitCode == 64, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}
