import Foundation
import Kafka
import Logging
import Pipeline
import Runner
import Synchronization

/// The worker's `/metrics` and health checks, and what they say after the run has failed.
///
/// A failed run exits 1 at once, and Prometheus would see nothing but a target that went away:
/// no alert could tell a fatal error from a restart. So when `/metrics` has been scraped during
/// the run (someone is watching), the failed worker stays up until one more scrape has read
/// `trackpipe_run_failed 1` (and every health check answers 503 with the cause), at most `maxLinger`.
/// Nobody scraping, no wait: a run without Prometheus exits as before.
final class MetricsEndpoint: Sendable {
    /// Longer than any sensible scrape interval (the compose stack uses 15 s).
    static let maxLinger: Double = 60

    /// What the serving thread and the worker's thread share.
    private final class State: Sendable {
        let scrapes = Atomic<Int>(0)
        let failure = Mutex<String?>(nil)
    }

    private let server: MetricsServer
    private let metrics: PipelineMetrics
    private let state = State()

    init(port: Int, metrics: PipelineMetrics, pipeline: Pipeline, redactor: SecretRedactor, logger: Logger) throws {
        self.metrics = metrics
        let state = self.state
        // The checks quote a delivery failure's text; scrubbed like a log line.
        let health: @Sendable (HealthCheck) -> String? = { check in
            state.failure.withLock { $0 } ?? pipeline.problem(check).map(redactor.redact)
        }
        server = try MetricsServer(
            port: port, logger: logger,
            metrics: {
                state.scrapes.add(1, ordering: .sequentiallyConsistent)
                return metrics.exposition(healthProblem: health(.ready))
            },
            health: health)
    }

    /// After a failed run: shows the failure and, if Prometheus has been scraping, waits for its
    /// next scrape (or `maxLinger` seconds, or until `interrupted`) before the caller exits.
    /// Stops the server.
    func lingerAfterFailure(_ error: String, logger: Logger, interrupted: () -> Bool) {
        let seen = state.scrapes.load(ordering: .sequentiallyConsistent)
        state.failure.withLock { $0 = "the run stopped on an error and the worker is exiting: \(error)" }
        metrics.markRunFailed()
        if seen > 0 {
            logger.notice("waiting for the next scrape of /metrics (at most \(Int(Self.maxLinger)) s), so that Prometheus records the failure")
            let deadline = Date().addingTimeInterval(Self.maxLinger)
            while state.scrapes.load(ordering: .sequentiallyConsistent) == seen && Date() < deadline && !interrupted() { usleep(50_000) }
        }
        // Returns once the response in flight, if any, is written.
        server.stop()
    }

    func stop() { server.stop() }
}
