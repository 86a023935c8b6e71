import Foundation

/// A loopback port nobody listens on, for a worker's `--metrics-port`.
///
/// The kernel picks it (a bind to port 0), so it is free when asked, and, unlike a port drawn at
/// random, not one an outgoing connection holds: a random port in the ephemeral range (32768 and
/// up on Linux) collided with one of the many broker connections of a busy machine, and the worker
/// then exited 64 on a taken port.
package enum LoopbackPort {
    package static func free() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("no socket for finding a free port: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(INADDR_LOOPBACK).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw BenchError("no free loopback port: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
