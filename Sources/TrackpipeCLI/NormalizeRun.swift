import Foundation
import Pipeline
import Runner
import TrackingDomain

/// Counts for the summary `trackpipe normalize` prints to stderr.
struct NormalizeSummary: Sendable, Equatable {
    var lines = 0
    var accepted = 0
    var filtered = 0
    var rejected = ReasonCounts<RejectReason>()

    /// `normalize: 12 lines: 9 accepted, 1 filtered, 2 rejected (malformed_json 1, unknown_action 1)`, the reasons
    /// by code as every summary lists them.
    var line: String {
        "normalize: \(lines) line\(lines == 1 ? "" : "s"): \(accepted) accepted, \(filtered) filtered, \(rejected.total) rejected"
            + (rejected.total > 0 ? " (\(rejected))" : "")
    }

    mutating func count(_ verdict: Verdict) {
        lines += 1
        switch verdict {
        case .accepted: accepted += 1
        case .filtered: filtered += 1
        case .rejected(let reason, _): rejected[reason] += 1
        }
    }
}

/// An I/O failure while streaming; the command names the file it concerns.
enum NormalizeIOError: Error, Equatable {
    case read(errno: Int32)
    case write(errno: Int32)

    var message: String {
        switch self {
        case .read(let code): "read failed: \(String(cString: strerror(code)))"
        case .write(let code): "write failed: \(WriteAllError.reason(code: code))"
        }
    }
}

/// Streams JSON Lines of raw hits to one verdict line each, in order, with bounded memory:
/// lines are normalized straight from the read buffer, and a line longer than the message limit
/// is not buffered past the limit (it is counted and reported as `too_large`).
///
/// Every line is a message: an empty line is `malformed_json`, a last line without a newline
/// counts, a final newline does not start another message. A `\r` before the newline is JSON
/// whitespace, so CRLF files normalize like LF files.
struct NormalizeRun: Sendable {
    var normalizer: Normalizer
    var chunkSize: Int

    init(normalizer: Normalizer = Normalizer(), chunkSize: Int = 64 * 1024) {
        self.normalizer = normalizer
        self.chunkSize = max(1, chunkSize)
    }

    /// `read` fills the buffer and returns the byte count (0 at end of input); `write` must write
    /// every byte it is given. Both may throw to abort the run.
    func run(
        read: (UnsafeMutableRawBufferPointer) throws -> Int,
        write: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> NormalizeSummary {
        var summary = NormalizeSummary()
        var output = JSONWriter(capacity: chunkSize + 4096)
        var pending: [UInt8] = []       // the start of a line that continues in the next chunk
        var pendingOverflow = 0          // bytes of a line already over the limit (not kept)
        var inLine = false               // bytes seen since the last newline
        let limit = normalizer.limits.maxMessageBytes
        var chunk = [UInt8](repeating: 0, count: chunkSize)

        func emit(_ verdict: Verdict) throws {
            summary.count(verdict)
            verdict.writeJSONLine(into: &output)
            output.endLine()
            if output.bytes.count >= chunkSize {
                try output.bytes.withUnsafeBytes { try write($0) }
                output.removeAll()
            }
        }

        func append(_ segment: UnsafeRawBufferPointer) {
            if pendingOverflow > 0 || pending.count + segment.count > limit {
                pendingOverflow += pending.count + segment.count
                pending.removeAll(keepingCapacity: true)
            } else {
                pending.append(contentsOf: segment)
            }
        }

        func finishLine(_ tail: UnsafeRawBufferPointer) throws {
            if pendingOverflow == 0 && pending.isEmpty {
                try emit(normalizer.normalize(tail, kafkaTimestamp: nil))
                return
            }
            append(tail)
            if pendingOverflow > 0 {
                try emit(normalizer.tooLarge(byteCount: pendingOverflow))
            } else {
                try emit(pending.withUnsafeBytes { normalizer.normalize($0, kafkaTimestamp: nil) })
            }
            pending.removeAll(keepingCapacity: true)
            pendingOverflow = 0
        }

        while true {
            let filled = try chunk.withUnsafeMutableBytes { try read($0) }
            if filled == 0 { break }
            try chunk.withUnsafeBytes { buffer in
                var lineStart = 0
                var index = 0
                while index < filled {
                    if buffer[index] == 0x0A {
                        try finishLine(UnsafeRawBufferPointer(rebasing: buffer[lineStart..<index]))
                        lineStart = index + 1
                        inLine = false
                    }
                    index += 1
                }
                if lineStart < filled {
                    append(UnsafeRawBufferPointer(rebasing: buffer[lineStart..<filled]))
                    inLine = true
                }
            }
        }
        if inLine {
            try finishLine(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        if !output.bytes.isEmpty {
            try output.bytes.withUnsafeBytes { try write($0) }
        }
        return summary
    }

    /// Streams from one file descriptor to another (the command uses stdin/a file and stdout).
    func run(input: Int32, output: Int32) throws -> NormalizeSummary {
        try run(
            read: { buffer in
                while true {
                    let n = read(input, buffer.baseAddress, buffer.count)
                    if n >= 0 { return n }
                    if errno == EINTR { continue }
                    throw NormalizeIOError.read(errno: errno)
                }
            },
            write: { bytes in
                do {
                    try writeAll(bytes, to: output)
                } catch let error as WriteAllError {
                    throw NormalizeIOError.write(errno: error.code)
                }
            })
    }
}
