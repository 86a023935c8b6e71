import Dispatch
import Foundation

/// SIGINT and SIGTERM as events instead of process death, so commands can finish what is in
/// flight and commit before exiting.
enum ShutdownSignal {
    /// Installs handlers and calls `onSignal` (on a private queue) for the first signal received.
    static func install(_ onSignal: @escaping @Sendable (String) -> Void) -> [any DispatchSourceSignal] {
        let queue = DispatchQueue(label: "trackpipe.signals")
        return [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")].map { number, name in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { onSignal(name) }
            source.resume()
            return source
        }
    }

    /// Blocks the calling thread until SIGINT or SIGTERM; returns its name.
    static func wait() -> String {
        let semaphore = DispatchSemaphore(value: 0)
        let received = LockedValue<String>("")
        let sources = install { name in
            received.set(name)
            semaphore.signal()
        }
        semaphore.wait()
        withExtendedLifetime(sources) {}
        return received.get()
    }
}
