import Logging
import Pipeline
import Runner

/// Collects what the runners log at the error level: in a schedule, every such line is a
/// problem the checks report (warnings — a refused commit, a partition held back — are the
/// runner doing its job). Lost input, which a runner reports as an error, is judged apart (the
/// checker holds what each runner found lost against what retention deleted).
final class ErrorLog: @unchecked Sendable {
    // @unchecked: the simulation runs on one thread; the runners log on it.
    private(set) var lines: [String] = []

    func logger() -> Logger {
        Logger(label: "trackpipe.simulation") { _ in Handler(log: self) }
    }

    fileprivate func add(_ line: String) { lines.append(line) }

    private struct Handler: LogHandler {
        let log: ErrorLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .error

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            if event.metadata?[InputSpan.logField] != nil { return }
            log.add("\(event.message)")
        }
    }
}
