import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// Runs a connection's TLS handshake on a non-blocking socket, polling it and the simulator's
/// stop pipe; shared by the HTTP/2 simulators' connections.
enum SocketHandshake {
    /// Advances `stream`'s handshake until it completes (`true`), fails, the peer closes, the
    /// simulator stops (its `stopRead` pipe is readable) or 10 s pass (`false`).
    static func run(_ stream: any SocketByteStream, fd: Int32, stopRead: Int32, logger: Logger, connection: Int) -> Bool {
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while true {
            switch stream.handshake() {
            case .bytes: return true
            case .wantRead: guard wait(fd, POLLIN, stopRead: stopRead, until: deadline) else { return false }
            case .wantWrite: guard wait(fd, POLLOUT, stopRead: stopRead, until: deadline) else { return false }
            case .closed: return false
            case .failed(let why):
                logger.info("TLS handshake failed", ["connection": String(connection), "error": why])
                return false
            }
        }
    }

    /// Waits until `fd` is ready for `event`; `false` on timeout or stop.
    private static func wait(_ fd: Int32, _ event: Int32, stopRead: Int32, until deadline: UInt64) -> Bool {
        let now = monotonicNanoseconds()
        guard now < deadline else { return false }
        var fds = [pollfd(fd: fd, events: Int16(event), revents: 0), pollfd(fd: stopRead, events: Int16(POLLIN), revents: 0)]
        let rc = poll(&fds, 2, Int32((deadline - now) / 1_000_000) + 1)
        if rc < 0 && errno == EINTR { return true }
        return rc > 0 && fds[1].revents == 0
    }

    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
