import Foundation
import Kafka
import Testing

/// Configuration errors from `-X` and `TRACKPIPE_X*`: exit 64, naming where the property was
/// set, before any broker is contacted. "Before any broker" is checked, not assumed: every run
/// points `--brokers` at a listening socket of the test's own, and after the process has exited
/// that socket must have no connection waiting.
@Suite("configuration errors from librdkafka properties")
struct ConfigurationErrorTests {
    /// A TCP listener on loopback that never accepts while the process runs: a client that
    /// connected leaves its connection in the accept queue, where `connections()` finds it.
    final class Listener {
        let fd: Int32
        let port: UInt16

        init() throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            self.fd = fd
            port = UInt16(bigEndian: address.sin_port)
            try #require(fd >= 0 && bound == 0 && listen(fd, 64) == 0, "listening on loopback")
        }

        var address: String { "127.0.0.1:\(port)" }

        /// Connections made to it so far (each taken off the queue).
        func connections() -> Int {
            var count = 0
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return count }
                close(client)
                count += 1
            }
        }

        deinit { close(fd) }
    }

    /// Runs the binary against a fresh listener; checks exit 64, the message, and that no
    /// broker was contacted.
    func refused(
        _ arguments: [String], environment: [String: String] = [:], says expected: [String], never: [String] = [],
        _ comment: Comment
    ) throws {
        let listener = try Listener()
        let command = [arguments[0], "--brokers", listener.address] + arguments.dropFirst()
        let result = try TrackpipeBinary.locate().run(command, environment: environment)
        #expect(result.exitCode == 64, "\(comment): \(result.stderr)")
        for text in expected { #expect(result.stderr.contains(text), "\(comment): expected \"\(text)\" in \(result.stderr)") }
        for text in never { #expect(!result.stderr.contains(text), "\(comment): \"\(text)\" in \(result.stderr)") }
        #expect(result.stderr.contains("Usage: trackpipe \(arguments[0])"), "\(comment): a configuration error shows the usage")
        #expect(listener.connections() == 0, "\(comment): the broker was contacted before the error")
    }

    @Test("the listener sees a connection when one is made (the control for the checks below)")
    func listenerControl() throws {
        let listener = try Listener()
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = listener.port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        #expect(listener.connections() == 1)
    }

    @Test("an unknown property exits 64 naming -X, or the TRACKPIPE_X_<ANY> variable it came from")
    func unknownProperty() throws {
        try refused(
            ["run", "-X", "no.such.prop=1"], says: ["-X no.such.prop=… (value not shown)", "no property named no.such.prop"],
            "-X")
        try refused(
            ["run"], environment: ["TRACKPIPE_X_FOO": "no.such=1"], says: ["TRACKPIPE_X_FOO (no.such)", "no property named no.such"],
            never: ["no.such=1"], "TRACKPIPE_X_FOO")
        try refused(
            ["run"], environment: ["TRACKPIPE_X": "acks=all;no.such=1"], says: ["TRACKPIPE_X (no.such)"], "TRACKPIPE_X")
    }

    @Test("a value librdkafka reads only in the producer is refused at start-up: linger.ms=abc")
    func lazilyCheckedValue() throws {
        try refused(
            ["run", "-X", "linger.ms=abc"], says: ["-X linger.ms=abc", "librdkafka refuses the value"], "linger.ms")
        try refused(
            ["run", "-X", "message.max.bytes=200000000", "-X", "fetch.max.bytes=3000000"], says: ["message.max.bytes"],
            "a combination rd_kafka_new checks")
    }

    @Test("SASL and TLS mistakes say which property to set")
    func securityMistakes() throws {
        try refused(
            ["run", "-X", "security.protocol=SASL_SSL"],
            says: ["-X security.protocol=SASL_SSL", "also set sasl.mechanism=SCRAM-SHA-512"], never: ["Invalid sasl.kerberos.kinit.cmd value"],
            "SASL without a mechanism")
        try refused(
            ["run"], environment: ["TRACKPIPE_X": "security.protocol=SASL_SSL;sasl.mechanism=SCRAM-SHA-512", "TRACKPIPE_X_USER": "sasl.username=u"],
            says: ["TRACKPIPE_X (sasl.mechanism)", "set sasl.password"], "SCRAM without a password")
        try refused(
            ["run", "-X", "sasl.mechanism=PLAIN"], says: ["-X sasl.mechanism=PLAIN", "set security.protocol=SASL_SSL"],
            "a mechanism without a SASL protocol")
        try refused(
            ["run", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=GSSAPI"],
            says: ["-X sasl.mechanism=GSSAPI", "sasl.kerberos.keytab and sasl.kerberos.principal"], "Kerberos without its settings")
        try refused(
            ["run", "-X", "security.protocol=SSL", "-X", "ssl.ca.location=/nonexistent/ca.pem"],
            says: ["-X ssl.ca.location=/nonexistent/ca.pem", "does not exist"], "a CA file that is not there")
    }

    @Test("the error docs/deploy.md quotes is the one the binary prints")
    func quotedInTheDocs() throws {
        let result = try TrackpipeBinary.locate().run(["run", "--brokers", "127.0.0.1:1"], environment: ["TRACKPIPE_X": "security.protocol=SASL_SSL"])
        #expect(result.exitCode == 64)
        let first = try #require(result.stderr.split(separator: "\n").first.map(String.init))
        let docs = try String(contentsOf: DocumentationTests.root.appendingPathComponent("docs/deploy.md"), encoding: .utf8)
        #expect(docs.contains("\n" + first + "\n"), "docs/deploy.md does not quote: \(first)")
    }

    @Test("every command that takes Kafka properties checks them the same way", arguments: ["status", "replay", "generate"])
    func everyCommand(command: String) throws {
        try refused([command, "-X", "no.such.prop=1"], says: ["-X no.such.prop=… (value not shown)"], "\(command) -X")
        try refused([command, "-X", "linger.ms=abc"], says: ["-X linger.ms=abc"], "\(command) linger.ms")
        if command != "generate" {
            try refused([command], environment: ["TRACKPIPE_X_FOO": "no.such=1"], says: ["TRACKPIPE_X_FOO (no.such)"], "\(command) env")
        }
    }

    @Test("a property trackpipe keeps for itself exits 64 before any broker, named where it was set", arguments: ["run", "replay", "status"])
    func reservedProperty(command: String) throws {
        try refused([command, "-X", "group.id=gx"], says: ["-X group.id=gx: ", "use --group (TRACKPIPE_GROUP)"], "\(command) group.id")
        try refused(
            [command], environment: ["TRACKPIPE_X_GROUP": "group.id=gx"], says: ["TRACKPIPE_X_GROUP (group.id): ", "use --group"],
            "\(command) group.id from the environment")
        try refused(
            [command, "-X", "topic.auto.offset.reset=latest"], says: ["-X topic.auto.offset.reset=latest: ", "a new group starts wherever its input begins"],
            "\(command) a topic-level spelling")
        try refused([command, "-X", "enable.idempotence=f"], says: ["-X enable.idempotence=f: ", "idempotent producer"], "\(command) f is false")
        try refused([command, "-X", "enable.partition.eof=0"], says: ["-X enable.partition.eof=0: ", "read to its end"], "\(command) partition ends")
    }

    @Test("an unknown TRACKPIPE_* variable exits 64 at once, naming the closest known one", arguments: ["run", "replay", "status"])
    func unknownVariable(command: String) throws {
        try refused(
            [command], environment: ["TRACKPIPE_BROKER": "kafka:9092"],
            says: ["unknown environment variable TRACKPIPE_BROKER: did you mean TRACKPIPE_BROKERS?"], never: ["kafka:9092"],
            "\(command) TRACKPIPE_BROKER")
        if command == "run" {
            let result = try TrackpipeBinary.locate().run(["run", "--brokers", "127.0.0.1:1"], environment: ["TRACKPIPE_BROKER": "kafka:9092"])
            let first = try #require(result.stderr.split(separator: "\n").first.map(String.init))
            let docs = try String(contentsOf: DocumentationTests.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
            #expect(docs.contains("\n" + first + "\n"), "docs/configuration.md does not quote: \(first)")
        }
        // A variable another command reads is no error: a deployment gives all of them one
        // environment (the worker's ConfigMap is what `kubectl exec … trackpipe status` sees).
        try refused(
            [command, "-X", "no.such.prop=1"], environment: ["TRACKPIPE_UNTIL_END": "true", "TRACKPIPE_METRICS_PORT": "9464", "TRACKPIPE_X_ANY": "acks=all"],
            says: ["-X no.such.prop=… (value not shown)"], never: ["unknown environment variable"], "\(command) with the worker's variables")
    }

    @Test("a bad value in the environment exits 64 naming the variable even where the command line sets the same flag, before any broker is contacted", arguments: ["run", "replay", "status"])
    func overriddenVariable(command: String) throws {
        if command == "status" {
            try refused(
                [command, "--input-topic", "hits"], environment: ["TRACKPIPE_INPUT_TOPIC": "hits now"],
                says: ["TRACKPIPE_INPUT_TOPIC=hits now: not a Kafka topic name", "(TRACKPIPE_INPUT_TOPIC in the environment: --input-topic on the command line overrides it"],
                "status TRACKPIPE_INPUT_TOPIC")
        } else {
            try refused(
                [command, "--window", "1m"], environment: ["TRACKPIPE_WINDOW": "banana"],
                says: ["TRACKPIPE_WINDOW=banana: ", "(TRACKPIPE_WINDOW in the environment: --window on the command line overrides it, but a value in the environment is checked all the same; correct it or unset it)"],
                "\(command) TRACKPIPE_WINDOW")
        }
        // A variable named after a flag that has none is told so.
        try refused(
            [command], environment: ["TRACKPIPE_TIMINGS": "true"],
            says: ["environment variable TRACKPIPE_TIMINGS: --timings (trackpipe run) has no environment variable"], never: ["did you mean"],
            "\(command) TRACKPIPE_TIMINGS")
    }

    @Test("a --metrics-port already in use exits 64 before any broker is contacted, saying so and what to do")
    func metricsPortInUse() throws {
        // A port some other process listens on, on every interface, as the worker would.
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(holder) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(INADDR_ANY)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let held = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(holder, $0, length) == 0 && getsockname(holder, $0, &length) == 0 }
        }
        try #require(held && listen(holder, 1) == 0, "holding a port")
        let port = Int(UInt16(bigEndian: address.sin_port))
        let broker = try Listener()
        for arguments in [["--metrics-port", "\(port)"], ["--until-end"]] {
            let environment = arguments.first == "--until-end" ? ["TRACKPIPE_METRICS_PORT": "\(port)"] : [:]
            let result = try TrackpipeBinary.locate().run(["run", "--brokers", broker.address] + arguments, environment: environment)
            #expect(result.exitCode == 64, "\(result.stderr)")
            #expect(result.stderr.contains("cannot listen on 0.0.0.0:\(port): the address is already in use"), "\(result.stderr)")
            #expect(result.stderr.contains("Choose another --metrics-port (TRACKPIPE_METRICS_PORT), stop what holds it"), "\(result.stderr)")
            #expect(!result.stderr.contains("errno"), "the error is named, not numbered: \(result.stderr)")
        }
        #expect(broker.connections() == 0, "the port is taken before any broker is contacted")
    }

    @Test("an --output-file replay cannot open exits 64 like any other setting to change (not 1, a failure), before any broker is contacted")
    func unwritableOutputFile() throws {
        let listener = try Listener()
        let path = "/nonexistent-\(getpid())/windows.jsonl"
        let result = try TrackpipeBinary.locate().run(["replay", "--brokers", listener.address, "--output-file", path])
        #expect(result.exitCode == 64, "\(result.stderr)")
        #expect(result.stderr.contains("--output-file \(path): cannot be opened for writing"), "\(result.stderr)")
        #expect(listener.connections() == 0, "the broker was contacted before the error")
    }

    @Test("the check itself: a configuration librdkafka accepts passes, as the worker builds it")
    func acceptedConfiguration() throws {
        let config = KafkaConfig([
            "bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u", "sasl.password": "p", "linger.ms": "5", "group.id": "g",
        ])
        #expect(throws: Never.self) { try config.check(as: .producer) }
        #expect(throws: Never.self) { try config.check(as: .consumer) }
        #expect(throws: KafkaConfigProblem.self) { try KafkaConfig(["linger.ms": "abc"]).check(as: .producer) }
    }
}
