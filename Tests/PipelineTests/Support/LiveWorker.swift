import Foundation
import Logging
import Pipeline
import Runner
import Synchronization
import TrackpipeTestSupport

/// A `Pipeline` running on a thread of its own, as one instance of a deployment: started,
/// observed through its metrics, and stopped as SIGTERM would.
final class LiveWorker: Sendable {
    let pipeline: Pipeline
    let metrics: PipelineMetrics
    private final class Outcome: Sendable {
        let value = Mutex<Result<PipelineSummary, any Error>?>(nil)
    }
    private let result = Outcome()
    private let finished = DispatchSemaphore(value: 0)

    init(_ config: PipelineConfig, logger given: Logger? = nil) {
        metrics = PipelineMetrics()
        var logger = given ?? Logger(label: "trackpipe")
        if ProcessInfo.processInfo.environment["TRACKPIPE_DEBUG_CGRP"] != nil { logger.logLevel = .debug }
        pipeline = Pipeline(config: config, logger: logger, metrics: metrics)
        let thread = Thread { [pipeline, result, finished] in
            let outcome = Result { try pipeline.run() }
            result.value.withLock { $0 = outcome }
            finished.signal()
        }
        thread.stackSize = 8 << 20
        thread.start()
    }

    /// Stops as on SIGTERM and returns the summary; throws if the worker has not stopped
    /// within `timeoutSeconds` (a hang).
    func stop(timeoutSeconds: Double = SafetyDeadline.seconds) throws -> PipelineSummary {
        pipeline.requestStop()
        if let done = result.value.withLock({ $0 }) { return try done.get() }
        guard finished.wait(timeout: .now() + timeoutSeconds) == .success else {
            throw CocoaError(.executableLoad, userInfo: [NSLocalizedDescriptionKey: "the worker did not stop within \(timeoutSeconds) s"])
        }
        return try result.value.withLock { $0 }!.get()
    }

    /// How the run ended, if it ended by itself within `seconds` (no stop requested): a bound
    /// on a hang, as in `eventually`.
    func ended(within seconds: Double = SafetyDeadline.seconds) -> Result<PipelineSummary, any Error>? {
        if let done = result.value.withLock({ $0 }) { return done }
        guard finished.wait(timeout: .now() + seconds) == .success else { return nil }
        finished.signal()  // for a later `stop`
        return result.value.withLock { $0 }
    }

    /// The value of one series of the Prometheus text, 0 when absent.
    func metric(_ series: String) -> Double {
        for line in metrics.registry.emitToString().split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.split(separator: " ").last!) ?? 0
        }
        return 0
    }
}

/// Polls until `condition` holds or `seconds` pass; returns whether it held. `seconds` bounds
/// a hang (see `SafetyDeadline`), it is not what a test checks.
func eventually(seconds: Double = SafetyDeadline.seconds, every interval: Double = 0.1, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(useconds_t(interval * 1_000_000))
    }
    return try condition()
}
