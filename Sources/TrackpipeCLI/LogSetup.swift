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

    /// `redactor` holds the secret values of the command's Kafka properties: no log line shows
    /// them, whoever writes it.
    static func bootstrap(level: Logger.Level, format: LogFormat, redactor: SecretRedactor = SecretRedactor()) {
        let first = done.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
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
}

/// A value behind a lock, for the few places where a callback thread hands a result back.
final class LockedValue<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    func get() -> Value { storage.withLock { $0 } }
    func set(_ value: Value) { storage.withLock { $0 = value } }
    func update(_ change: (inout Value) -> Void) { storage.withLock { change(&$0) } }
}
