import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

@testable import Pipeline
@testable import Runner
@testable import TrackpipeCLI

/// `run --until-end` is a job, not a service: it must end, and end truthfully. It gives up on a
/// cluster that never answers (exit 1, naming what to check) where the live worker waits, and
/// it refuses to call a run complete whose input was deleted before it was read (exit 65,
/// naming the lost offsets), unless told to accept the loss.
@Suite("bounded runs: giving up on the cluster, refusing lost input")
struct BoundedRunTests {
    @Test("run --until-end with no broker answering gives up after --connect-timeout: exit 1, naming --brokers and the security settings")
    func connectTimeout() throws {
        // A loopback port nobody listens on: every connection is refused.
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), ["run", "--until-end", "--brokers", "127.0.0.1:\(port)", "--connect-timeout", "3s"])
        defer { worker.signal(SIGKILL) }
        // Waits on the process's exit; the deadline only bounds a hang.
        let code = worker.waitForExit(seconds: SafetyDeadline.seconds)
        #expect(code == 1, "exit \(code.map(String.init) ?? "none (still waiting)"); stderr: \(worker.stderr.suffix(2_000))")
        let last = worker.stderr.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("trackpipe run: no Kafka broker answered within the --connect-timeout of a bounded run (3 s;"), "\(last)")
        #expect(last.contains("No broker at 127.0.0.1:\(port) answered: check --brokers and the security settings (-X security.protocol=plaintext)"), "\(last)")
        #expect(worker.stdout.isEmpty, "nothing was run, so no summary")
    }

    @Test("--connect-timeout: a bounded run's limit only; the live worker has none")
    func connectTimeoutSettings() throws {
        let bounded = try RunCommand.parse(["--until-end"]).resolve(Environment([:]))
        #expect(bounded.config.connectTimeout == 300_000, "5 minutes by default")
        let fromEnvironment = try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_UNTIL_END": "true", "TRACKPIPE_CONNECT_TIMEOUT": "30s"]))
        #expect(fromEnvironment.config.connectTimeout == 30_000)
        let live = try RunCommand.parse(["--connect-timeout", "30s"]).resolve(Environment([:]))
        #expect(live.config.connectTimeout == nil, "the live worker waits out any outage")
        #expect(throws: (any Error).self) { try RunCommand.parse(["--until-end", "--connect-timeout", "0s"]).resolve(Environment([:])) }
    }

    /// A summary of a bounded run whose normalize stage lost offsets 500..<15747 of its input
    /// (their log start had passed them) and jumped over a marker at 15_748 that the log still
    /// holds.
    static func summaryWithLoss() -> PipelineSummary {
        var accounting = Accounting()
        accounting.consumed = 3
        accounting.accepted = 3
        accounting.offsetGaps = 2
        let hits = TopicPartition(topic: "hits", partition: 0)
        let normalize = StageSummary(
            stage: "normalize", topic: "hits", accounting: accounting, elapsedMilliseconds: 1_000,
            committed: [TopicPartitionOffset(topic: "hits", partition: 0, offset: 15_750)],
            offsetGaps: [InputSpan(partition: hits, from: 500, to: 15_747, cause: .jump), InputSpan(partition: hits, from: 15_748, to: 15_749, cause: .jump)],
            lostInput: [InputSpan(partition: hits, from: 500, to: 15_747, cause: .jump)])
        var aggregate = normalize
        aggregate.stage = "aggregate"
        aggregate.topic = "g-repartition"
        aggregate.offsetGaps = []
        aggregate.lostInput = []
        aggregate.accounting.offsetGaps = 0
        return PipelineSummary(stages: [normalize, aggregate], elapsedMilliseconds: 1_000)
    }

    @Test("the CLI's decision: a bounded run that lost input exits 65 naming it, unless --allow-lost-input; offsets never delivered that the log still holds are no reason; a live run never does")
    func lostInputDecision() throws {
        let summary = Self.summaryWithLoss()
        let bounded = try RunCommand.parse(["--until-end"]).resolve(Environment([:]))
        let refusal = try #require(RunCommand.lostInputRefusal(summary, resolved: bounded))
        #expect(
            refusal.hasPrefix(
                "15247 offsets were lost: retention (or the broker's size limit) deleted them before this run read them: hits[0] offsets 500 to 15746 (15247)."),
            "\(refusal)")
        #expect(refusal.contains("--allow-lost-input"))
        #expect(!refusal.contains("replay"), "the input's records are gone: reading the topic again is no remedy: \(refusal)")
        #expect(RunCommand.lostInputExitCode == 65)
        let accepting = try RunCommand.parse(["--until-end", "--allow-lost-input"]).resolve(Environment([:]))
        #expect(RunCommand.lostInputRefusal(summary, resolved: accepting) == nil)
        let acceptingByVariable = try RunCommand.parse(["--until-end"]).resolve(Environment(["TRACKPIPE_ALLOW_LOST_INPUT": "true"]))
        #expect(RunCommand.lostInputRefusal(summary, resolved: acceptingByVariable) == nil)
        let live = try RunCommand.parse([]).resolve(Environment([:]))
        #expect(RunCommand.lostInputRefusal(summary, resolved: live) == nil, "the live worker keeps running: the loss is logged, counted, alerted on")
        var markersOnly = summary
        markersOnly.stages[0].lostInput = []
        #expect(RunCommand.lostInputRefusal(markersOnly, resolved: bounded) == nil, "gaps the log still holds are not loss")
        // The summary itself names them, under the stage that lost them.
        #expect(summary.text.contains("  lost          15247 offsets, deleted before they were read: hits[0] offsets 500 to 15746 (15247)\n"), "\(summary.text)")
        #expect(!markersOnly.text.contains("  lost "), "\(markersOnly.text)")
        let single = [InputSpan(partition: TopicPartition(topic: "t", partition: 3), from: 7, to: 8, cause: .commitBehindLogStart)]
        #expect(PipelineSummary.describe(single) == "t[3] offset 7")

        // Lost behind the shuffle: the hits may still be in the input topic.
        var shuffled = markersOnly
        shuffled.stages[1].lostInput = [
            InputSpan(partition: TopicPartition(topic: "g-repartition", partition: 2), from: nil, to: 2_040, cause: .firstRead("the first records …"))
        ]
        let behind = try #require(RunCommand.lostInputRefusal(shuffled, resolved: bounded))
        #expect(behind.hasPrefix("2040 offsets were lost: retention (or the broker's size limit) deleted them before this run read them: g-repartition[2] offsets before 2040."), "\(behind)")
        #expect(behind.contains("may still be in the input topic"), "\(behind)")
    }

    @Test("a bounded run whose group has another member holding partitions reads its own, waits out a rebalance, then exits 64 naming them; it never exits 0 short of its input, and the live member counts on")
    func boundedRunBesideAnotherMember() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try broker.createTopic("aggregates", partitions: 4)
        try broker.createTopic("dlq", partitions: 1)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 900, seed: 47, deliveries: 6)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let binary = try TrackpipeBinary.locate()
        let common = [
            "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
            "--group", "shared", "--log-level", "notice", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
        let live = try BackgroundTrackpipe(binary, ["run"] + common)
        defer { live.signal(SIGKILL) }
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "shared", "log_level": "3"]))
        let partitions = (0..<4).map { TopicPartition(topic: "hits", partition: $0) }
        let started = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            try reader.committed(partitions).allSatisfy { $0.offset >= 0 }
        }
        try #require(started, "the live member committed nothing: \(live.stderr.suffix(2_000))")

        let bounded = try binary.run(["run", "--until-end"] + common)
        #expect(bounded.exitCode == 64, "\(bounded.stderr.suffix(3_000))")
        #expect(bounded.stderr.contains("are held by other members of the group: waiting up to 12 s"), "\(bounded.stderr.suffix(3_000))")
        #expect(bounded.stderr.contains("normalize: partitions ["), "names the partitions: \(bounded.stderr.suffix(3_000))")
        #expect(bounded.stderr.contains("stayed with other members of the group for 12 s while this bounded run had nothing else to read"), "\(bounded.stderr.suffix(3_000))")
        #expect(bounded.stderr.contains("stop the group's other members"), "\(bounded.stderr.suffix(3_000))")

        // The live member goes on, and stops cleanly with every message of both stages
        // accounted for (its counts converge as event time moves on, as they would have without
        // the bounded run: ScaleOutCommandTests).
        live.signal(SIGTERM)
        #expect(live.waitForExit(seconds: SafetyDeadline.seconds) == 0, "\(live.stderr.suffix(2_000))")
        #expect(live.stdout.components(separatedBy: "balanced      yes").count - 1 == 2, "\(live.stdout)")
    }

    @Test("input deleted before a bounded run read it: the run writes what it read, names the lost offsets and exits 65; --allow-lost-input exits 0")
    func lostInputEndToEnd() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 1)
        let binary = try TrackpipeBinary.locate()
        let common = [
            "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", "lossy", "--log-level", "warning",
            "-X", "session.timeout.ms=6000",
        ]
        func produce(_ count: Int, seed: UInt64) throws {
            let corpus = Corpus(HitStream(HitStreamConfig(count: count, seed: seed, deliveries: 4)).generate())
            try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        }
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "lossy", "log_level": "3"]))
        let partition = TopicPartition(topic: "hits", partition: 0)

        try produce(500, seed: 1)
        let first = try binary.run(common)
        #expect(first.exitCode == 0, "\(first.stderr.suffix(2_000))")
        let committed = try #require(try reader.committed([partition]).first?.offset)
        // The embedded broker keeps only the newest few megabytes of a partition: more hits
        // than that delete the oldest, the group's committed offset among them, as retention
        // does on a real cluster whose consumers fall behind.
        try produce(40_000, seed: 2)
        let logStart = try #require(try reader.beginningOffsets([partition]).first?.offset)
        try #require(logStart > committed, "the broker deleted the offsets after the commit (log start \(logStart), committed \(committed))")

        let second = try binary.run(common)
        #expect(second.exitCode == 65, "\(second.stderr.suffix(2_000))")
        let lost = "hits[0] offsets \(committed) to \(logStart - 1) (\(logStart - committed))"
        #expect(
            second.stderr.contains(
                "trackpipe run: \(logStart - committed) offsets were lost: retention (or the broker's size limit) deleted them before this run read them: \(lost)."),
            "\(second.stderr.suffix(2_000))")
        #expect(
            second.stdout.contains("  lost          \(logStart - committed) offsets, deleted before they were read: \(lost)"),
            "the summary names them: \(second.stdout)")
        #expect(second.stdout.contains("balanced      yes"), "what it read is written and counted: \(second.stdout)")
        let after = try #require(try reader.committed([partition]).first?.offset)
        #expect(after == 40_500, "committed to the end of what it read")

        // The same loss again, accepted.
        try produce(40_000, seed: 3)
        let accepted = try binary.run(common + ["--allow-lost-input"])
        #expect(accepted.exitCode == 0, "\(accepted.stderr.suffix(2_000))")
        #expect(accepted.stdout.contains("  lost          "), "still named in the summary: \(accepted.stdout)")
    }

    @Test("a hot repartition partition overrun before the window stage first read it: the bounded run writes what it read, names the partition and what was lost and exits 65")
    func repartitionOverrunBeforeTheFirstRead() throws {
        // One repartition partition for four input partitions: every event goes to it. Its
        // leader, broker 2, answers every fetch with NOT_LEADER_OR_FOLLOWER while the normalize
        // stage writes to it (produce requests go through): the window task cannot read it, as
        // when the window stage falls behind, and the embedded broker, which keeps only the
        // newest ~5 MB of a partition, deletes the first events before the task reads any (as a
        // real cluster's retention does when the window stage falls behind by more than it
        // keeps). Then the partition's leadership moves to broker 1, which serves the fetches.
        let broker = try EmbeddedBroker(brokers: 2)
        let topics = ["hits": 4, "overrun-repartition": 1, "overrun-state": 1, "out": 1, "dlq": 1]
        for (topic, partitions) in topics {
            try broker.createTopic(topic, partitions: partitions)
            for partition in 0..<Int32(partitions) {
                try broker.setLeader(topic, partition: partition, brokerId: topic == "overrun-repartition" ? 2 : 1)
            }
        }
        for group in ["overrun", "overrun-aggregate"] { try broker.setGroupCoordinator(group, brokerId: 1) }
        // Broker 2 leads nothing else, so only the window task's fetches meet these (the start-up
        // checks of an empty partition ask only for its offsets).
        try broker.failNextRequests(.fetch, on: 2, with: KafkaErrorCode.notLeaderForPartition, count: 20_000)
        // Hits days old, each of which carries its original through the shuffle (it may be too
        // late downstream): about 250 bytes an event, so 30,000 hits are about 7 MB in the one
        // repartition partition, and under 2 MB in each input partition.
        let corpus = Corpus(HitStream(HitStreamConfig(count: 30_000, seed: 41, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "overrun", "log_level": "3"]))
        let inputs = (0..<Int32(4)).map { TopicPartition(topic: "hits", partition: $0) }
        let ends = try reader.endOffsets(inputs)
        try #require(try reader.beginningOffsets(inputs).allSatisfy { $0.offset == 0 }, "the input itself keeps every hit")

        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", "overrun",
                "--repartition-topic", "overrun-repartition", "--state-topic", "overrun-state", "--output-topic", "out", "--dlq-topic", "dlq",
                "--log-level", "warning", "-X", "session.timeout.ms=6000",
            ])
        defer { worker.signal(SIGKILL) }
        // The normalize stage has read the whole input and committed it.
        let normalized = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds, every: 0.5) {
            guard let committed = try? reader.committed(inputs) else { return false }
            return committed.map(\.offset) == ends.map(\.offset)
        }
        try #require(normalized, "stderr: \(worker.stderr.suffix(3_000))")
        let repartition = TopicPartition(topic: "overrun-repartition", partition: 0)
        let logStart = try #require(try reader.beginningOffsets([repartition]).first?.offset)
        try #require(logStart > 0, "the embedded broker deleted the first events of the repartition partition")
        try #require(try broker.injectedErrorsLeft(.fetch, on: 2) > 0, "the window task was held back all along")
        try broker.setLeader("overrun-repartition", partition: 0, brokerId: 1)

        let code = worker.waitForExit(seconds: SafetyDeadline.seconds)
        #expect(code == 65, "exit \(code.map(String.init) ?? "none"); stderr: \(worker.stderr.suffix(3_000))")
        // Found twice (the group's start at assignment was 0, and the window task's first read
        // names no beginning), reported once.
        let named = "overrun-repartition[0] offsets 0 to \(logStart - 1) (\(logStart))"
        #expect(
            worker.stderr.contains(
                "trackpipe run: \(logStart) offsets were lost: retention (or the broker's size limit) deleted them before this run read them: \(named)."),
            "\(worker.stderr.suffix(3_000))")
        #expect(worker.stderr.contains("may still be in the input topic"), "\(worker.stderr.suffix(3_000))")
        #expect(worker.stdout.contains("  lost          \(logStart) offsets, deleted before they were read: \(named)"), "\(worker.stdout)")
        #expect(worker.stdout.contains("balanced      yes"), "what it read is written and counted: \(worker.stdout)")
    }

    @Test("a campaign: one delivery with 100,000 hits in one minute, counted exactly by run --until-end with the defaults on the embedded broker; its one repartition partition holds a tenth of the input's bytes, not more than the input")
    func oneLargeDeliveryIsExact() throws {
        let broker = try EmbeddedBroker()
        // Eight input partitions, as `trackpipe embedded-broker` makes its topics: 17 MB of input
        // in four would crowd the few megabytes each partition keeps.
        try broker.createTopic("tracking-hits", partitions: 8)
        let now = Int64(Date().timeIntervalSince1970 * 1_000)
        // As `trackpipe generate --count 100000 --deliveries 1 --span 1m` makes it: hits of the
        // last minutes (windows of a minute, an hour's retention).
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 100_000, seed: 41, deliveries: 1, start: now - 2 * 60_000, span: 60_000)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "tracking-hits", on: broker)
        let result = try TrackpipeBinary.locate().run(["run", "--until-end", "--brokers", broker.bootstrapServers, "--log-level", "warning"])
        #expect(result.exitCode == 0, "\(result.stderr.suffix(2_000))")
        // The output topics were made on first use, with the embedded broker's 4 partitions.
        let topics = try TopicContents(
            broker: broker, output: "tracking-aggregates", outputPartitions: 4, dlq: "tracking-hits-dlq", dlqPartitions: 4)
        #expect(topics.mismatches(against: corpus.expected(windowSize: 60_000)).isEmpty, "\(topics.mismatches(against: corpus.expected(windowSize: 60_000)).prefix(3))")
        let rejected = corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count
        #expect(topics.deadLetters.count == rejected, "only the bad messages are dead-lettered")
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "sizes", "log_level": "3"]))
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let partitions = try #require(try admin.partitionCount(of: "trackpipe-repartition"))
        let shuffled = try reader.readToEnd(topic: "trackpipe-repartition", partitions: Int32(partitions), timeoutSeconds: SafetyDeadline.seconds)
        let input = corpus.hits.reduce(0) { $0 + $1.value.count }
        let bytesByPartition = Dictionary(grouping: shuffled, by: \.partition).mapValues { $0.reduce(0) { $0 + ($1.value?.count ?? 0) } }
        let hot = bytesByPartition.values.max() ?? 0
        #expect(hot < input / 5, "the delivery's partition holds \(hot) bytes for \(input) of input")
    }

    @Test("a bounded run whose last commit the broker refuses exits 1 saying so, not 0 with nothing committed; run again, it reads on from the previous commit and counts exactly")
    func refusedLastCommit() throws {
        let broker = try EmbeddedBroker()
        for topic in ["hits", "out", "refused-repartition", "refused-state"] { try broker.createTopic(topic, partitions: 4) }
        try broker.createTopic("dlq", partitions: 2)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 1_000, seed: 61, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let arguments = [
            "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", "refused", "--output-topic", "out",
            "--dlq-topic", "dlq", "--log-level", "warning", "-X", "session.timeout.ms=6000",
        ]
        // Every commit is refused: the loop's, and the last one.
        broker.failNextRequests(.offsetCommit, with: Array(repeating: KafkaErrorCode.offsetMetadataTooLarge, count: 100_000))
        let refused = try TrackpipeBinary.locate().run(arguments)
        #expect(refused.exitCode == 1, "\(refused.stderr.suffix(2_000))")
        let last = refused.stderr.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("trackpipe run: normalize: the last commit was refused ("), "\(last)")
        #expect(
            last.contains("hits keeps the group's previous commit, and the next run reads on from there (what it reads again is recognised as counted: nothing is counted twice). Run it again"),
            "\(last)")
        broker.clearRequestErrors(.offsetCommit)

        let again = try TrackpipeBinary.locate().run(arguments)
        #expect(again.exitCode == 0, "\(again.stderr.suffix(2_000))")
        #expect(again.stdout.contains("  committed     0@"), "\(again.stdout)")
        let out = try TopicContents(broker: broker, output: "out", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
        let problems = out.mismatches(against: corpus.expected(windowSize: 60_000))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
    }
}
