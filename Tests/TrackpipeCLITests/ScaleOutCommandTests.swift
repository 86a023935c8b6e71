import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Testing
import TrackingDomain
import TrackpipeTestSupport

/// `trackpipe run` deployed as several instances, as users scale it: separate processes, one
/// group, an input keyed by device, one instance killed without warning and restarted.
@Suite("trackpipe run, three instances", .serialized)
struct ScaleOutCommandTests {
    static let window: Int64 = 10_000

    func arguments(_ broker: EmbeddedBroker, instance: Int, sizes: WindowSizes) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits",
            "--dlq-topic", "dlq", "--group", "fleet", "--shards", "2", "--commit-interval", "1s",
            "--grace", "1s", "--idle-timeout", "2s", "--log-level", "warning",
            // The embedded broker holds a rejoin for about the session timeout; real brokers do not.
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", "-X", "client.id=instance-\(instance)",
        ] + sizes.flags
    }

    func committedInput(_ broker: EmbeddedBroker) throws -> Int64 {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "fleet", "log_level": "3"]))
        return try reader.committed((0..<8).map { TopicPartition(topic: "hits", partition: Int32($0)) }).map { max(0, $0.offset) }.reduce(0, +)
    }

    /// Windows of 10 s close while the fleet runs; of 1m,1h,1d, the hour and the day stay open
    /// (event time goes on with the clock only once the input is quiet), and the fleet's state of
    /// every size, moved around by the kill, is what a bounded run then closes them from.
    @Test(
        "three instances over device-keyed input, one SIGKILLed mid-stream and restarted: exact last records (of 1m,1h,1d, each size against its own reference, closed by a bounded run after the fleet stops), every bad message dead-lettered, each stage balanced",
        arguments: [WindowSizes.one("10s", window), .three])
    func threeInstancesOneKilled(_ sizes: WindowSizes) throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try sizes.createTopics(on: broker)
        try broker.createTopic("dlq", partitions: 2)
        try broker.createTopic("fleet-repartition", partitions: 8)
        try broker.createTopic("fleet-state", partitions: 8)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 12_000, seed: 61, deliveries: 15, span: 5 * 60_000)).generate())
        #expect(corpus.hits.filter { $0.key != nil }.count > 8_000, "keyed by device, not by delivery")
        try corpus.produce(0..<6_000, to: "hits", on: broker)

        let binary = try TrackpipeBinary.locate()
        var workers = try (1...3).map { try BackgroundTrackpipe(binary, arguments(broker, instance: $0, sizes: sizes)) }
        let started = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try committedInput(broker) >= 3_000 }
        #expect(started, "nothing committed; stderr: \(workers.map(\.stderr))")

        // The second half arrives; one instance dies without warning while the fleet reads it
        // (wherever the kill lands, every check below holds).
        try corpus.produce(6_000..<corpus.hits.count, to: "hits", on: broker)
        usleep(300_000)
        workers[1].signal(SIGKILL)
        try #require(workers[1].waitForExit(seconds: SafetyDeadline.seconds) != nil, "instance 2 still running after SIGKILL")
        workers[1] = try BackgroundTrackpipe(binary, arguments(broker, instance: 2, sizes: sizes))

        // Continuous output converges to the reference once everything is read (windows of
        // 10 s); the fleet reads and commits every hit (any size).
        var problems: [String] = []
        let converged = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            guard sizes.sizes.count == 1 else { return try committedInput(broker) == Int64(corpus.hits.count) }
            problems = sizes.mismatches(try sizes.contents(broker), against: corpus)
            return problems.isEmpty
        }
        let committed = try committedInput(broker)
        #expect(converged, "\(problems.count) keys differ, e.g. \(problems.prefix(3)); committed \(committed) of \(corpus.hits.count)")

        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers {
            #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr)")
            // Both stages of every instance that exited cleanly balance.
            let balanced = worker.stdout.components(separatedBy: "balanced      yes").count - 1
            #expect(balanced == 2, "\(worker.stdout)")
            #expect(!worker.stdout.contains("balanced      NO"))
        }
        if sizes.sizes.count > 1 {
            // The windows still open are closed from the state the fleet left.
            let last = try binary.run(arguments(broker, instance: 4, sizes: sizes) + ["--until-end"])
            #expect(last.exitCode == 0 && last.stdout.contains("balanced      yes"), "\(last.stdout) \(last.stderr.suffix(2_000))")
        }
        let outs = try sizes.contents(broker)
        let out = outs[0]
        // Stopping the instances hands partitions around once more; the highest revision per
        // key keeps the full counts whatever was emitted last.
        let exact = sizes.mismatches(outs, against: corpus, highestRevision: true)
        #expect(exact.isEmpty, "\(exact.count) keys differ, e.g. \(exact.prefix(3))")
        // Every bad message is in the dead-letter topic (at least once: one sent after the last
        // commit of the killed instance is sent again), and nothing else is.
        var lettered = Set<String>()
        for letter in out.deadLetters {
            let context = try #require(DeadLetter(headers: letter.headers))
            let hit = try #require(corpus.hit(partition: context.sourcePartition, offset: context.sourceOffset))
            #expect(hit.truth == .rejected(context.reason))
            #expect(letter.value == hit.value && letter.key == hit.key)
            lettered.insert("\(context.sourcePartition)@\(context.sourceOffset)")
        }
        #expect(lettered.count == corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count)
    }
}
