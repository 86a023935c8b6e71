import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Testing
import TrackingDomain
import TrackpipeTestSupport

/// The window state restored from the state topic, end to end with the real binary: a worker
/// killed after writing its state and before committing it, and killed at random points.
@Suite("trackpipe run: state read back after a kill", .serialized)
struct StateRestoreCommandTests {
    static let minute: Int64 = 60_000

    /// The sizes the kill between state and commit runs with: the one size it was written for,
    /// and 1m,1h,1d from one pipeline, whose state topic holds every size's windows.
    static let sizes: [WindowSizes] = [.one("1m", minute), .three]

    func arguments(_ broker: EmbeddedBroker, group: String, sizes: WindowSizes = .one("1m", minute)) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits",
            "--dlq-topic", "dlq", "--group", group, "--shards", "2", "--commit-interval", "300ms", "--idle-timeout", "2s",
            "--log-level", "notice", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ] + sizes.flags
    }

    func makeBroker(group: String, sizes: WindowSizes = .one("1m", minute)) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try sizes.createTopics(on: broker)
        try broker.createTopic("dlq", partitions: 2)
        try broker.createTopic("\(group)-repartition", partitions: 4)
        try broker.createTopic("\(group)-state", partitions: 4)
        return broker
    }

    /// The sum of each partition's end offset.
    func ends(_ broker: EmbeddedBroker, topic: String, partitions: Int32 = 4) throws -> Int64 {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "ends-\(UUID())", "log_level": "3"]))
        return try reader.endOffsets((0..<partitions).map { TopicPartition(topic: topic, partition: $0) }).map { max(0, $0.offset) }.reduce(0, +)
    }

    /// What a group has committed on a topic, summed.
    func committed(_ broker: EmbeddedBroker, group: String, topic: String) throws -> Int64 {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
        return try reader.committed((0..<4).map { TopicPartition(topic: topic, partition: $0) }).map { max(0, $0.offset) }.reduce(0, +)
    }

    /// Keys whose records, in output order, ever step back in revision.
    func steppedBack(_ out: TopicContents) -> [String] {
        out.revisions.filter { _, revisions in zip(revisions, revisions.dropFirst()).contains { $0 > $1 } }
            .map { "\($0.key): \($0.value)" }.sorted()
    }

    @Test(
        "killed after writing its state and before committing it: the restart reads the state back, re-reads only what came after the last commit, counts exactly (each size against its own reference) and never steps a key back",
        arguments: sizes)
    func killedBetweenStateAndCommit(_ sizes: WindowSizes) throws {
        let broker = try makeBroker(group: "ahead", sizes: sizes)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 6_000, seed: 81, deliveries: 8, span: 40 * Self.minute)).generate())
        try corpus.produce(0..<3_000, to: "hits", on: broker)
        let binary = try TrackpipeBinary.locate()
        let worker = try BackgroundTrackpipe(binary, arguments(broker, group: "ahead", sizes: sizes))
        defer { worker.signal(SIGKILL) }
        // Everything read so far is processed and committed by both stages.
        let settled = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            try committed(broker, group: "ahead", topic: "hits") == 3_000
                && committed(broker, group: "ahead-aggregate", topic: "ahead-repartition") == ends(broker, topic: "ahead-repartition")
        }
        try #require(settled, "the worker never committed its input; stderr: \(worker.stderr.suffix(2_000))")
        let committedBefore = try committed(broker, group: "ahead-aggregate", topic: "ahead-repartition")

        // From now on the broker refuses every commit: the worker goes on, writing its state and
        // sending its records at each commit interval, but no offset moves.
        broker.failNextRequests(.offsetCommit, with: Array(repeating: KafkaErrorCode.offsetMetadataTooLarge, count: 100_000))
        let stateBefore = try ends(broker, topic: "ahead-state")
        try corpus.produce(3_000..<6_000, to: "hits", on: broker)
        let ahead = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            try ends(broker, topic: "ahead-repartition") > committedBefore + 100 && ends(broker, topic: "ahead-state") > stateBefore
                && worker.stderr.contains("commit failed")
        }
        try #require(ahead, "the state never moved past the last commit; stderr: \(worker.stderr.suffix(2_000))")
        worker.signal(SIGKILL)
        _ = worker.waitForExit(seconds: SafetyDeadline.seconds)
        #expect(try committed(broker, group: "ahead-aggregate", topic: "ahead-repartition") == committedBefore, "no commit got through")
        broker.clearRequestErrors(.offsetCommit)

        let restart = try binary.run(arguments(broker, group: "ahead", sizes: sizes) + ["--until-end"])
        #expect(restart.exitCode == 0, "\(restart.stderr.suffix(2_000))")
        #expect(restart.stdout.contains("balanced      yes"))
        #expect(restart.stderr.contains("restored partition"), "the state was read back: \(restart.stderr.suffix(1_000))")
        let outs = try sizes.contents(broker)
        let problems = sizes.mismatches(outs, against: corpus)
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        let back = outs.flatMap(steppedBack)
        #expect(back.isEmpty, "revisions stepped back: \(back.prefix(3))")
        // The restart re-read what came after the last commit (every event of the second half,
        // once as sent and once as re-sent by the normalize stage, whose commits were refused
        // too), not the windows' whole history.
        let aggregate = restart.stdout.components(separatedBy: "stage aggregate").last ?? ""
        func figure(_ label: String) -> Int? {
            aggregate.split(separator: "\n").first { $0.contains(label) }.flatMap { Int($0.split(separator: " ").first { Int($0) != nil } ?? "") }
        }
        let accepted = corpus.hits.filter { if case .counted = $0.truth { true } else { false } }.count
        let firstHalf = corpus.hits.prefix(3_000).filter { if case .counted = $0.truth { true } else { false } }.count
        let read = (figure("consumed") ?? .max) - (figure("duplicates") ?? 0)
        #expect(read <= accepted - firstHalf, "the restart re-read \(read) events of \(accepted): the first half's were in the state")
    }

    @Test("killed at random points, three times, then run to the end: exact, and no key ever steps back")
    func killedAtRandomPoints() throws {
        let broker = try makeBroker(group: "random")
        let corpus = Corpus(HitStream(HitStreamConfig(count: 8_000, seed: 82, deliveries: 6, span: 60 * Self.minute)).generate())
        let binary = try TrackpipeBinary.locate()
        var generator = SplitMix64(seed: 82)
        for round in 0..<3 {
            try corpus.produce((round * 2_000)..<((round + 1) * 2_000), to: "hits", on: broker)
            let worker = try BackgroundTrackpipe(binary, arguments(broker, group: "random"))
            // Once it has processed something of this round, kill it somewhere in what follows.
            let started = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
                try committed(broker, group: "random", topic: "hits") > Int64(round * 2_000)
            }
            #expect(started, "round \(round): nothing committed; stderr: \(worker.stderr.suffix(2_000))")
            usleep(UInt32(generator.next() % 1_500_000))
            worker.signal(SIGKILL)
            _ = worker.waitForExit(seconds: SafetyDeadline.seconds)
        }
        try corpus.produce(6_000..<8_000, to: "hits", on: broker)
        let last = try binary.run(arguments(broker, group: "random") + ["--until-end"])
        #expect(last.exitCode == 0, "\(last.stderr.suffix(2_000))")
        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
        let problems = out.mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        #expect(steppedBack(out).isEmpty, "revisions stepped back: \(steppedBack(out).prefix(3))")
    }

    @Test("an hour-long window whose state is in segments written commit after commit: killed in the middle of the hour, restarted to the end, exact")
    func killedInTheMiddleOfAnHourLongWindow() throws {
        let broker = try makeBroker(group: "hour", sizes: .one("1h", 60 * Self.minute))
        // Three deliveries, 40 minutes of one hour (late hits may reach the hour before).
        let hour: Int64 = 1_795_341_600_000
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 6_000, seed: 83, deliveries: 3, start: hour + 2 * Self.minute, span: 40 * Self.minute)).generate())
        let binary = try TrackpipeBinary.locate()
        let arguments = arguments(broker, group: "hour", sizes: .one("1h", 60 * Self.minute))
        let worker = try BackgroundTrackpipe(binary, arguments)
        defer { worker.signal(SIGKILL) }
        // Four rounds, each counted and committed by both stages: every commit adds segments.
        for round in 0..<4 {
            try corpus.produce((round * 1_000)..<((round + 1) * 1_000), to: "hits", on: broker)
            let settled = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
                try committed(broker, group: "hour", topic: "hits") == Int64((round + 1) * 1_000)
                    && committed(broker, group: "hour-aggregate", topic: "hour-repartition") == ends(broker, topic: "hour-repartition")
            }
            try #require(settled, "round \(round) was not committed; stderr: \(worker.stderr.suffix(2_000))")
        }
        // The hour's windows are heads and segments written at several commits (no window of the
        // hour was emitted, so none was closed or rewritten whole).
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "state-\(UUID())", "log_level": "3"]))
        var segments: [DeliveryID: Set<UInt32>] = [:]
        for record in try reader.readToEnd(topic: "hour-state", partitions: 4) where record.value != nil {
            if case .segment(let window, let number)? = ChangelogRecord.decodeKey(record.key ?? []), window.windowStart == hour {
                segments[window.deliveryId, default: []].insert(number)
            }
        }
        #expect(segments.count == 3 && segments.values.allSatisfy { $0.count >= 3 }, "segments per window of the hour: \(segments.mapValues(\.count))")
        // More hits, and the worker killed while it counts them.
        try corpus.produce(4_000..<5_000, to: "hits", on: broker)
        let counting = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try committed(broker, group: "hour", topic: "hits") > 4_000 }
        #expect(counting, "the fifth round was not taken; stderr: \(worker.stderr.suffix(2_000))")
        worker.signal(SIGKILL)
        _ = worker.waitForExit(seconds: SafetyDeadline.seconds)
        try corpus.produce(5_000..<6_000, to: "hits", on: broker)
        let last = try binary.run(arguments + ["--until-end"])
        #expect(last.exitCode == 0, "\(last.stderr.suffix(2_000))")
        #expect(last.stderr.contains("restored partition"), "the state was read back: \(last.stderr.suffix(1_000))")
        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
        let problems = out.mismatches(against: corpus.expected(windowSize: 60 * Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        #expect(steppedBack(out).isEmpty, "revisions stepped back: \(steppedBack(out).prefix(3))")
    }
}
