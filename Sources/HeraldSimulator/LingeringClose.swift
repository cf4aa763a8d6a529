#if canImport(Glibc)
import Glibc
#endif

/// A lingering close: after our last bytes, send FIN and read (and discard) what the client
/// still sends, for up to `seconds`, before closing. Closing a socket with unread input makes
/// the kernel send RST, and an RST can destroy answers still on their way to the client.
///
/// Shared by the simulators: the HTTP/2 simulator after GOAWAY, the binary servers after an
/// error response or the feedback list.
enum LingeringClose {
    /// Shuts down writing on `fd` (a duplicate of the connection's socket), drains, closes it.
    static func finish(_ fd: Int32, seconds: Double = 1) {
        guard fd >= 0 else { return }
        drain(fd, seconds: seconds)
        _ = Glibc.close(fd)
    }

    /// Shuts down writing on `fd`, then reads and discards until the client's FIN, an error, or
    /// `seconds`; leaves `fd` open (for callers that must unregister it before closing).
    static func drain(_ fd: Int32, seconds: Double) {
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        func milliseconds() -> Int64 {
            var t = timespec()
            clock_gettime(CLOCK_MONOTONIC, &t)
            return Int64(t.tv_sec) * 1000 + Int64(t.tv_nsec) / 1_000_000
        }
        let end = milliseconds() + Int64(seconds * 1000)
        while true {
            let left = end - milliseconds()
            if left <= 0 { break }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let rc = poll(&p, 1, Int32(min(left, 100)))
            if rc < 0 && errno != EINTR { break }
            guard rc > 0 else { continue }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n == 0 { break }  // the client's FIN: everything it will read, it has
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { break }
        }
    }
}
