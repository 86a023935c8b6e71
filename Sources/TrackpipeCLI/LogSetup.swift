import Foundation
import Kafka
import Logging
import Synchronization

/// One place where the process's logging is decided: level and format (text for people,
/// JSON lines for log shippers in a container).
public enum LogFormat: String, CaseIterable, Sendable {
    case text, json
}

enum LogSetup {
    private static let done = Mutex(false)

    /// Sets the process's logging up (once): no log line shows a secret value of `properties`,
    /// the command's Kafka properties, whoever writes it. Returns the redactor, for the command's
    /// own error messages, and the logger.
    ///
    /// A secret given with `-X` (`commandLine`) is readable by every user of the machine for as
    /// long as the process runs (`ps`, `/proc/<pid>/cmdline`), and lands in shell history: said
    /// once at start-up, naming the keys (never their values) and the safer way.
    @discardableResult
    static func bootstrap(
        level: Logger.Level, format: LogFormat, properties: [String: String] = [:], commandLine: [String] = []
    ) -> (redactor: SecretRedactor, logger: Logger) {
        let redactor = SecretRedactor(properties: properties)
        let first = done.withLock { done in
            defer { done = true }
            return !done
        }
        if first {
            LoggingSystem.bootstrap { label in
                var handler: any LogHandler =
                    switch format {
                    case .text: StreamLogHandler.standardError(label: label)
                    case .json: JSONLogHandler(label: label)
                    }
                handler.logLevel = level
                return RedactingLogHandler(handler, redactor: redactor)
            }
        }
        let logger = Logger(label: "trackpipe")
        let keys = KafkaPropertyArguments.secretKeysOnCommandLine(commandLine)
        if !keys.isEmpty {
            let variables = keys.map { "TRACKPIPE_X_" + $0.uppercased().replacingOccurrences(of: ".", with: "_") + "=\"\($0)=…\"" }
            logger.warning(
                "\(keys.joined(separator: ", ")) given with -X on the command line, where other users of this machine can read it (ps, /proc) and shells keep it in their history; pass it through the environment instead, for example \(variables.joined(separator: ", ")) from a secret store")
        }
        return (redactor, logger)
    }
}

/// A value behind a lock, for the few places where a callback thread hands a result back.
final class LockedValue<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    func get() -> Value { storage.withLock { $0 } }
    func set(_ value: Value) { storage.withLock { $0 = value } }
    func update(_ change: (inout Value) -> Void) { storage.withLock { change(&$0) } }
}
