import Foundation
import Kafka
import Logging
import Synchronization

/// Shared setup for tests that talk the Kafka protocol to an embedded broker.
enum KafkaTestSupport {
    /// How long a test waits for records, a rebalance or a flush before it gives up: a bound on
    /// a hang, never what a test checks. Tests go on the moment the event happens; CI runs the
    /// suite in parallel on a loaded 2-core machine, so the bound is minutes.
    static let safetySeconds: Double = 300
    static var safetyMilliseconds: Int32 { Int32(safetySeconds * 1_000) }

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

    /// A producer whose delivery reports are collected for inspection, and its client-level
    /// errors too when `errors` is given.
    static func makeProducer(
        _ broker: EmbeddedBroker, extra: [String: String] = [:], errors: ClientErrors? = nil
    ) throws -> (KafkaProducer, DeliveryLog) {
        let log = DeliveryLog()
        var onError: (@Sendable (KafkaError) -> Void)?
        if let errors { onError = { errors.record($0) } }
        let producer = try KafkaProducer(
            config: producerConfig(broker, extra: extra), onDelivery: { report in log.record(report) }, onError: onError)
        return (producer, log)
    }

    /// Polls until `stop` says so or the deadline passes; returns whether `stop` was met.
    @discardableResult
    static func pollUntil(
        _ consumer: KafkaConsumer, seconds: Double = safetySeconds, _ onRecord: (ConsumerRecord) -> Void, stop: () -> Bool
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

/// Client-level errors a client reported (connections refused, all brokers down, ...).
final class ClientErrors: Sendable {
    private let state = Mutex<[KafkaError]>([])

    func record(_ error: KafkaError) { state.withLock { $0.append(error) } }

    var count: Int { state.withLock { $0.count } }
}
