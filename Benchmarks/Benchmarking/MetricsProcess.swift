import Foundation

/// A `trackpipe run` with a metrics port, read while it runs.
package final class MetricsProcess {
    package let process: Process
    package let port: Int

    package init(binary: String, arguments: [String]) throws {
        port = try LoopbackPort.free()
        process = BenchSupport.process(binary, arguments + ["--metrics-port", "\(port)"])
        try process.run()
    }

    package struct Metrics {
        package var text: String

        /// The first series of `name` with `stage="…"` among its labels; 0 when absent.
        package func value(_ name: String, stage: String) -> Double {
            for line in text.split(separator: "\n") where line.hasPrefix(name + "{") && line.contains("stage=\"\(stage)\"") {
                return Double(line.split(separator: " ").last ?? "") ?? 0
            }
            return 0
        }

        package func has(_ name: String, stage: String) -> Bool {
            text.split(separator: "\n").contains { $0.hasPrefix(name + "{") && $0.contains("stage=\"\(stage)\"") }
        }
    }

    /// GET /metrics over a plain socket (Foundation on Linux reads no http URL by itself).
    package func metrics() throws -> Metrics {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw BenchError("the metrics port does not answer yet") }
        let request = Array("GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            response += chunk[0..<count]
        }
        return Metrics(text: String(decoding: response, as: UTF8.self))
    }

    package func waitUntil(timeoutSeconds: Double, _ condition: (Metrics) -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while Date() < deadline {
            guard process.isRunning else { throw BenchError("trackpipe exited (status \(process.terminationStatus))") }
            if let metrics = try? metrics(), condition(metrics) { return }
            usleep(200_000)
        }
        throw BenchError("the worker did not get there within \(Int(timeoutSeconds)) s")
    }

    package func kill() {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
