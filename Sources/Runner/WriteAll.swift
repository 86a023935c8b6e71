import Foundation

/// Writes every byte of `bytes` to `descriptor`, or throws.
///
/// One `write(2)` may take only part of the bytes (a pipe, a socket, a full disk) or be cut
/// short by a signal before writing anything (`EINTR`, which trackpipe's SIGINT and SIGTERM
/// handlers can cause at any moment): both are retried from where the last call stopped, so a
/// caller never loses or repeats output. Any other failure is thrown with its `errno`.
public func writeAll(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) throws(WriteAllError) {
    guard let base = bytes.baseAddress else { return }
    var offset = 0
    while offset < bytes.count {
        let written = write(descriptor, base + offset, bytes.count - offset)
        if written > 0 {
            offset += written
        } else if written < 0 && errno == EINTR {
            continue
        } else {
            // 0 for a non-empty write means the descriptor took nothing and would take nothing
            // on a retry either; it sets no errno, so none is reported.
            throw WriteAllError(descriptor: descriptor, code: written < 0 ? errno : 0, written: offset, requested: bytes.count)
        }
    }
}

/// A `writeAll` that stopped part-way: which descriptor, the `errno` (0 when the system
/// accepted no bytes without saying why), and how far it got, so that the message tells a
/// full disk from a closed pipe.
public struct WriteAllError: Error, Equatable, CustomStringConvertible {
    public let descriptor: Int32
    public let code: Int32
    /// Bytes written before the failure, out of `requested`.
    public let written: Int
    public let requested: Int

    /// What went wrong, e.g. "Broken pipe", "No space left on device".
    public var reason: String { Self.reason(code: code) }

    /// `strerror` of an `errno` from a write, and a plain sentence for 0 (instead of "Success").
    public static func reason(code: Int32) -> String {
        code == 0 ? "the system accepted no bytes" : String(cString: strerror(code))
    }

    public var description: String {
        "writing to file descriptor \(descriptor) failed after \(written) of \(requested) bytes: \(reason)"
    }
}
