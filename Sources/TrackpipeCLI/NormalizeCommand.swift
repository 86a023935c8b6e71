import ArgumentParser
import Pipeline
import Runner
import Foundation
import TrackingDomain

/// `trackpipe normalize [FILE]`: what the worker would do with each hit, without Kafka — for
/// checking an app's hits, checking a dead-letter dump again, or diffing two releases.
struct NormalizeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "normalize",
        abstract: "Normalize raw tracking hits from JSON Lines (one hit per line) and print one verdict line per input line.",
        discussion: """
            Each output line is {"status":"ok","event":{...}}, {"status":"filtered","reason":"tracking_off"} or {"status":"rejected","reason":"<code>","detail":"<text>"}, in input order. Without a Kafka timestamp, a hit without its own timestamp has "eventTime":null. A summary goes to stderr.

            Exit codes: 0 once all input is read, whatever the verdicts; 64 for a wrong argument; 66 if FILE cannot be opened; 74 if reading the input or writing the output fails.
            """
    )

    @Argument(help: "JSON Lines file of raw hits; standard input when omitted or '-'.")
    var file: String?

    /// The file to open, or nil for standard input (`-` is the usual way to say so in a pipeline).
    var path: String? { file == "-" ? nil : file }

    func run() throws {
        let name = path ?? "standard input"
        var input: Int32 = 0
        if let file = path {
            input = open(file, O_RDONLY)
            guard input >= 0 else {
                let reason = String(cString: strerror(errno))
                printToStandardError("trackpipe normalize: cannot open \(file): \(reason)")
                throw ExitCode(66)  // EX_NOINPUT
            }
        }
        defer { if path != nil { close(input) } }
        let summary: NormalizeSummary
        do {
            summary = try NormalizeRun().run(input: input, output: 1)
        } catch let error as NormalizeIOError {
            switch error {
            case .read: printToStandardError("trackpipe normalize: cannot read \(name): \(error.message)")
            case .write: printToStandardError("trackpipe normalize: cannot write standard output: \(error.message)")
            }
            throw ExitCode(74)  // EX_IOERR
        }
        printToStandardError(summary.line)
    }
}

/// Best effort: when standard error itself cannot be written, there is nowhere left to say so.
func printToStandardError(_ message: String) {
    var line = Array(message.utf8)
    line.append(0x0A)
    line.withUnsafeBytes { bytes in try? writeAll(bytes, to: STDERR_FILENO) }
}
