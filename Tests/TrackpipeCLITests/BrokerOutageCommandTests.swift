import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

/// A Kafka outage costs a pause, never the worker: started while no broker answers, `run` waits
/// (live, not ready) and counts what comes once the cluster is back, in the same process.
@Suite("trackpipe run through a Kafka outage", .serialized)
struct BrokerOutageCommandTests {
    @Test("the broker down for 80 s from before the worker starts: still running, live and not ready meanwhile, every hit produced after counted")
    func outageBeforeStart() throws {
        let broker = try EmbeddedBroker()
        for topic in ["hits", "aggregates", "dlq"] { try broker.createTopic(topic, partitions: 4) }
        try broker.setBrokerDown(1)
        let outageStarted = Date()
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
                "--group", "outage", "--metrics-port", "\(port)", "--unhealthy-after", "5s", "--commit-interval", "500ms",
                "--grace", "1s", "--idle-timeout", "2s", "--log-level", "notice",
                "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        defer { worker.signal(SIGKILL) }

        // During the outage: live (its loop turns, waiting) and not ready, saying what it waits for.
        func answer(_ path: String) -> HTTPGet.Response? { try? HTTPGet.fetch(port: port, path: path) }
        var ready: HTTPGet.Response?
        let waiting = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            ready = answer("/health/ready")
            return answer("/health/live")?.status == 200 && ready?.status == 503
        }
        try #require(waiting, "ready: \(ready.map { "\($0.status) \($0.body)" } ?? "no answer"); stderr: \(worker.stderr.suffix(2_000))")
        #expect(ready?.body.contains("not ready: ") == true && ready?.body.contains(broker.bootstrapServers) == true, "\(ready?.body ?? "")")
        #expect(answer("/health")?.status == 503, "/health is readiness")

        // The outage lasts 80 s in all (longer than the old 60 s liveness limit and the old
        // 10 s start-up timeout): the scenario's length, not something the test measures.
        let rest = 80 - Date().timeIntervalSince(outageStarted)
        if rest > 0 { usleep(useconds_t(rest * 1_000_000)) }
        #expect(worker.process.isRunning, "the worker waits out the outage; stderr: \(worker.stderr.suffix(2_000))")
        #expect(answer("/health/live")?.status == 200)
        #expect(answer("/health/ready")?.status == 503)
        #expect(worker.stderr.contains("no Kafka broker at \(broker.bootstrapServers) answers"), "\(worker.stderr.suffix(2_000))")
        #expect(worker.stderr.contains("Check --brokers and the security settings (-X security.protocol=plaintext)"))

        try broker.setBrokerUp(1)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 400, seed: 28, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let expected = corpus.expected(windowSize: 60_000)
        var problems: [String] = []
        let counted = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds, every: 0.5) {
            guard let contents = try? TopicContents(broker: broker, output: "aggregates", outputPartitions: 4, dlq: "dlq", dlqPartitions: 4)
            else { return false }
            problems = contents.mismatches(against: expected, highestRevision: true)
            return problems.isEmpty
        }
        #expect(counted, "\(problems.prefix(5)); stderr: \(worker.stderr.suffix(3_000))")
        #expect(BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { answer("/health/ready")?.status == 200 })

        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr.suffix(2_000))")
    }

    @Test("SIGTERM while no broker has ever answered: exit 0 at once, nothing read, nothing committed")
    func stopWhileWaiting() throws {
        let broker = try EmbeddedBroker()
        try broker.setBrokerDown(1)
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            ["run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", "stopped", "--log-level", "notice"])
        defer { worker.signal(SIGKILL) }
        let waiting = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            worker.stderr.contains("no Kafka broker at \(broker.bootstrapServers) answers")
        }
        try #require(waiting, "stderr: \(worker.stderr.suffix(2_000))")
        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(worker.stderr.contains("stopped before a Kafka broker answered"), "\(worker.stderr.suffix(2_000))")
    }

    @Test("SIGTERM while the output's leader is down and records wait for it: exit 0 within the grace orchestrators give a stop, without a commit the broker cannot take")
    func stopDuringAnOutage() throws {
        let broker = try EmbeddedBroker(brokers: 2)
        for topic in ["hits", "aggregates", "dlq", "stop-outage-repartition"] { try broker.createTopic(topic, partitions: 4) }
        // The repartition topic, where the normalize stage writes, is led by broker 2; the rest by 1.
        for topic in ["hits", "aggregates", "dlq", "stop-outage-repartition"] {
            for partition in Int32(0)..<4 { try broker.setLeader(topic, partition: partition, brokerId: topic == "stop-outage-repartition" ? 2 : 1) }
        }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 600, seed: 29, deliveries: 4)).generate())
        try corpus.produce(0..<200, to: "hits", on: broker)
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
                "--group", "stop-outage", "--commit-interval", "500ms", "--log-level", "info", "--metrics-port", "\(port)",
                "--unhealthy-after", "2s", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        defer { worker.signal(SIGKILL) }
        let reading = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { worker.stderr.contains("aggregate: assigned") }
        try #require(reading, "stderr: \(worker.stderr.suffix(2_000))")
        try broker.setBrokerDown(2)
        try corpus.produce(200..<600, to: "hits", on: broker)
        // A commit now waits on records broker 2 does not acknowledge, and readiness says so.
        var ready = ""
        let waiting = BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) {
            ready = (try? HTTPGet.fetch(port: port, path: "/health/ready").body) ?? ready
            return ready.contains("for the broker to acknowledge")
        }
        try #require(waiting, "ready: \(ready); stderr: \(worker.stderr.suffix(2_000))")
        #expect(try HTTPGet.fetch(port: port, path: "/health/live").status == 200, "waiting on the cluster is not a stuck loop")
        let stopped = Date()
        worker.signal(SIGTERM)
        let code = worker.waitForExit(seconds: SafetyDeadline.seconds)
        let took = Date().timeIntervalSince(stopped)
        print("SIGTERM with the output's leader down: exit \(code.map(String.init) ?? "none") after \(String(format: "%.1f", took)) s")
        #expect(code == 0, "stderr: \(worker.stderr.suffix(3_000))")
        #expect(worker.stderr.contains("records the broker has not acknowledged within 10 s of the stop: not committing past the previous commit"), "\(worker.stderr.suffix(3_000))")
        // Kubernetes gives 30 s by default (the manifest 60 s), the compose file 30 s.
        #expect(took < 30, "a stop during an outage took \(took) s")
    }
}
