import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

/// Secret librdkafka properties never reach any output of the `trackpipe` binary: log lines
/// (text and JSON, with librdkafka's own debug output on), error messages, usage errors,
/// `--help`, `/metrics`, `/health` and the exit summary. Each secret is a marker used
/// nowhere else, so finding it anywhere is a leak.
@Suite("secrets never reach any output", .serialized)
struct SecretRedactionTests {
    /// The secret properties librdkafka accepts on a plaintext connection, so that the worker
    /// really runs with them (it ignores them without SASL or TLS).
    static let acceptedSecrets = ["sasl.password", "ssl.key.password", "ssl.keystore.password"]

    /// One marker per property, unique to this run.
    static func markers(_ keys: [String], _ tag: String) -> [String: String] {
        let run = UUID().uuidString.prefix(8).lowercased()
        return Dictionary(uniqueKeysWithValues: keys.map { ($0, "tpsecret-\(tag)-\($0.replacingOccurrences(of: ".", with: "-"))-\(run)") })
    }

    static func leaks(_ markers: [String: String], in text: String) -> [String] {
        markers.filter { text.contains($0.value) }.map(\.key).sorted()
    }

    func makeBroker() throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try broker.createTopic("aggregates", partitions: 2)
        try broker.createTopic("dlq", partitions: 1)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 400, seed: 5, deliveries: 3)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        return broker
    }

    func committed(_ broker: EmbeddedBroker, group: String) throws -> Int64 {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
        let partitions = (0..<4).map { TopicPartition(topic: "hits", partition: Int32($0)) }
        return try reader.committed(partitions).map { max(0, $0.offset) }.reduce(0, +)
    }

    /// Runs the worker until it has committed the whole input, scrapes `/metrics` and
    /// `/health`, stops it with SIGTERM, and returns everything it showed.
    func runWorker(_ broker: EmbeddedBroker, group: String, arguments: [String], environment: [String: String]) throws -> String {
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates",
                "--dlq-topic", "dlq", "--group", group, "--shards", "2", "--commit-interval", "200ms", "--metrics-port", "\(port)",
                "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ] + arguments,
            environment: environment)
        let done = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try committed(broker, group: group) == 400 }
        #expect(done, "the worker did not commit its input; stderr: \(worker.stderr.suffix(2_000))")
        let metrics = try HTTPGet.fetch(port: port, path: "/metrics")
        let health = try HTTPGet.fetch(port: port, path: "/health")
        #expect(metrics.body.contains("trackpipe_dead_letters_total"), "the scrape reached the worker")
        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(worker.stdout.contains("balanced      yes"), "the summary was printed")
        return [worker.stdout, worker.stderr, metrics.body, health.body].joined(separator: "\n")
    }

    @Test("a running worker, secrets given with -X, text logs at debug with librdkafka's debug=all: no output shows them")
    func runningWithCommandLineSecrets() throws {
        let broker = try makeBroker()
        let markers = Self.markers(Self.acceptedSecrets, "cli")
        let output = try runWorker(
            broker, group: "secret-cli",
            arguments: ["--log-level", "debug", "-X", "debug=all"] + markers.sorted { $0.key < $1.key }.flatMap { ["-X", "\($0.key)=\($0.value)"] },
            environment: [:])
        #expect(Self.leaks(markers, in: output).isEmpty, "leaked: \(Self.leaks(markers, in: output))")
        // The run did print the places where a secret could have appeared.
        #expect(output.contains("Client configuration"), "librdkafka's configuration dump was logged")
        #expect(output.contains("sasl.password=[redacted]"), "the start-up line lists the -X properties, redacted")
        #expect(output.contains("given with -X on the command line"), "a warning says secrets belong in the environment")
        #expect(output.contains("TRACKPIPE_X_SASL_PASSWORD"))
    }

    @Test("a running worker, secrets from TRACKPIPE_X_* and TRACKPIPE_X, JSON logs at debug: no output shows them")
    func runningWithEnvironmentSecrets() throws {
        let broker = try makeBroker()
        let markers = Self.markers(Self.acceptedSecrets, "env")
        let environment = [
            "TRACKPIPE_LOG_FORMAT": "json", "TRACKPIPE_LOG_LEVEL": "debug",
            "TRACKPIPE_X": "debug=all;ssl.key.password=\(markers["ssl.key.password"]!)",
            "TRACKPIPE_X_SASL_PASSWORD": "sasl.password=\(markers["sasl.password"]!)",
            "TRACKPIPE_X_KEYSTORE_PASSWORD": "ssl.keystore.password=\(markers["ssl.keystore.password"]!)",
        ]
        let output = try runWorker(broker, group: "secret-env", arguments: [], environment: environment)
        #expect(Self.leaks(markers, in: output).isEmpty, "leaked: \(Self.leaks(markers, in: output))")
        #expect(output.contains("\"msg\":\"trackpipe running"), "the logs were JSON")
        #expect(output.contains("sasl.password=[redacted]"))
        #expect(!output.contains("given with -X on the command line"), "no warning: nothing secret was on the command line")
    }

    @Test("failing configurations: errors, usage messages and librdkafka's error logs never show a secret")
    func failures() throws {
        let binary = try TrackpipeBinary.locate()
        let broker = try makeBroker()
        let keys = Self.acceptedSecrets + ["sasl.oauthbearer.client.secret", "ssl.key.location"]
        let markers = Self.markers(keys, "fail")
        func check(_ arguments: [String], _ environment: [String: String] = [:], exit expected: Int32? = nil, says: String, _ comment: Comment)
            throws
        {
            let result = try binary.run(arguments, environment: environment)
            let output = result.stdout + result.stderr
            #expect(Self.leaks(markers, in: output).isEmpty, "\(comment): leaked \(Self.leaks(markers, in: output)) in \(output.suffix(1_500))")
            if let expected { #expect(result.exitCode == expected, "\(comment): \(result.stderr.suffix(800))") }
            #expect(output.contains(says), "\(comment): expected \"\(says)\" in \(output.suffix(800))")
        }
        let brokers = ["--brokers", broker.bootstrapServers, "--input-topic", "hits"]
        let oauth = "sasl.oauthbearer.client.secret=\(markers["sasl.oauthbearer.client.secret"]!)"
        let password = "sasl.password=\(markers["sasl.password"]!)"

        // librdkafka refuses the property in Debian's build (no libcurl): a configuration error
        // that names it, found before any client exists.
        try check(["run"] + brokers + ["-X", oauth, "-X", password], exit: 64, says: "-X sasl.oauthbearer.client.secret=… (value not shown)", "-X, refused property")
        try check(
            ["run"] + brokers, ["TRACKPIPE_X_OAUTH": oauth, "TRACKPIPE_X_SASL_PASSWORD": password], exit: 64,
            says: "TRACKPIPE_X_OAUTH (sasl.oauthbearer.client.secret)", "environment, refused property")
        try check(["replay"] + brokers + ["-X", oauth], exit: 64, says: "sasl.oauthbearer.client.secret", "replay")

        // A key file that does not exist: refused at start-up, naming the property and not the
        // path (a secret-named property); librdkafka, had it got that far, would have logged
        // OpenSSL's error quoting the path.
        let keyFile = "/nonexistent/\(markers["ssl.key.location"]!).pem"
        try check(
            ["run", "--brokers", "127.0.0.1:1", "-X", "security.protocol=ssl", "-X", "ssl.key.location=\(keyFile)",
             "-X", "ssl.key.password=\(markers["ssl.key.password"]!)"],
            exit: 64, says: "-X ssl.key.location=… (value not shown): the path given does not exist", "TLS key file missing")

        // Usage errors that quote arguments, and values that are not key=value.
        try check(["run", password], exit: 64, says: "Unexpected argument", "-X forgotten")
        try check(["run", "-X", "sasl.password \(markers["sasl.password"]!)"], exit: 64, says: "expected key=value", "-X with a space")
        try check(["run"], ["TRACKPIPE_X_SASL_PASSWORD": markers["sasl.password"]!], exit: 64, says: "TRACKPIPE_X_SASL_PASSWORD", "the key left out")
        try check(["run", "--shards", "0", "-X", password], exit: 64, says: "--shards 0", "another setting wrong")

        // Help, with secrets set everywhere.
        let everywhere = [
            "TRACKPIPE_X_SASL_PASSWORD": password, "TRACKPIPE_X": "ssl.keystore.password=\(markers["ssl.keystore.password"]!)",
        ]
        try check(["run", "--help", "-X", password], everywhere, exit: 0, says: "TRACKPIPE_X_<ANY>", "run --help")
        try check(["replay", "--help"], everywhere, exit: 0, says: "--output-file", "replay --help")
        try check(["--help"], everywhere, exit: 0, says: "SUBCOMMANDS", "trackpipe --help")
    }
}
