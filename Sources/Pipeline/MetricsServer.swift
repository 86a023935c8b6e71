#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Dispatch
import Logging
import Synchronization

/// A deliberately small HTTP/1.1 endpoint for `/metrics` (Prometheus text format) and
/// `/health`, on a thread of its own so that a slow scraper never stalls the pipeline.
/// Anything else gets 404; connections are closed after one response.
public final class MetricsServer: Sendable {
    public let port: Int
    private let socketFD: Int32
    private let stopped = Atomic<Bool>(false)
    private let logger: Logger

    /// - Parameters:
    ///   - port: 0 picks a free port (see `port`).
    ///   - metrics: renders the Prometheus exposition text.
    ///   - health: nil when healthy, else the reason (served as 503).
    public init(
        host: String = "0.0.0.0", port: Int, logger: Logger, metrics: @escaping @Sendable () -> [UInt8],
        health: @escaping @Sendable () -> String?
    ) throws {
        self.logger = logger
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PipelineError.configuration("metrics server: socket() failed: errno \(errno)") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let code = errno
            close(fd)
            throw PipelineError.configuration(
                "metrics server: cannot listen on \(host):\(port) (errno \(code)); choose another --metrics-port or 0 to turn it off")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.socketFD = fd
        let thread = DispatchQueue(label: "trackpipe.metrics-server")
        thread.async { [self] in serve(metrics: metrics, health: health) }
    }

    public func stop() {
        guard !stopped.exchange(true, ordering: .sequentiallyConsistent) else { return }
        shutdown(socketFD, Int32(SHUT_RDWR))
        close(socketFD)
    }

    deinit { stop() }

    private func serve(metrics: @Sendable () -> [UInt8], health: @Sendable () -> String?) {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(socketFD, nil, nil)
            if client < 0 {
                if stopped.load(ordering: .relaxed) { return }
                continue
            }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            respond(to: client, metrics: metrics, health: health)
            close(client)
        }
    }

    private func respond(to client: Int32, metrics: () -> [UInt8], health: () -> String?) {
        var request = [UInt8](repeating: 0, count: 4096)
        let count = request.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return }
        let line = String(decoding: request[0..<count].prefix(while: { $0 != 13 && $0 != 10 }), as: UTF8.self)
        let parts = line.split(separator: " ")
        let path = parts.count >= 2 ? String(parts[1].split(separator: "?").first ?? "") : ""
        let response: (status: String, type: String, body: [UInt8])
        switch (parts.first, path) {
        case ("GET", "/metrics"):
            response = ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics())
        case ("GET", "/health"):
            if let problem = health() {
                response = ("503 Service Unavailable", "text/plain; charset=utf-8", Array("unhealthy: \(problem)\n".utf8))
            } else {
                response = ("200 OK", "text/plain; charset=utf-8", Array("ok\n".utf8))
            }
        default:
            response = ("404 Not Found", "text/plain; charset=utf-8", Array("not found: try /metrics or /health\n".utf8))
        }
        let head = "HTTP/1.1 \(response.status)\r\nContent-Type: \(response.type)\r\nContent-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
        send(all: Array(head.utf8) + response.body, to: client)
    }

    private func send(all bytes: [UInt8], to client: Int32) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }
}
