import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a simulator could not start or serve.
public struct BinarySimulatorError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// A blocking TCP listening socket (IPv4 or IPv6 literal host), for the binary gateway and feedback servers.
///
/// ``accept()`` blocks; ``close()`` from another thread wakes it (it then returns `nil`).
final class BinaryTCPListener: Sendable {
    let fd: Int32
    /// The bound port (the kernel's choice when asked for 0).
    let port: Int
    let host: String

    init(host: String, port: Int, backlog: Int32 = 128) throws(BinarySimulatorError) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let family: Int32
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            family = AF_INET
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            family = AF_INET6
        } else {
            throw BinarySimulatorError("cannot listen on \"\(host)\": give an IP address such as 127.0.0.1")
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BinarySimulatorError("socket() failed: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        if family == AF_INET {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(truncatingIfNeeded: port)).bigEndian
            bound = withUnsafePointer(to: &v4) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        } else {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(truncatingIfNeeded: port)).bigEndian
            bound = withUnsafePointer(to: &v6) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        guard bound == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw BinarySimulatorError("cannot listen on \(host):\(port): \(reason); choose another --port (0 picks a free one)")
        }
        guard listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw BinarySimulatorError("listen() on \(host):\(port) failed: \(reason)")
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let actual: UInt16 = withUnsafePointer(to: &storage) { pointer in
            if family == AF_INET {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            }
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
        }
        self.fd = fd
        self.port = Int(actual)
        self.host = host
    }

    /// Blocks for the next connection; `nil` once the listener is closed.
    func accept() -> Int32? {
        while true {
            let client = Glibc.accept(fd, nil, nil)
            if client >= 0 {
                var one: Int32 = 1
                setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                return client
            }
            if errno == EINTR || errno == ECONNABORTED { continue }
            return nil
        }
    }

    /// Wakes a blocked ``accept()``. The accepting thread closes the descriptor when it leaves.
    func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    func close() { Glibc.close(fd) }
}

/// Socket helpers shared by the binary servers.
enum BinarySocket {
    /// Sets (or, with 0, clears) the receive timeout of `fd`.
    static func setReceiveTimeout(_ fd: Int32, seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Half-closes the sending side, so the peer reads EOF after what was written.
    static func shutdownWrite(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Wakes any thread blocked on `fd` (used by `stop()`).
    static func shutdownBoth(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    /// Reads and throws away what the peer still sends, until EOF or `seconds` pass, so closing
    /// does not reset the connection (a reset can destroy the error response in flight).
    static func drain(_ fd: Int32, seconds: Double) {
        setReceiveTimeout(fd, seconds: 0.2)
        let end = Date().addingTimeInterval(seconds)
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        while Date() < end {
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return }
        }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }
}
