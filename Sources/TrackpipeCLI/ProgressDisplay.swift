import Foundation
import Pipeline
import Runner
import Synchronization

/// Shows a bounded run's progress on standard error: on a terminal, one line redrawn in place
/// (a bar, percent, hits per second, time left); in a pipe or a log, a plain line every few
/// seconds, so that log collectors get whole lines and no control characters. Small enough
/// that a library would not earn its keep (none of the maintained Swift terminal libraries
/// available here does a progress bar on Linux).
final class ProgressDisplay: Sendable {
    let isTerminal: Bool
    private let plainInterval: Int64
    private let state = Mutex<(lastPlain: Int64, drawn: Bool)>((.min / 2, false))
    private let write: @Sendable (String) -> Void

    init(
        isTerminal: Bool = isatty(STDERR_FILENO) == 1, plainInterval: Int64 = 5_000,
        write: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }
    ) {
        self.isTerminal = isTerminal
        self.plainInterval = plainInterval
        self.write = write
    }

    func show(_ progress: RunnerProgress) {
        let seconds = max(Double(progress.elapsedMilliseconds) / 1000, 0.001)
        let rate = Double(progress.consumed) / seconds
        var fraction: Double?
        if let done = progress.done, let total = progress.total {
            fraction = total == 0 ? 1 : min(1, Double(done) / Double(total))
        }
        if progress.finished { fraction = fraction.map { _ in 1 } }
        let percent = fraction.map { String(format: "%5.1f%%", $0 * 100) } ?? "  ?  %"
        // A finished run says how long it took instead of what is left.
        let eta = fraction.flatMap { $0 > 0.001 ? Self.clock(seconds * (1 - $0) / $0) : nil } ?? "--:--"
        let figures = "\(percent)  \(Self.grouped(progress.consumed)) messages  \(Self.grouped(Int(rate)))/s  "
            + (progress.finished ? "in \(Self.clock(seconds))" : "ETA \(eta)")
        state.withLock { state in
            if isTerminal {
                let width = 30
                let filled = Int((fraction ?? 0) * Double(width))
                let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
                write("\r\u{1B}[2Kreplay \(bar) \(figures)" + (progress.finished ? "\n" : ""))
                state.drawn = !progress.finished
            } else if progress.finished || progress.elapsedMilliseconds - state.lastPlain >= plainInterval {
                state.lastPlain = progress.elapsedMilliseconds
                write("replay: \(figures)\n")
            }
        }
    }

    /// Ends a redrawn line so that whatever is printed next starts on its own.
    func finishLine() {
        state.withLock { state in
            if state.drawn { write("\n") }
            state.drawn = false
        }
    }

    static func clock(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        return total >= 3600
            ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
            : String(format: "%d:%02d", total / 60, total % 60)
    }

    static func grouped(_ number: Int) -> String {
        let digits = Array(String(number))
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return out
    }
}
