import FoundationEssentials
import Glibc
internal import COpenSSL

/// Blocking TLS client connections, for tests and the binary-protocol transport.
public enum TLSClient {
    /// Connects over TCP to `host:port`, runs the TLS handshake and returns the connection with
    /// its socket in blocking mode (no read timeout) and TCP_NODELAY set.
    /// - Parameters:
    ///   - host: an IPv4/IPv6 literal (brackets allowed) or a name; every resolved address is tried.
    ///   - timeout: limit for connecting plus handshaking (name resolution is not bounded by it).
    /// - Throws: `.connectionFailed` when no TCP connection could be made in time, `.tls` when the
    ///   handshake failed (e.g. the server certificate failed verification).
    public static func connect(host: String, port: Int, context: TLSClientContext,
                               timeout: TimeInterval) throws(CryptoError) -> TLSConnection {
        let deadline = ContinuousClock.now + .milliseconds(Int64(max(0, timeout) * 1000))
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let endpoint = name.contains(":") ? "[\(name)]:\(port)" : "\(name):\(port)"
        let fd = try connectTCP(host: name, port: port, endpoint: endpoint, deadline: deadline)

        let connection: TLSConnection
        do {
            connection = try TLSConnection.client(fd: fd, context: context, serverName: name)
        } catch {
            close(fd)
            throw error
        }
        while true {
            switch connection.handshake() {
            case .bytes:
                _ = setNonBlocking(fd, false)
                return connection
            case let want where want == .wantRead || want == .wantWrite:
                let events = Int16(want == .wantWrite ? POLLOUT : POLLIN)
                guard waitFor(fd, events: events, until: deadline) else {
                    connection.shutdown()
                    throw CryptoError(.connectionFailed("timed out"),
                                      "TLS handshake with \(endpoint) timed out after \(timeout) s")
                }
            case .closed:
                connection.shutdown()
                throw CryptoError(.tls("closed"), "TLS handshake with \(endpoint) failed: the server closed the connection")
            case .failed(let reason):
                connection.shutdown()
                throw CryptoError(.tls(reason), "TLS handshake with \(endpoint) failed: \(reason)")
            default:
                connection.shutdown()
                throw CryptoError(.tls("unexpected"), "TLS handshake with \(endpoint) failed")
            }
        }
    }

    /// A non-blocking TCP socket connected to one of `host`'s addresses.
    private static func connectTCP(host: String, port: Int, endpoint: String,
                                   deadline: ContinuousClock.Instant) throws(CryptoError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = isIPAddress(host) ? AI_NUMERICHOST : AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            let reason = String(cString: gai_strerror(status))
            throw CryptoError(.connectionFailed("name resolution"), "cannot resolve \(host): \(reason)")
        }
        defer { freeaddrinfo(list) }

        var lastError = "no addresses"
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let info = cursor?.pointee {
            cursor = info.ai_next
            let fd = socket(info.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = String(cString: strerror(errno)); continue }
            guard setNonBlocking(fd, true) else { lastError = String(cString: strerror(errno)); close(fd); continue }
            var r = Glibc.connect(fd, info.ai_addr, info.ai_addrlen)
            if r != 0, errno == EINPROGRESS {
                if waitFor(fd, events: Int16(POLLOUT), until: deadline) {
                    var soError: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length)
                    r = soError == 0 ? 0 : -1
                    if soError != 0 { lastError = String(cString: strerror(soError)) }
                } else {
                    lastError = "timed out"
                }
            } else if r != 0 {
                lastError = String(cString: strerror(errno))
            }
            if r == 0 {
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                return fd
            }
            close(fd)
            if ContinuousClock.now >= deadline { break }
        }
        throw CryptoError(.connectionFailed(lastError), "cannot connect to \(endpoint): \(lastError)")
    }

    /// Waits for `events` on `fd` until `deadline`; false on timeout.
    private static func waitFor(_ fd: Int32, events: Int16, until deadline: ContinuousClock.Instant) -> Bool {
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return false }
            let ms = Int32(min(Int64(Int32.max), remaining.components.seconds * 1000
                               + remaining.components.attoseconds / 1_000_000_000_000_000 + 1))
            var poller = pollfd(fd: fd, events: events, revents: 0)
            let r = poll(&poller, 1, ms)
            if r > 0 { return true }  // ready, or an error the next call will report
            if r < 0, errno != EINTR { return true }
        }
    }

    private static func setNonBlocking(_ fd: Int32, _ on: Bool) -> Bool {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { return false }
        return fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) == 0
    }
}
