import Foundation
import HitGenerator
import Kafka
import Testing
import TrackingDomain
import TrackpipeTestSupport

/// Two runs of different window sizes that start on one output topic before either has written
/// both pass the start-up check; the check after each run's first records stops the one that
/// wrote second. The race is made deterministic, with the real binary on the embedded broker:
/// the later run's input has a broker of its own, which refuses every fetch, so that run passes
/// its start-up check (the test sees its first fetch arrive) and then waits; the first run
/// starts after it, writes, checks and ends; then the later run's input moves to the other
/// broker, and it writes its first records.
@Suite("trackpipe run and replay: two runs of different window sizes racing for one output topic", .serialized)
struct OutputRaceCommandTests {
    static let minute: Int64 = 60_000

    /// The later run, 5m: `run` in two stages or one, or `replay`.
    enum Later: String, CaseIterable, CustomTestStringConvertible {
        case twoStages, oneStage, replay
        var testDescription: String { rawValue }
    }

    @Test(
        "a 5m run that passed its start-up check on the empty topic before a 1m run wrote, and writes after the 1m run's check: it stops (64) after its first records, naming 1m and what it wrote; the 1m run exits 0 and its windows are exact",
        arguments: Later.allCases)
    func laterRunStops(_ later: Later) throws {
        // Broker 2 leads the later run's input, `held`, and nothing else; broker 1 every other
        // topic and group.
        let broker = try EmbeddedBroker(brokers: 2)
        let topics = ["hits": 4, "held": 4, "out": 4, "dlq": 2, "first-repartition": 4, "first-state": 4, "later-repartition": 4, "later-state": 4]
        for (topic, partitions) in topics {
            try broker.createTopic(topic, partitions: partitions)
            for partition in 0..<Int32(partitions) { try broker.setLeader(topic, partition: partition, brokerId: topic == "held" ? 2 : 1) }
        }
        for group in ["first", "first-aggregate", "later", "later-aggregate"] { try broker.setGroupCoordinator(group, brokerId: 1) }
        let refusals = 20_000
        try broker.failNextRequests(.fetch, on: 2, with: KafkaErrorCode.notLeaderForPartition, count: refusals)
        let stream = HitStreamConfig(count: 1_000, seed: 505, deliveries: 6)
        let corpus = Corpus(HitStream(stream).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        try Corpus(HitStream(stream).generate()).produce(0..<corpus.hits.count, to: "held", on: broker)

        let binary = try TrackpipeBinary.locate()
        let common = ["--brokers", broker.bootstrapServers, "--output-topic", "out", "--log-level", "warning"]
        let run = ["run", "--until-end", "--dlq-topic", "dlq", "-X", "session.timeout.ms=6000"] + common
        let laterArguments =
            switch later {
            case .twoStages: run + ["--input-topic", "held", "--group", "later", "--window", "5m"]
            case .oneStage: run + ["--input-topic", "held", "--group", "later", "--window", "5m", "--input-keyed-by-delivery"]
            case .replay: ["replay", "--input-topic", "held", "--window", "5m"] + common
            }
        let second = try BackgroundTrackpipe(binary, laterArguments)
        defer { second.signal(SIGKILL) }
        // Its start-up check is behind it once it asks for its input (the checks of empty topics
        // ask only for offsets).
        let waiting = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            try broker.injectedErrorsLeft(.fetch, on: 2) < refusals
        }
        try #require(waiting, "the later run never asked for its input; stderr: \(second.stderr.suffix(2_000))")

        let first = try binary.run(run + ["--input-topic", "hits", "--group", "first"])
        #expect(first.exitCode == 0, "\(first.stderr.suffix(2_000))")
        #expect(first.stdout.contains("balanced      yes"), "\(first.stdout)")
        for partition in Int32(0)..<4 { try broker.setLeader("held", partition: partition, brokerId: 1) }
        let code = second.waitForExit(seconds: SafetyDeadline.seconds)
        #expect(code == 64, "exit \(code.map(String.init) ?? "none"); stderr: \(second.stderr.suffix(3_000))")
        let last = second.stderr.split(separator: "\n").last.map(String.init) ?? ""
        #expect(
            last.hasPrefix(
                "trackpipe \(later == .replay ? "replay" : "run"): configuration: another run writes windows of 1m into the output topic out (an aggregate record of that size at out["),
            "\(last)")
        #expect(last.contains("written since this run started and before this run's first record there"), "\(last)")
        #expect(last.contains("and this run writes windows of --window 5m."), "\(last)")
        #expect(
            last.contains(
                later == .replay
                    ? "Replay into a new --output-topic, or an --output-file"
                    : "Run this pipeline again under a new --group (later has counted and written these windows) with a new --output-topic"),
            "\(last)")

        // The topic holds the first run's windows, exact, and of the later run only the first
        // records its message names, each after the first run's on its partition.
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "race-\(UUID())", "log_level": "3"]))
        let records = try reader.readToEnd(topic: "out", partitions: 4, timeoutSeconds: SafetyDeadline.seconds)
        let sized = records.map { record in (record, record.value.map { $0.withUnsafeBytes(Self.windowSize) } ?? nil) }
        let ones = sized.filter { $0.1 == Self.minute }.map(\.0), fives = sized.filter { $0.1 == 5 * Self.minute }.map(\.0)
        #expect(ones.count + fives.count == records.count, "only aggregates of the two sizes")
        let problems = try TopicContents(output: ones.map { ($0.key, $0.value) }).mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys of the 1m run differ, e.g. \(problems.prefix(3))")
        #expect(first.stdout.contains("emitted       \(ones.count) aggregate records"), "\(first.stdout)")
        try #require(!fives.isEmpty, "the later run wrote its first records")
        let places = Dictionary(grouping: fives, by: \.partition).sorted { $0.key < $1.key }.map { partition, records in
            let (low, high) = (records.map(\.offset).min()!, records.map(\.offset).max()!)
            #expect(ones.filter { $0.partition == partition }.allSatisfy { $0.offset < low }, "the 5m records came after the 1m ones in out[\(partition)]")
            return "out[\(partition)] \(low == high ? "offset \(low)" : "offsets \(low) to \(high)")"
        }
        #expect(
            last.contains("Its first records stay in out (\(fives.count) at \(places.joined(separator: ", "))): a reader tells them by their size, windowEnd - windowStart = 5m."),
            "\(last)")
    }

    /// windowEnd − windowStart of an aggregate record's value, as a reader tells it.
    static func windowSize(_ value: UnsafeRawBufferPointer) -> Int64? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
            let start = (object["windowStart"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }),
            let end = (object["windowEnd"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) })
        else { return nil }
        return end - start
    }
}
