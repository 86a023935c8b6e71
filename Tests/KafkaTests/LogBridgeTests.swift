import Kafka
import Logging
import Synchronization
import Testing

/// Captures what a client logs, for checking that librdkafka's own messages reach swift-log.
final class CapturedLogs: Sendable {
    let entries = Mutex<[(level: Logger.Level, message: String, facility: String)]>([])
}

struct CapturingHandler: LogHandler {
    let sink: CapturedLogs
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let facility = event.metadata?["librdkafka.facility"].map { "\($0)" } ?? ""
        sink.entries.withLock { $0.append((event.level, "\(event.message)", facility)) }
    }
}

@Suite("librdkafka logs in swift-log")
struct LogBridgeTests {
    @Test("a broker that refuses connections is reported through the client's logger, at error level, with librdkafka's facility")
    func connectionErrorsAreLogged() throws {
        let sink = CapturedLogs()
        let logger = Logger(label: "test.producer") { _ in CapturingHandler(sink: sink) }
        // Port 1 on loopback: nothing listens there, so librdkafka logs failed connects.
        let producer = try KafkaProducer(
            config: KafkaConfig(["bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": "50"]), logger: logger)
        try producer.send(topic: "t", key: nil, value: Array("x".utf8))
        func refusal() -> (level: Logger.Level, message: String, facility: String)? {
            sink.entries.withLock { $0.first { $0.message.contains("127.0.0.1:1") && $0.message.contains("Connection refused") } }
        }
        let logged = ContinuousClock.now + .seconds(KafkaTestSupport.safetySeconds)
        while ContinuousClock.now < logged && refusal() == nil {
            producer.poll(timeoutMilliseconds: 100)
        }
        let entries = sink.entries.withLock { $0 }
        let refused = refusal()
        #expect(refused != nil, "\(entries.map(\.message).prefix(3))")
        #expect(refused.map { $0.level >= .warning } == true)
        #expect(refused.map { !$0.facility.isEmpty } == true)
    }

    @Test("librdkafka's debug contexts come through at debug level when asked for")
    func debugLogsAreBridged() throws {
        let sink = CapturedLogs()
        let logger = Logger(label: "test.consumer") { _ in CapturingHandler(sink: sink) }
        let consumer = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": "127.0.0.1:1", "group.id": "g", "debug": "cgrp"]), logger: logger)
        consumer.close()
        let debug = sink.entries.withLock { $0.filter { $0.level == .debug } }
        #expect(!debug.isEmpty)
    }
}
