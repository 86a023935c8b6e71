import Foundation
import Kafka
import Logging
import Pipeline
import RecordFormats
import Synchronization
import Testing
import TrackpipeTestSupport
import Windowing

/// Errors that waiting cannot fix stop the worker with the cause named and nothing committed
/// past what was delivered; errors librdkafka retries by itself are warnings and a counter.
@Suite("Fatal and transient Kafka errors on the embedded broker", .serialized)
struct FailureTests {
    func config(_ broker: EmbeddedBroker, group: String) -> PipelineConfig {
        var config = TestTopics.config(
            broker, group: group, window: WindowConfig(size: 60_000, grace: 1_000, retention: 600_000, idleTimeout: 1_000))
        config.commitInterval = 300
        config.progressInterval = 0
        config.kafkaProperties["topic.metadata.refresh.interval.ms"] = "1000"
        return config
    }

    /// Valid hits, all accepted: every input offset becomes an event on the repartition topic.
    func produceHits(_ broker: EmbeddedBroker, count: Int, from first: Int = 0) throws {
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        for index in first..<(first + count) {
            try producer.send(
                topic: "hits", partition: Int32(index % 4), key: Array("k\(index)".utf8),
                value: Array("{\"deliveryId\":\"d\(index % 5)\",\"broadlogId\":\"b\(index)\",\"action\":\"7\",\"timestamp\":\(now)}".utf8),
                timestamp: now)
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
    }

    /// Per input partition, one past the highest input offset that reached the repartition topic.
    func delivered(_ broker: EmbeddedBroker, topic: String) throws -> [Int32: Int64] {
        var reached: [Int32: Int64] = [:]
        let reader = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "reader-\(topic)", "log_level": "0"]))
        for record in try reader.readToEnd(topic: topic, partitions: 4, timeoutSeconds: SafetyDeadline.seconds) {
            guard let value = record.value else { continue }
            try value.withUnsafeBytes { bytes in
                guard case .events(let record) = try RepartitionRecord.decode(bytes) else { return }
                for event in record.events { reached[event.sourcePartition] = max(reached[event.sourcePartition] ?? 0, event.sourceOffset + 1) }
            }
        }
        return reached
    }

    /// The input offsets `group` has committed, read without joining the group.
    func committed(_ broker: EmbeddedBroker, group: String) throws -> [TopicPartitionOffset] {
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "0"]))
        return try consumer.committed((0..<4).map { TopicPartition(topic: "hits", partition: $0) })
    }

    @Test("authorization denied on the input topic: the worker stops, names the cause and what to do, and has committed nothing that was not delivered")
    func authorizationDenied() throws {
        let broker = try TestTopics.broker(inputPartitions: 4, outputPartitions: 2)
        try broker.createTopic("denied-repartition", partitions: 4)
        try produceHits(broker, count: 200)
        let worker = LiveWorker(config(broker, group: "denied"))
        #expect(eventually { worker.metric("trackpipe_messages_consumed_total{stage=\"normalize\"}") >= 200 })
        // The worker commits what it has read (a commit the error must not move past).
        var before: [TopicPartitionOffset] = []
        #expect(try eventually {
            before = try committed(broker, group: "denied")
            return before.map { max(0, $0.offset) }.reduce(0, +) == 200
        }, "committed \(before)")
        try produceHits(broker, count: 100, from: 200)
        broker.failNextRequests(.fetch, with: Array(repeating: 29, count: 2_000))  // TOPIC_AUTHORIZATION_FAILED
        let outcome = worker.ended()
        let failure = outcome.map { result in (try? result.get()).map { "ended normally: \($0.text)" } ?? "\(result)" } ?? "still running"
        #expect(failure.contains("AUTHORIZATION"), "\(failure)")
        #expect(failure.contains("grant its principal Read"), "\(failure)")
        if outcome == nil { _ = try? worker.stop() }
        broker.clearRequestErrors(.fetch)
        let commits = try committed(broker, group: "denied")
        let reached = try delivered(broker, topic: "denied-repartition")
        #expect(commits.contains { $0.offset > 0 }, "the worker had committed before the error: \(commits)")
        for position in commits where position.offset > 0 {
            #expect(position.offset <= reached[position.partition] ?? 0, "committed \(position) past what reached the repartition topic \(reached)")
        }
    }

    @Test("a broker down for a few seconds: librdkafka's connection failures are warnings, counted as transient, and the run carries on")
    func transientErrorsAreWarnings() throws {
        let broker = try TestTopics.broker(inputPartitions: 4, outputPartitions: 2)
        try broker.createTopic("flaky-repartition", partitions: 4)
        let captured = CapturedLog()
        let logger = captured.logger
        var settings = config(broker, group: "flaky")
        settings.kafkaProperties["log_level"] = "6"
        let worker = LiveWorker(settings, logger: logger)
        try produceHits(broker, count: 40)
        #expect(eventually { worker.metric("trackpipe_messages_consumed_total{stage=\"normalize\"}") >= 40 })
        func transient() -> Double {
            worker.metric("trackpipe_kafka_errors_total{stage=\"normalize\",severity=\"transient\"}")
                + worker.metric("trackpipe_kafka_errors_total{stage=\"aggregate\",severity=\"transient\"}")
        }
        let transientBefore = transient()
        try broker.setBrokerDown(1)
        // Down until the worker has run into it and counted it, however long that takes.
        #expect(eventually { transient() > transientBefore }, "no transient error counted while the broker was down")
        try broker.setBrokerUp(1)
        try produceHits(broker, count: 40, from: 40)
        #expect(eventually { worker.metric("trackpipe_messages_consumed_total{stage=\"normalize\"}") >= 80 })
        let errors = captured.all.filter { $0.0 >= .error }.map(\.1)
        #expect(errors.isEmpty, "\(errors.prefix(5))")
        #expect(captured.all.contains { $0.0 == .warning && ($0.1.contains("Connect") || $0.1.contains("Disconnect")) })
        _ = try worker.stop()
        withExtendedLifetime(broker) {}
    }
}
