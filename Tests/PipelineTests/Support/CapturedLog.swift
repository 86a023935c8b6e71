import Logging
import Synchronization

/// Keeps every log line a worker writes, with its level, for tests that check what an operator
/// would read.
final class CapturedLog: Sendable {
    let lines = Mutex<[(Logger.Level, String)]>([])
    var all: [(Logger.Level, String)] { lines.withLock { $0 } }

    /// A logger whose lines land here.
    var logger: Logger { Logger(label: "test") { [self] _ in Handler(captured: self) } }

    struct Handler: LogHandler {
        let captured: CapturedLog
        var logLevel: Logger.Level = .info
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { captured.lines.withLock { $0.append((event.level, "\(event.message)")) } }
    }
}
