import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A listening TCP socket on an IPv4 or IPv6 address (port 0 picks a free port).
///
/// Shared by the simulators: the HTTP/2 simulator takes non-blocking sockets for its poll
/// loops, the binary gateway and feedback servers blocking ones for their threads.
/// ``accept()`` blocks; ``close()`` from another thread wakes it (it then returns `nil`).
final class SocketListener: @unchecked Sendable {
    /// How ``SocketListener/accept()`` hands out connections.
    enum AcceptedSockets {
        /// Blocking sockets (for a thread per connection with blocking I/O).
        case blocking
        /// Non-blocking sockets (for a poll loop).
        case nonBlocking
    }

    let fd: Int32
    /// The bound port (the kernel's choice when asked for 0).
    let port: Int
    let host: String
    private let accepted: AcceptedSockets
    private let closed = Atomic<Bool>(false)
    private let released = Atomic<Bool>(false)

    /// Binds and listens. - Throws: naming the address, the failing call and what to do.
    init(host: String, port: Int, backlog: Int32, accepted: AcceptedSockets) throws(SimulatorSetupError) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let family: Int32
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            family = AF_INET
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            family = AF_INET6
        } else {
            throw SimulatorSetupError("cannot listen on \"\(host)\": not an IP address (use 127.0.0.1 or ::1)")
        }
        guard (0...65535).contains(port) else { throw SimulatorSetupError("port \(port) is out of range 0–65535") }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SimulatorSetupError("socket() failed: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc: Int32
        if family == AF_INET {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            rc = withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        } else {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            rc = withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
        guard rc == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw SimulatorSetupError("cannot listen on \(host):\(port): \(reason); choose another --port (0 picks a free one)")
        }
        guard listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw SimulatorSetupError("listen() on \(host):\(port) failed: \(reason); choose another --port (0 picks a free one)")
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            getsockname(fd, $0, &length) } }
        let bound: UInt16 = withUnsafePointer(to: &storage) { p in
            family == AF_INET
                ? p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
                : p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
        }
        self.fd = fd
        self.port = Int(bound)
        self.host = host
        self.accepted = accepted
    }

    /// Waits for a connection; returns its socket (close-on-exec, TCP_NODELAY, and non-blocking
    /// when the listener was made with ``AcceptedSockets/nonBlocking``), or `nil` once closed.
    func accept() -> Int32? {
        while !closed.load(ordering: .acquiring) {
            let client = Glibc.accept(fd, nil, nil)
            if client >= 0 {
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                if accepted == .nonBlocking { _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK) }
                var one: Int32 = 1
                setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                return client
            }
            switch errno {
            case EINTR, ECONNABORTED, EPROTO: continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: usleep(10_000); continue
            default: return nil
            }
        }
        return nil
    }

    /// Stops accepting: wakes a blocked ``accept()``, which then returns `nil`.
    func close() {
        guard closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Releases the port; call from the accepting thread once ``accept()`` returned `nil`
    /// (so the descriptor is never closed under a running `accept`).
    func release() {
        close()
        guard released.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        Glibc.close(fd)
    }

    deinit { release() }
}
