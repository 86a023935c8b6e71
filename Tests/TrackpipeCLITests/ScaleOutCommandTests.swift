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

    func arguments(_ broker: EmbeddedBroker, instance: Int) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates",
            "--dlq-topic", "dlq", "--group", "fleet", "--shards", "2", "--commit-interval", "1s", "--window", "10s",
            "--grace", "1s", "--idle-timeout", "2s", "--log-level", "warning",
            // The embedded broker holds a rejoin for about the session timeout; real brokers do not.
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", "-X", "client.id=instance-\(instance)",
        ]
    }

    func committedInput(_ broker: EmbeddedBroker) throws -> Int64 {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "fleet", "log_level": "3"]))
        return try reader.committed((0..<8).map { TopicPartition(topic: "hits", partition: Int32($0)) }).map { max(0, $0.offset) }.reduce(0, +)
    }

    @Test("three instances over device-keyed input, one SIGKILLed mid-stream and restarted: exact last records, every bad message dead-lettered, each stage balanced")
    func threeInstancesOneKilled() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try broker.createTopic("aggregates", partitions: 4)
        try broker.createTopic("dlq", partitions: 2)
        try broker.createTopic("fleet-repartition", partitions: 8)
        try broker.createTopic("fleet-state", partitions: 8)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 12_000, seed: 61, deliveries: 15, span: 5 * 60_000)).generate())
        #expect(corpus.hits.filter { $0.key != nil }.count > 8_000, "keyed by device, not by delivery")
        try corpus.produce(0..<6_000, to: "hits", on: broker)

        let binary = try TrackpipeBinary.locate()
        var workers = try (1...3).map { try BackgroundTrackpipe(binary, arguments(broker, instance: $0)) }
        let started = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try committedInput(broker) >= 3_000 }
        #expect(started, "nothing committed; stderr: \(workers.map(\.stderr))")

        // The second half arrives; one instance dies without warning while the fleet reads it
        // (wherever the kill lands, every check below holds).
        try corpus.produce(6_000..<corpus.hits.count, to: "hits", on: broker)
        usleep(300_000)
        workers[1].signal(SIGKILL)
        try #require(workers[1].waitForExit(seconds: SafetyDeadline.seconds) != nil, "instance 2 still running after SIGKILL")
        workers[1] = try BackgroundTrackpipe(binary, arguments(broker, instance: 2))

        // Continuous output converges to the reference once everything is read.
        let reference = corpus.expected(windowSize: Self.window)
        var problems: [String] = []
        let converged = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
            problems = out.mismatches(against: reference)
            return problems.isEmpty
        }
        #expect(converged, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")

        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers {
            #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr)")
            // Both stages of every instance that exited cleanly balance.
            let balanced = worker.stdout.components(separatedBy: "balanced      yes").count - 1
            #expect(balanced == 2, "\(worker.stdout)")
            #expect(!worker.stdout.contains("balanced      NO"))
        }
        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
        // Stopping the instances hands partitions around once more; the highest revision per
        // key keeps the full counts whatever was emitted last.
        #expect(out.mismatches(against: reference, highestRevision: true).isEmpty)
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
