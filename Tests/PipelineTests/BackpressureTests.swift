import Foundation
import HitGenerator
import Kafka
import Pipeline
import Testing
import TrackpipeTestSupport
import Windowing

/// A slow output must neither fill the memory nor cost a record: the stages pause their input
/// while too much output waits for the broker, keep polling, and resume when it catches up.
/// librdkafka 2.0.x lists skipped offsets around pause and resume among its known batch-consume
/// issues, so this counts every offset.
@Suite("Backpressure on the embedded broker", .serialized)
struct BackpressureTests {
    static let window: Int64 = 60_000

    @Test("output broker slowed to 700 ms a request: the input pauses and resumes, the backlog stays bounded, every offset is read exactly once and the counts are exact")
    func slowOutputPausesInput() throws {
        let broker = try EmbeddedBroker(brokers: 2)
        let topics = [("hits", 4), ("aggregates", 2), ("dlq", 2), ("slow-repartition", 4)]
        for (topic, partitions) in topics {
            try broker.createTopic(topic, partitions: partitions)
            // Input on broker 1, everything the worker writes on broker 2.
            for partition in 0..<partitions {
                try broker.setLeader(topic, partition: Int32(partition), brokerId: topic == "hits" ? 1 : 2)
            }
        }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 20_000, seed: 61, deliveries: 8, span: 10 * 60_000)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        try broker.setRoundTripTime(2, milliseconds: 700)

        var config = TestTopics.config(
            broker, group: "slow", window: WindowConfig(size: Self.window, grace: 1_000, retention: 600_000, idleTimeout: 1_000))
        config.untilEnd = true
        config.progressInterval = 0
        // A 1 MiB producer queue: the input pauses above 512 KiB waiting.
        config.kafkaProperties["queue.buffering.max.kbytes"] = "1024"
        config.kafkaProperties["linger.ms"] = "5"
        let worker = LiveWorker(config)
        let outcome = worker.ended()
        guard let result = outcome else {
            _ = try? worker.stop()
            Issue.record("the run did not end within \(SafetyDeadline.seconds) s")
            return
        }
        let summary = try result.get()
        let normalize = try #require(summary.stages.first { $0.stage == "normalize" })
        #expect(normalize.accounting.consumed == corpus.hits.count, "every input offset read once")
        #expect(normalize.accounting.staleDropped == 0 && normalize.accounting.offsetGaps == 0)
        #expect(summary.stages.allSatisfy { $0.accounting.balanced && $0.accounting.offsetGaps == 0 })
        #expect(summary.stages.contains { $0.pauses > 0 }, "the slow output paused the input")
        for stage in summary.stages {
            #expect(stage.largestBacklog <= 1024 * 1024 + 300 * 1024, "\(stage.stage) held \(stage.largestBacklog) bytes unacknowledged")
        }
        try broker.setRoundTripTime(2, milliseconds: 0)
        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 2, dlq: "dlq", dlqPartitions: 2)
        let problems = out.mismatches(against: corpus.expected(windowSize: Self.window))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        withExtendedLifetime(worker) {}
    }
}
