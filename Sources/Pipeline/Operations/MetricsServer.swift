import Runner
import Dispatch
import Foundation
import Logging
import Synchronization

/// A deliberately small HTTP/1.1 endpoint for `/metrics` (Prometheus text format) and the
/// health checks, on a thread of its own so that a slow scraper never stalls the pipeline:
/// `/health/live` (the worker's loops turn: what a restart fixes), `/health/ready` (it does its
/// work: brokers answer, partitions assigned, state back) and `/health`, the same as ready.
/// Anything else gets 404; connections are closed after one response.
///
/// The serving thread holds only the `Listener` (the socket and a stop flag), never the
/// server: the server can therefore be released, and releasing it stops it, like `stop()`.
public final class MetricsServer: Sendable {
    let port: Int
    private let listener: Listener

    /// - Parameters:
    ///   - host: the IPv4 address to listen on, in dotted form (`0.0.0.0`: every interface).
    ///   - port: 0 picks a free port (see `port`).
    ///   - metrics: renders the Prometheus exposition text.
    ///   - health: for each check, nil when it passes, else the reason (served as 503).
    public init(
        host: String = "0.0.0.0", port: Int, logger: Logger, metrics: @escaping @Sendable () -> [UInt8],
        health: @escaping @Sendable (HealthCheck) -> String?
    ) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        // Without this check an unparsable host left the address zeroed: the server listened on
        // every interface while the operator believed it was bound to one.
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            throw PipelineError.configuration(
                "metrics server: \"\(host)\" is not an IPv4 address; write one in dotted form, like 0.0.0.0 (every interface) or 127.0.0.1 (this machine only); host names are not looked up")
        }
        guard (0...65535).contains(port) else {
            throw PipelineError.configuration("metrics server: port \(port) is out of range; use 1 to 65535, or 0 for any free port")
        }
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PipelineError.configuration("metrics server: socket() failed: errno \(errno)") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let code = errno
            close(fd)
            throw PipelineError.configuration(Self.cannotListen(host: host, port: port, errno: code))
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        let listener = Listener(fd: fd, logger: logger)
        self.listener = listener
        let thread = Thread { listener.serve(metrics: metrics, health: health) }
        thread.name = "trackpipe.metrics-server"
        thread.start()
    }

    /// Why the port could not be had, and what to do; `errno` named, not only numbered.
    static func cannotListen(host: String, port: Int, errno code: Int32) -> String {
        switch code {
        case EADDRINUSE:
            "metrics server: cannot listen on \(host):\(port): the address is already in use (another process, or another trackpipe, holds port \(port)). Choose another --metrics-port (TRACKPIPE_METRICS_PORT), stop what holds it (ss -ltnp 'sport = :\(port)' names it), or use 0 to turn the endpoint off"
        case EACCES:
            "metrics server: cannot listen on \(host):\(port): permission denied (ports below 1024 need privileges). Choose another --metrics-port (TRACKPIPE_METRICS_PORT) above 1023, or 0 to turn the endpoint off"
        default:
            "metrics server: cannot listen on \(host):\(port): \(String(cString: strerror(code))) (errno \(code)). Choose another --metrics-port (TRACKPIPE_METRICS_PORT), or 0 to turn the endpoint off"
        }
    }

    /// Stops listening and returns once the socket is closed (at most a few seconds, if a
    /// response is being written to a slow client): the port refuses connections from then on
    /// and can be bound again. Calling it again does nothing.
    public func stop() { listener.stop() }

    deinit { listener.stop() }
}

/// The two questions an orchestrator asks of a worker (Kubernetes' liveness and readiness).
public enum HealthCheck: Sendable {
    /// Are the worker's loops turning? A stuck loop or a deadlock fails it: restarting fixes
    /// those. Waiting for an unreachable cluster does not: a restart would wait the same.
    case live
    /// Is it doing its work? Brokers answer, partitions are assigned, state is back.
    case ready
}

/// The listening socket and the accept loop. Only the serving thread closes the socket, after
/// its loop has ended, so no `accept` can ever run on a descriptor number that was closed and
/// handed to something else in the meantime.
private final class Listener: Sendable {
    let fd: Int32
    private let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    /// The serving thread, so that a stop from inside a response does not wait for itself.
    private let servingThread = Atomic<UInt>(0)

    init(fd: Int32, logger: Logger) {
        self.fd = fd
        self.logger = logger
    }

    func stop() {
        guard !stopping.exchange(true, ordering: .sequentiallyConsistent) else { return }
        // On Linux, shutting a listening socket down takes it out of the listening state (new
        // connections are refused) and wakes the thread blocked in accept().
        shutdown(fd, Int32(SHUT_RDWR))
        if servingThread.load(ordering: .sequentiallyConsistent) != UInt(pthread_self()) { finished.wait() }
    }

    func serve(metrics: @Sendable () -> [UInt8], health: @Sendable (HealthCheck) -> String?) {
        servingThread.store(UInt(pthread_self()), ordering: .sequentiallyConsistent)
        defer {
            close(fd)
            finished.signal()
        }
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let client = accept(fd, nil, nil)
            if client < 0 {
                let code = errno
                if stopping.load(ordering: .sequentiallyConsistent) { return }
                // Out of descriptors: wait instead of spinning on the same error.
                if code == EMFILE || code == ENFILE {
                    logger.warning("metrics server: accept failed (errno \(code)): the process is out of file descriptors")
                    usleep(100_000)
                }
                continue
            }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            respond(to: client, metrics: metrics, health: health)
            close(client)
        }
    }

    private func respond(to client: Int32, metrics: () -> [UInt8], health: (HealthCheck) -> String?) {
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
        case ("GET", "/health"), ("GET", "/health/ready"), ("GET", "/health/live"):
            let check: HealthCheck = path == "/health/live" ? .live : .ready
            if let problem = health(check) {
                let word = check == .live ? "not live" : "not ready"
                response = ("503 Service Unavailable", "text/plain; charset=utf-8", Array("\(word): \(problem)\n".utf8))
            } else {
                response = ("200 OK", "text/plain; charset=utf-8", Array("ok\n".utf8))
            }
        default:
            response = ("404 Not Found", "text/plain; charset=utf-8", Array("not found: try /metrics, /health/live or /health/ready\n".utf8))
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
