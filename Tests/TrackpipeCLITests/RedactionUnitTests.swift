import Kafka
import Logging
import Pipeline
import Runner
import Synchronization
import Testing
@testable import TrackpipeCLI

/// The pieces the end-to-end secret tests rely on, one at a time.
@Suite("secret redaction, piece by piece")
struct RedactionUnitTests {
    final class Captured: Sendable {
        let events = Mutex<[(message: String, metadata: [String: String], error: String?)]>([])
    }

    struct CapturingHandler: LogHandler {
        let captured: Captured
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }.mapValues { "\($0)" }
            captured.events.withLock { $0.append(("\(event.message)", all, event.error.map { "\($0)" })) }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    @Test("the log handler scrubs the message, the event's and the logger's metadata, nested values and the attached error")
    func logHandlerScrubsEverything() {
        let captured = Captured()
        let redactor = SecretRedactor(values: ["hunter2"])
        var logger = Logger(label: "test") { _ in RedactingLogHandler(CapturingHandler(captured: captured), redactor: redactor) }
        logger[metadataKey: "context"] = "set with hunter2"
        logger.error(
            "login with hunter2 failed", error: Failure(description: "SASL: hunter2 refused"),
            metadata: ["nested": ["list": ["x hunter2"], "map": ["k": "hunter2"]], "plain": "ok"])
        let events = captured.events.withLock { $0 }
        #expect(events.count == 1)
        let event = try! #require(events.first)
        #expect(event.message == "login with [redacted] failed")
        #expect(event.metadata["context"] == "set with [redacted]")
        #expect(event.metadata["plain"] == "ok")
        #expect(!event.metadata.values.contains { $0.contains("hunter2") }, "\(event.metadata)")
        #expect(event.error == "SASL: [redacted] refused")

        // Without secrets, events pass unchanged, the logger's metadata still included.
        let plain = Captured()
        var open = Logger(label: "test") { _ in RedactingLogHandler(CapturingHandler(captured: plain), redactor: SecretRedactor()) }
        open[metadataKey: "context"] = "c"
        open.info("hello", metadata: ["k": "v"])
        #expect(plain.events.withLock { $0.first?.metadata } == ["context": "c", "k": "v"])
    }

    @Test("secret values are found on the raw command line and in TRACKPIPE_X* before anything is parsed")
    func secretValuesBeforeParsing() {
        let values = KafkaPropertyArguments.secretValues(
            arguments: ["run", "-X", "sasl.password=a1", "-Xssl.key.password= b2", "sasl.oauthbearer.client.secret=c3", "--group=g", "-X", "acks=all"],
            environment: [
                "TRACKPIPE_X": "security.protocol=SSL; ssl.keystore.password=d4 ", "TRACKPIPE_X_PW": "sasl.password=e5",
                "TRACKPIPE_X_FORGOT": "f6", "TRACKPIPE_GROUP": "not-a-secret", "OTHER": "sasl.password=g7",
            ])
        #expect(Set(values) == ["a1", " b2", "b2", "c3", "d4 ", "d4", "e5", "f6"])
        #expect(KafkaPropertyArguments.secretKeysOnCommandLine(["sasl.password=x", "acks=all", "ssl.key.password"]) == ["sasl.password"])
    }

    @Test("a resolved run's configuration prints its -X properties with secrets redacted")
    func configurationDescriptions() throws {
        let resolved = try RunCommand.parse([
            "-X", "sasl.password=hunter2", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=u",
        ]).resolve(Environment([:]))
        var replay = Replay.Config()
        replay.kafkaProperties = ["ssl.key.password": "hunter2"]
        for text in ["\(resolved)", "\(resolved.config)", String(reflecting: resolved.config), "\(replay)", String(reflecting: replay)] {
            #expect(!text.contains("hunter2"), "\(text)")
            #expect(text.contains("[redacted]"), "\(text)")
        }
        #expect("\(resolved.config)".contains("security.protocol=SASL_SSL"))
        #expect("\(resolved.config)".contains("inputTopic: \"tracking-hits\""), "the other fields are shown as Swift shows them")
    }
}
