@testable import Kafka
import Logging
import Testing

@Suite("secrets in the Kafka layer")
struct KafkaSecretTests {
    @Test("the redactor replaces every occurrence of every value, longest first, byte for byte")
    func redactorReplaces() {
        let redactor = SecretRedactor(values: ["hunter2", "hunter2-long", "", "pässwörd"])
        #expect(redactor.count == 3, "an empty value is not a secret")
        #expect(redactor.redact("a hunter2 b hunter2") == "a [redacted] b [redacted]")
        #expect(redactor.redact("x hunter2-long y") == "x [redacted] y", "the longer secret is hidden whole")
        #expect(redactor.redact("pw=pässwörd.") == "pw=[redacted].")
        #expect(redactor.redact("nothing here") == "nothing here")
        #expect(redactor.reveals("…hunter2…") && !redactor.reveals("hunter"))
        // A secret ending inside a grapheme cluster (e + combining acute) is still found.
        let combining = SecretRedactor(values: ["abcde"])
        #expect(!combining.redact("abcde\u{301}").contains("abcd"))
        #expect(SecretRedactor().redact("hunter2") == "hunter2")
        #expect(SecretRedactor(values: ["a"]).merging(SecretRedactor(values: ["b"])).redact("abc") == "[redacted][redacted]c")
    }

    @Test("secret properties are recognised by name, including misspelt and unknown ones")
    func secretNames() {
        for name in [
            "sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret", "SASL.PASSWORD",
            "ssl.key.pem", "sasl.oauthbearer.config", "plugin.api.Secret", "my.passwd",
        ] {
            #expect(KafkaConfig.isSecret(name), "\(name)")
        }
        for name in ["sasl.username", "security.protocol", "bootstrap.servers", "ssl.ca.location", "sasl.mechanism"] {
            #expect(!KafkaConfig.isSecret(name), "\(name)")
        }
        let config = KafkaConfig(["sasl.password": "pw-1", "sasl.username": "user", "ssl.key.password": "pw-2"])
        #expect(config.redactor.count == 2)
        #expect(config.redactor.redact("user pw-1 pw-2") == "user [redacted] [redacted]")
    }

    @Test("a secret part of a name is found wherever it stands, as bytes, as Foundation's String.contains found it")
    func secretNameParts() {
        // At the start, at the end, the whole name, next to non-ASCII letters, and a name only
        // a byte shorter than a part.
        for name in ["pass", "pwd", "token.x", "x.token", "ssl.key", "oauthbearer.config", "é.secret", "secretß", "Ünicode.PRIVATE.key"] {
            #expect(KafkaConfig.isSecret(name), "\(name)")
        }
        for name in ["", "pas", "pw", "ssl.ke", "oauthbearer.confi", "p.ass", "tokn", "sécret", "crédential"] {
            #expect(!KafkaConfig.isSecret(name), "\(name)")
        }
    }

    @Test("printing, interpolating or dumping a configuration never shows a secret value")
    func configurationDescriptions() {
        let config = KafkaConfig(["sasl.password": "hunter2", "security.protocol": "SASL_SSL"])
        var dumped = ""
        dump(config, to: &dumped)
        for text in ["\(config)", String(reflecting: config), String(describing: config), dumped] {
            #expect(!text.contains("hunter2"), "\(text)")
            #expect(text.contains("SASL_SSL") && text.contains("[redacted]"), "\(text)")
        }
        #expect("\(config)" == "sasl.password=[redacted] security.protocol=SASL_SSL")
    }

    @Test("librdkafka's own log lines are scrubbed: OpenSSL's error quotes the key file, a secret-named property")
    func librdkafkaLogsAreScrubbed() throws {
        let sink = CapturedLogs()
        let logger = Logger(label: "test.tls") { _ in CapturingHandler(sink: sink) }
        let path = "/nonexistent/key-file-7f3a9.pem"
        do {
            _ = try KafkaProducer(
                config: KafkaConfig([
                    "bootstrap.servers": "127.0.0.1:1", "security.protocol": "ssl", "ssl.key.location": path,
                    "ssl.key.password": "hunter2-key",
                ]),
                logger: logger)
            Issue.record("a client with a missing key file was created")
        } catch let error as KafkaError {
            #expect(error.message.contains("ssl.key.location"))
            #expect(!error.message.contains(path) && !error.message.contains("hunter2"), "\(error.message)")
        }
        let entries = sink.entries.withLock { $0 }
        // librdkafka did log OpenSSL's complaint about opening the file; its path is gone.
        #expect(entries.contains { $0.message.contains("fopen([redacted]") }, "\(entries.map(\.message))")
        #expect(!entries.contains { $0.message.contains(path) || $0.message.contains("hunter2") })
    }

    @Test("with debug=all, no line librdkafka logs carries the SASL password")
    func debugLogsCarryNoPassword() throws {
        let sink = CapturedLogs()
        let logger = Logger(label: "test.debug") { _ in CapturingHandler(sink: sink) }
        let producer = try KafkaProducer(
            config: KafkaConfig([
                "bootstrap.servers": "127.0.0.1:1", "debug": "all", "sasl.password": "hunter2-sasl",
                "ssl.keystore.password": "hunter2-keystore", "reconnect.backoff.ms": "50",
            ]),
            logger: logger)
        for _ in 0..<5 { producer.poll(timeoutMilliseconds: 50) }
        let entries = sink.entries.withLock { $0 }
        #expect(entries.contains { $0.message.contains("sasl.password") }, "the configuration dump was logged")
        #expect(!entries.contains { $0.message.contains("hunter2") })
    }
}
