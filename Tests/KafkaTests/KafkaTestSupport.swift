import Foundation
import Kafka
import Logging
import Synchronization

/// Shared setup for tests that talk the Kafka protocol to an embedded broker.
enum KafkaTestSupport {
    static func consumerConfig(_ broker: EmbeddedBroker, group: String, extra: [String: String] = [:]) -> KafkaConfig {
        KafkaConfig([
            "bootstrap.servers": broker.bootstrapServers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "300",
            "log_level": "3",
        ]).merging(KafkaConfig(extra))
    }

    static func producerConfig(_ broker: EmbeddedBroker, extra: [String: String] = [:]) -> KafkaConfig {
        KafkaConfig([
            "bootstrap.servers": broker.bootstrapServers,
            "linger.ms": "5",
            "log_level": "3",
        ]).merging(KafkaConfig(extra))
    }

    /// A producer whose delivery reports are collected for inspection.
    static func makeProducer(_ broker: EmbeddedBroker, extra: [String: String] = [:]) throws -> (KafkaProducer, DeliveryLog) {
        let log = DeliveryLog()
        let producer = try KafkaProducer(config: producerConfig(broker, extra: extra)) { report in log.record(report) }
        return (producer, log)
    }

    /// Polls until `stop` says so or the deadline passes; returns whether `stop` was met.
    @discardableResult
    static func pollUntil(
        _ consumer: KafkaConsumer, seconds: Double, _ onRecord: (ConsumerRecord) -> Void, stop: () -> Bool
    ) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if stop() { return true }
            consumer.poll(timeoutMilliseconds: 100) { event in
                if case .record(let record) = event { onRecord(record) }
            }
        }
        return stop()
    }
}

final class DeliveryLog: Sendable {
    private let state = Mutex<(ok: Int, failed: [KafkaError], offsets: [Int32: [Int64]])>((0, [], [:]))

    func record(_ report: DeliveryReport) {
        state.withLock { state in
            if let error = report.error {
                state.failed.append(error)
            } else {
                state.ok += 1
                state.offsets[report.partition, default: []].append(report.offset)
            }
        }
    }

    var delivered: Int { state.withLock { $0.ok } }
    var failures: [KafkaError] { state.withLock { $0.failed } }
}
