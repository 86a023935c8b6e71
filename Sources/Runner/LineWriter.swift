import Foundation
import Synchronization

/// Writes record values as JSON Lines to a file descriptor (a file, or standard output), for
/// loading a warehouse instead of producing to a topic.
public final class LineWriter: Sendable {
    private let descriptor: Int32
    private let ownsDescriptor: Bool
    /// Lines not written yet. One runner writes at a time; the lock makes that a fact rather
    /// than a promise, for a lock taken once per line.
    private let buffer = Mutex<[UInt8]>([])
    public let path: String

    /// `-` is standard output; any other path is created or truncated.
    public init(path: String) throws {
        self.path = path
        if path == "-" {
            descriptor = STDOUT_FILENO
            ownsDescriptor = false
        } else {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            guard fd >= 0 else {
                throw PipelineError.configuration("--output-file \(path): cannot be opened for writing: \(String(cString: strerror(errno)))")
            }
            descriptor = fd
            ownsDescriptor = true
        }
        buffer.withLock { $0.reserveCapacity(1 << 16) }
    }

    deinit {
        try? flush()
        if ownsDescriptor { close(descriptor) }
    }

    func write(_ value: UnsafeRawBufferPointer) throws {
        try buffer.withLock { buffer in
            buffer.append(contentsOf: value)
            buffer.append(UInt8(ascii: "\n"))
            if buffer.count >= 1 << 16 { try flush(&buffer) }
        }
    }

    public func flush() throws {
        try buffer.withLock { try flush(&$0) }
    }

    private func flush(_ buffer: inout [UInt8]) throws {
        do {
            try buffer.withUnsafeBytes { try writeAll($0, to: descriptor) }
        } catch let error as WriteAllError {
            throw PipelineError.outputFileFailed("--output-file \(path): writing failed: \(error.reason)")
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
