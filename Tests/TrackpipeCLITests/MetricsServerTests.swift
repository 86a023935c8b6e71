import Foundation
import Logging
@testable import Pipeline
@testable import Runner
import Testing

@Suite("metrics server: its address and its lifetime")
struct MetricsServerTests {
    func makeServer(host: String = "127.0.0.1", port: Int = 0) throws -> MetricsServer {
        try MetricsServer(host: host, port: port, logger: Logger(label: "test"), metrics: { Array("up 1\n".utf8) }, health: { _ in nil })
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(INADDR_LOOPBACK).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    @Test("a host that is not an IPv4 address is refused with what to write instead, never bound as 0.0.0.0")
    func invalidHost() throws {
        for host in ["localhost", "999.1.1.1", "", "127.0.0.1 ", "::1", "10.0.0"] {
            do {
                let server = try makeServer(host: host)
                server.stop()
                Issue.record("\"\(host)\" was accepted")
            } catch let error as PipelineError {
                let text = "\(error)"
                #expect(text.contains("\"\(host)\" is not an IPv4 address"), "\(text)")
                #expect(text.contains("like 0.0.0.0 (every interface) or 127.0.0.1"), "\(text)")
            }
        }
        #expect(throws: PipelineError.self) { try makeServer(port: 70_000) }
        let server = try makeServer(host: "127.0.0.1")
        defer { server.stop() }
        #expect(try HTTPGet.fetch(port: server.port, path: "/health").status == 200)
    }

    @Test("a server released without stop() is deinitialized, and its port refuses connections from then on")
    func releasedServerCloses() throws {
        weak var released: MetricsServer?
        var port = 0
        do {
            let server = try makeServer()
            released = server
            port = server.port
            #expect(try HTTPGet.fetch(port: port, path: "/metrics").body == "up 1\n", "it served before")
        }
        #expect(released == nil, "the serving thread must not keep the server alive")
        #expect(!accepts(port: port), "port \(port) still accepts connections")
    }

    @Test("stop() closes the port before it returns; the port can be bound again; stopping twice is harmless")
    func stopCloses() throws {
        let server = try makeServer()
        let port = server.port
        #expect(accepts(port: port))
        server.stop()
        #expect(!accepts(port: port))
        server.stop()
        let again = try makeServer(port: port)
        defer { again.stop() }
        #expect(try HTTPGet.fetch(port: port, path: "/health").body == "ok\n")
    }
}
