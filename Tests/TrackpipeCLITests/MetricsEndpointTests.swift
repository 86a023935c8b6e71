import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Testing
import TrackpipeTestSupport

/// A worker that stops on an error exits 1; when Prometheus has been scraping it, it first waits
/// for one more scrape so that the failure is recorded (`trackpipe_run_failed`, the
/// TrackpipeFatalError alert) instead of looking like any target that went away.
@Suite("trackpipe run: /metrics and /health after a failure", .serialized)
struct MetricsEndpointTests {
    /// A worker on a fresh broker whose input topic is then made to disappear (a fatal error).
    func failingWorker(group: String) throws -> (EmbeddedBroker, BackgroundTrackpipe, Int) {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try broker.createTopic("\(group)-repartition", partitions: 4)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 300, seed: 51, deliveries: 3)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let port = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
                "--group", group, "--commit-interval", "200ms", "--metrics-port", "\(port)", "--log-level", "notice",
                "-X", "topic.metadata.refresh.interval.ms=1000", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        return (broker, worker, port)
    }

    @Test("scraped before the failure: /health says why and one more scrape reads trackpipe_run_failed 1, then exit 1")
    func failureIsScrapedBeforeExit() throws {
        let (broker, worker, port) = try failingWorker(group: "fatal")
        defer { worker.signal(SIGKILL) }
        let running = BackgroundTrackpipe.waitUntil(seconds: 120) {
            guard let text = try? HTTPGet.fetch(port: port, path: "/metrics").body else { return false }
            return text.contains("trackpipe_messages_consumed_total{stage=\"normalize\"} 300")
        }
        try #require(running, "the worker never read its input; stderr: \(worker.stderr.suffix(2_000))")
        #expect(try HTTPGet.fetch(port: port, path: "/metrics").body.contains("trackpipe_run_failed 0.0\n"))

        broker.setTopicError("hits", code: KafkaErrorCode.unknownTopicOrPartition)
        // /health shows the failure while the worker waits for Prometheus' next scrape.
        var health = HTTPGet.Response(status: 0, body: "")
        let failed = BackgroundTrackpipe.waitUntil(seconds: 120) {
            health = (try? HTTPGet.fetch(port: port, path: "/health")) ?? health
            return health.body.contains("the run stopped on an error")
        }
        try #require(failed, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(health.status == 503)
        #expect(health.body.contains("the topic hits no longer exists"), "\(health.body)")
        #expect(worker.process.isRunning, "the worker waits for a scrape before it exits")
        let last = try HTTPGet.fetch(port: port, path: "/metrics").body
        #expect(last.contains("trackpipe_run_failed 1.0\n"), "\(last)")
        #expect(last.contains("trackpipe_healthy 0.0\n"))
        #expect(worker.waitForExit(seconds: 60) == 1, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(worker.stderr.contains("trackpipe run: normalize: the topic hits no longer exists on the cluster"))
        #expect(worker.stderr.contains("waiting for the next scrape of /metrics"))
    }

    @Test("never scraped: a failed worker exits 1 without waiting for a scrape")
    func unscrapedFailureExitsAtOnce() throws {
        let (broker, worker, port) = try failingWorker(group: "unwatched")
        defer { worker.signal(SIGKILL) }
        // Nobody reads /metrics: progress is read from the group's commits, and only /health
        // (a probe, not Prometheus) is asked.
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "unwatched", "log_level": "3"]))
        let running = try BackgroundTrackpipe.waitUntil(seconds: 120) {
            let committed = try reader.committed((0..<4).map { TopicPartition(topic: "hits", partition: Int32($0)) })
            return committed.map { max(0, $0.offset) }.reduce(0, +) == 300 && (try? HTTPGet.fetch(port: port, path: "/health").status) == 200
        }
        try #require(running, "stderr: \(worker.stderr.suffix(2_000))")
        broker.setTopicError("hits", code: KafkaErrorCode.unknownTopicOrPartition)
        let code = worker.waitForExit(seconds: 120)
        #expect(code == 1, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(!worker.stderr.contains("waiting for the next scrape"), "\(worker.stderr.suffix(2_000))")
    }
}
