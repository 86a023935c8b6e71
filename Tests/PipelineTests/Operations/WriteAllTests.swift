#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Dispatch
import Foundation
@testable import Pipeline
@testable import Runner
import Synchronization
import Testing
import TrackpipeTestSupport

/// `writeAll` is what `--output-file`, `trackpipe normalize` and its messages on stderr write
/// through: every byte in order, or an error that says where and why.
@Suite("writing every byte to a file descriptor")
struct WriteAllTests {
    final class Received: Sendable {
        let bytes = Mutex<[UInt8]>([])
    }

    @Test("a megabyte through a pipe arrives whole and in order")
    func everyByteThroughAPipe() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        defer { close(readEnd) }
        let sent = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
        let received = Received()
        let drained = DispatchSemaphore(value: 0)
        // The pipe holds far less than a megabyte: a reader must empty it while we write.
        Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                received.bytes.withLock { $0 += buffer[0..<count] }
            }
            drained.signal()
        }.start()
        try sent.withUnsafeBytes { try writeAll($0, to: writeEnd) }
        close(writeEnd)
        try #require(drained.wait(timeout: .now() + SafetyDeadline.seconds) == .success, "the reader never saw the end of the pipe")
        let got = received.bytes.withLock { $0 }
        #expect(got.count == sent.count)
        #expect(got == sent)
    }

    @Test("a descriptor that cannot be written: the error names it, says why and how far it got")
    func failureSaysWhy() {
        let line = Array("a line\n".utf8)
        #expect(throws: WriteAllError(descriptor: -1, code: EBADF, written: 0, requested: line.count)) {
            try line.withUnsafeBytes { try writeAll($0, to: -1) }
        }
        let error = WriteAllError(descriptor: -1, code: EBADF, written: 0, requested: line.count)
        #expect(error.description == "writing to file descriptor -1 failed after 0 of 7 bytes: \(String(cString: strerror(EBADF)))")
        #expect(WriteAllError.reason(code: 0) == "the system accepted no bytes", "never strerror(0), which reads \"Success\"")
    }

    @Test("nothing to write succeeds without touching the descriptor")
    func emptyWrite() throws {
        try [UInt8]().withUnsafeBytes { try writeAll($0, to: -1) }
    }
}
