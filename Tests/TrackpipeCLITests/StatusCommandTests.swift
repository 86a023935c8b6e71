import Foundation
import HitGenerator
import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport

@Suite("trackpipe status against the embedded broker", .serialized)
struct StatusCommandTests {
    func makeBroker() throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try broker.createTopic("aggregates", partitions: 2)
        try broker.createTopic("dlq", partitions: 1)
        return broker
    }

    func status(_ broker: EmbeddedBroker, group: String, _ extra: [String] = []) throws -> TrackpipeBinary.Result {
        try TrackpipeBinary.locate().run(["status", "--brokers", broker.bootstrapServers, "--group", group, "--input-topic", "hits"] + extra)
    }

    /// The commits of `group` on `topic`, as the broker holds them.
    func commits(_ broker: EmbeddedBroker, group: String, topic: String, partitions: Int) throws -> [TopicPartitionOffset] {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
        return try reader.committed((0..<partitions).map { TopicPartition(topic: topic, partition: Int32($0)) })
    }

    /// A table's rows (after the header line that starts with `partition`) for one group.
    func rows(_ text: String, group: String) -> [[String]] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let title = lines.firstIndex(where: { $0.hasPrefix("group \(group) (") }) else { return [] }
        return lines[(title + 2)...].prefix { !$0.isEmpty }.map { $0.split(separator: " ").map(String.init) }
    }

    @Test("a live two-stage worker, then SIGKILLed: both groups per partition, checkpoints decoded, as tables and as JSON")
    func liveWorkerThenKilled() throws {
        let broker = try makeBroker()
        // Event times up to the present, as in a live stream: the aggregate stage has a
        // watermark, and its checkpoints an evicted horizon.
        let now = wallClockMillis()
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 2_000, seed: 31, deliveries: 12, start: now - 10 * 60_000, span: 9 * 60_000)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
                "--group", "st", "--shards", "2", "--commit-interval", "200ms", "--log-level", "warning",
                "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        // Both stages have committed: every input message processed, and a checkpoint with an
        // evicted horizon on every repartition partition.
        let committed = try BackgroundTrackpipe.waitUntil(seconds: 120) {
            let input = try commits(broker, group: "st", topic: "hits", partitions: 4).map { max(0, $0.offset) }.reduce(0, +)
            let checkpoints = try commits(broker, group: "st-aggregate", topic: "st-repartition", partitions: 4)
                .filter { (Checkpoint(decoding: $0.metadata, group: "st")?.evictedBefore ?? .min) > 0 }.count
            return input == 2_000 && checkpoints == 4
        }
        try #require(committed, "the worker never committed both stages; stderr: \(worker.stderr.suffix(2_000))")

        // Live: the table.
        let live = try status(broker, group: "st")
        #expect(live.exitCode == 0, "\(live.stderr)")
        let text = live.stdout
        #expect(text.contains("group st (normalize stage) on hits: lag 0 over 4 partitions, windows 1m\n"), "the sizes its commits record: \(text)")
        #expect(text.contains("group st-aggregate (aggregate stage) on st-repartition: lag "), "\(text)")
        #expect(text.contains("partition  committed  "), "\(text)")
        #expect(text.contains("checkpoint   evicted before"), "\(text)")
        // The example in docs/operations.md is the binary's output: same lines, same columns.
        #expect(
            DocumentationTests.statusShape(text) == DocumentationTests.statusShape(try DocumentationTests.statusExample()),
            "the status table changed shape; regenerate the example in docs/operations.md: \(text)")
        let normalize = rows(text, group: "st")
        #expect(normalize.count == 4)
        #expect(normalize.map { Int64($0[1]) ?? -1 }.reduce(0, +) == 2_000, "every input message committed: \(normalize)")
        #expect(normalize.allSatisfy { $0[1] == $0[2] && $0[3] == "0" }, "\(normalize)")
        // partition committed end lag epoch event-time: the normalize stage's own checkpoint.
        #expect(normalize.allSatisfy { $0.count == 6 && $0[4] == "0" && RFC3339.parse(Array($0[5].utf8)) != nil }, "\(normalize)")
        let aggregate = rows(text, group: "st-aggregate")
        #expect(aggregate.count == 4)
        for row in aggregate {
            // partition committed end lag checkpoint evicted processed unprocessed floors inputs changelog
            #expect(row.count == 11, "\(row)")
            guard row.count == 11, let committedOffset = Int64(row[1]), let end = Int64(row[2]), let processed = Int64(row[6]) else { continue }
            // The windows live in the state topic: format 4, committed at the processed mark,
            // with the position the state topic had been written to.
            #expect(row[4] == Checkpoint.format && committedOffset == processed && Int64(row[10]) != nil, "\(row)")
            #expect(row[9] == (row[8] == "0" ? "0" : "1"), "the floors belong to one incarnation of the input: \(row)")
            #expect(RFC3339.parse(Array(row[5].utf8)) != nil, "evicted before as RFC 3339: \(row)")
            #expect(committedOffset <= processed && processed <= end, "\(row)")
            #expect(Int64(row[3]) == end - committedOffset && Int64(row[7]) == end - processed, "\(row)")
            #expect(["0", "4"].contains(row[8]), "a duplicate floor per input partition: \(row)")
        }
        #expect(aggregate.contains { $0.count == 11 && $0[8] == "4" }, "events reached the aggregate stage: \(aggregate)")

        // Live: JSON for scripts.
        let liveJSON = try status(broker, group: "st", ["--json"])
        #expect(liveJSON.exitCode == 0, "\(liveJSON.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(liveJSON.stdout.utf8)) as? [String: Any])
        let groups = document["groups"] as? [[String: Any]] ?? []
        #expect(groups.map { $0["group"] as? String } == ["st", "st-aggregate"])
        #expect(groups.map { $0["stage"] as? String } == ["normalize", "aggregate"])
        #expect(groups.map { $0["windows"] as? [String] } == [["1m"], ["1m"]], "as the metrics' window label names them")
        #expect(document["brokers"] as? String == broker.bootstrapServers)

        // After a SIGKILL the commits stand still: the JSON equals what the broker holds, decoded.
        worker.signal(SIGKILL)
        #expect(worker.waitForExit(seconds: 30) != nil)
        let killed = try status(broker, group: "st", ["--json"])
        #expect(killed.exitCode == 0, "\(killed.stderr)")
        let after = try #require(try JSONSerialization.jsonObject(with: Data(killed.stdout.utf8)) as? [String: Any])
        let afterGroups = after["groups"] as? [[String: Any]] ?? []
        try #require(afterGroups.count == 2)
        let stored = try commits(broker, group: "st-aggregate", topic: "st-repartition", partitions: 4)
        let shown = afterGroups[1]["partitions"] as? [[String: Any]] ?? []
        #expect(shown.count == 4)
        for (row, commit) in zip(shown, stored) {
            let checkpoint = try #require(Checkpoint(decoding: commit.metadata, group: "st"))
            let decoded = row["checkpoint"] as? [String: Any] ?? [:]
            #expect(row["partition"] as? Int == Int(commit.partition))
            #expect(row["committed"] as? Int == Int(commit.offset))
            #expect(decoded["format"] as? String == String(commit.metadata?.prefix(11) ?? ""))
            #expect(decoded["processedMark"] as? Int == Int(checkpoint.processedMark))
            #expect(decoded["evictedBeforeMillis"] as? Int == Int(checkpoint.evictedBefore))
            #expect(decoded["evictedBefore"] as? String == RFC3339.format(epochMillis: checkpoint.evictedBefore))
            #expect(checkpoint.evictedBefore > now - 60 * 60_000, "the horizon follows the stream's event time")
            #expect(decoded["duplicateFloors"] as? Int == checkpoint.seen.count)
            let end = row["end"] as? Int ?? -1
            #expect(decoded["unprocessed"] as? Int == end - Int(checkpoint.processedMark))
            #expect(row["lag"] as? Int == end - Int(commit.offset))
        }
        let killedTable = try status(broker, group: "st")
        #expect(killedTable.exitCode == 0)
        #expect(killedTable.stdout.contains("group st (normalize stage) on hits: lag 0 over 4 partitions"), "\(killedTable.stdout)")
    }

    @Test("an unknown group: exit 1, saying what no commits can mean")
    func unknownGroup() throws {
        let broker = try makeBroker()
        let result = try status(broker, group: "ghost")
        #expect(result.exitCode == 1)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("trackpipe status: no committed offsets for the group ghost on hits (group ghost)"), "\(result.stderr)")
        for cause in ["never ran", "the name is wrong", "offsets expired"] {
            #expect(result.stderr.contains(cause), "\(result.stderr)")
        }
    }

    @Test("a group another consumer committed, without trackpipe's checkpoints (or with another version's): exit 1, naming what was found")
    func notTrackpipesGroup() throws {
        let broker = try makeBroker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 200, seed: 32, deliveries: 2)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        // A plain consumer's commits: offsets without metadata on the input topic, and on what
        // would be the repartition topic, metadata of another program.
        let plain = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "plain", "log_level": "3"]))
        try plain.commit((0..<4).map { TopicPartitionOffset(topic: "hits", partition: Int32($0), offset: 10) })
        try broker.createTopic("plain-repartition", partitions: 2)
        let other = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "plain-aggregate", "log_level": "3"]))
        try other.commit([TopicPartitionOffset(topic: "plain-repartition", partition: 0, offset: 0, metadata: "streams-app v3")])

        let result = try status(broker, group: "plain")
        #expect(result.exitCode == 1)
        #expect(result.stderr.contains("trackpipe status: the group plain is not a trackpipe worker's"), "\(result.stderr)")
        #expect(result.stderr.contains("plain has committed 4 partitions of hits without a trackpipe checkpoint"), "\(result.stderr)")
        #expect(
            result.stderr.contains("plain-aggregate has committed 1 partitions of plain-repartition with metadata that is not a trackpipe checkpoint (\"streams-app v3\")"),
            "\(result.stderr)")
        #expect(result.stderr.contains("kcat -G"), "names the likely other consumer")

        // A group whose aggregate checkpoints another version of trackpipe wrote: named as such.
        try broker.createTopic("old-repartition", partitions: 1)
        let old = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "old-aggregate", "log_level": "3"]))
        try old.commit([TopicPartitionOffset(topic: "old-repartition", partition: 0, offset: 3, metadata: "trackpipe/3 evicted=0 processed=3")])
        let again = try status(broker, group: "old")
        #expect(again.exitCode == 1)
        #expect(
            again.stderr.contains(
                "old-aggregate has committed 1 partitions of old-repartition with checkpoints of another version of trackpipe (trackpipe/3), which this one does not read (it reads \(Checkpoint.format) and \(SourceCheckpoint.format))"),
            "\(again.stderr)")
    }
}
