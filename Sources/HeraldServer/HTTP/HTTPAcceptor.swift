internal import CLinux
internal import CMicroHTTPD
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// Accepts the ``HTTPServer``'s connections on a thread of its own and hands them to
/// libmicrohttpd, taking health probes (`GET /healthz`, `GET /readyz`) out of the line on the way.
///
/// Why a thread of its own: libmicrohttpd's poll thread accepts one connection per loop, and each
/// loop polls every connection and serves every ready one. In a reconnect storm (10,000 apps at
/// once) that costs O(N²), the listen backlog fills and the kernel drops SYNs (a second's wait
/// for each client whose SYN was dropped), and a `/healthz` that arrives waits behind loops that
/// serve thousands of requests each: a load balancer marks the node dead at the worst moment.
/// Here every waiting connection is accepted in one go (`accept` until `EAGAIN`), handed over
/// with `MHD_add_connection` (libmicrohttpd takes every queued connection in one loop), and a
/// connection whose first bytes are a whole probe is given to the server's ``serve`` closure,
/// which answers it without waiting for the poll thread.
///
/// A connection whose first bytes have not arrived at accept waits here at most
/// ``firstBytesGrace`` before it is handed over anyway (then `server.headerTimeout` runs as for
/// any connection): only a probe can be answered here, and nothing else waits.
///
/// - Important: a probe is answered exactly as the server thread would answer it (the same
///   handlers, counted in `herald_http_requests_total`); its connection, when kept alive, is
///   handed over after the answer and carries its next requests through libmicrohttpd.
final class HTTPAcceptor: @unchecked Sendable {
    /// A request read whole from a new connection's first bytes, answered here.
    struct Probe {
        var method: String
        /// The target in origin form (path and query, still percent-encoded).
        var target: String
        /// Header names lower-cased.
        var headers: [String: String]
        /// The bytes of the request line and headers (taken from the socket once answered).
        var length: Int
        /// HTTP/1.1 without `Connection: close`.
        var keepAlive: Bool
    }

    /// How long a new connection may stay here waiting for its first bytes.
    static let firstBytesGrace = 0.02
    /// How long accepting pauses when the process is out of descriptors.
    static let descriptorPause = 0.1

    private let listener: Int32
    private let epfd: Int32
    private let wakeFD: Int32
    /// Guarded by the thread (only it touches them once started).
    private var pending: [Int32: (address: sockaddr_storage, length: socklen_t, since: Double)] = [:]
    /// Out of descriptors: the listening socket is left out of the epoll set until then (it stays
    /// readable, and a level-triggered wake per loop would spin a core), and the kernel's backlog
    /// keeps the connections meanwhile.
    private var pausedUntil: Double?
    private let lock = ConditionLock()
    private var running = false
    private var stopping = false

    /// Whether a new connection from an address may be taken (the per-address limit).
    private let admits: (UnsafePointer<sockaddr>) -> Bool
    /// Which method and path are answered here when read whole.
    private let isProbe: (String, String) -> Bool
    /// Answers a probe whose bytes were taken from the socket, and owns the connection from then on
    /// (writes the answer, then hands the connection over or closes it).
    private let serve: (Probe, Int32, sockaddr_storage, socklen_t) -> Void
    /// Hands a connection to libmicrohttpd; `afterProbe`: it was answered once here already.
    private let handOff: (Int32, UnsafePointer<sockaddr>, socklen_t, _ afterProbe: Bool) -> Void

    /// Takes `listener` (a listening, non-blocking socket) and closes it in ``stop()``.
    init(listener: Int32, admits: @escaping (UnsafePointer<sockaddr>) -> Bool, isProbe: @escaping (String, String) -> Bool,
         serve: @escaping (Probe, Int32, sockaddr_storage, socklen_t) -> Void,
         handOff: @escaping (Int32, UnsafePointer<sockaddr>, socklen_t, Bool) -> Void) throws(HTTPServerError) {
        self.listener = listener
        self.admits = admits
        self.isProbe = isProbe
        self.serve = serve
        self.handOff = handOff
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = herald_eventfd()
        guard epfd >= 0, wakeFD >= 0 else {
            let reason = String(cString: strerror(errno))
            if epfd >= 0 { close(epfd) }
            if wakeFD >= 0 { close(wakeFD) }
            throw HTTPServerError(message: "cannot watch the listening socket: \(reason)")
        }
        var wake = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: UInt64(UInt32(bitPattern: wakeFD))))
        epoll_ctl(epfd, EPOLL_CTL_ADD, wakeFD, &wake)
        var listen = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: UInt64(UInt32(bitPattern: listener))))
        epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &listen)
    }

    deinit {
        close(epfd)
        close(wakeFD)
    }

    /// Starts the thread.
    func start() {
        lock.withLock { running = true }
        OSThread.start(name: "herald-accept", stackSize: 256 * 1024) { [self] in run() }
    }

    /// Stops accepting: the thread exits, the connections waiting here are closed, and so is the
    /// listening socket (no connection is accepted after this returns).
    func stop() {
        lock.withLock {
            guard running else { return }
            stopping = true
            herald_eventfd_signal(wakeFD)
            while running { lock.wait() }
        }
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        var peek = [UInt8](repeating: 0, count: 4096)
        while true {
            var timeout: Int32 = pending.isEmpty ? -1 : Int32(Self.firstBytesGrace * 1000) + 1
            if pausedUntil != nil { timeout = timeout < 0 ? Int32(Self.descriptorPause * 1000) : min(timeout, Int32(Self.descriptorPause * 1000)) }
            let n = events.withUnsafeMutableBufferPointer { epoll_wait(epfd, $0.baseAddress, Int32($0.count), timeout) }
            if n < 0 && errno != EINTR { break }
            if lock.withLock({ stopping }) { break }
            for e in events.prefix(Int(max(0, n))) {
                let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: e.data.u64))
                if fd == wakeFD {
                    herald_eventfd_drain(wakeFD)
                } else if fd == listener {
                    acceptAll(&peek)
                } else if let waiting = pending.removeValue(forKey: fd) {
                    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
                    examine(fd, waiting.address, waiting.length, &peek, first: false)
                }
            }
            // Connections whose first bytes did not come within the grace go on unexamined.
            let now = Self.now()
            if let until = pausedUntil, now >= until {
                pausedUntil = nil
                var listen = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: UInt64(UInt32(bitPattern: listener))))
                epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &listen)
                acceptAll(&peek)
            }
            for (fd, waiting) in pending where now - waiting.since >= Self.firstBytesGrace {
                pending[fd] = nil
                epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
                give(fd, waiting.address, waiting.length, afterProbe: false)
            }
        }
        for (fd, _) in pending { close(fd) }
        pending = [:]
        close(listener)
        lock.withLock {
            running = false
            lock.broadcast()
        }
    }

    /// Accepts every connection waiting in the backlog.
    private func acceptAll(_ peek: inout [UInt8]) {
        while true {
            var address = sockaddr_storage()
            var length = socklen_t(0)
            let fd = herald_accept(listener, &address, &length)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM, pausedUntil == nil {
                    // Out of descriptors: try again a little later (see `pausedUntil`).
                    epoll_ctl(epfd, EPOLL_CTL_DEL, listener, nil)
                    pausedUntil = Self.now() + Self.descriptorPause
                }
                // EAGAIN: drained.
                return
            }
            let admitted = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { admits($0) } }
            guard admitted else {
                close(fd)
                continue
            }
            examine(fd, address, length, &peek, first: true)
        }
    }

    /// Answers a whole probe in the connection's first bytes; else hands the connection over (or,
    /// on its first look with no byte yet, keeps it for up to the grace).
    private func examine(_ fd: Int32, _ address: sockaddr_storage, _ length: socklen_t, _ peek: inout [UInt8], first: Bool) {
        let n = peek.withUnsafeMutableBytes { herald_peek(fd, $0.baseAddress, $0.count) }
        if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && first {
            var event = epoll_event(events: EPOLLIN.rawValue | herald_epoll_hangup_events(), data: epoll_data_t(u64: UInt64(UInt32(bitPattern: fd))))
            if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 {
                pending[fd] = (address, length, Self.now())
                return
            }
        }
        if n == 0 {
            // Closed before a byte: nothing to serve.
            close(fd)
            return
        }
        if n > 0, let probe = Self.probe(peek[0..<n], isProbe: isProbe) {
            // Take the request's bytes (peeked: they are there), then the server answers it.
            var taken = 0
            while taken < probe.length {
                let r = peek.withUnsafeMutableBytes { recv(fd, $0.baseAddress, min($0.count, probe.length - taken), Int32(MSG_DONTWAIT)) }
                if r <= 0 { break }
                taken += r
            }
            guard taken == probe.length else {
                close(fd)
                return
            }
            serve(probe, fd, address, length)
            return
        }
        give(fd, address, length, afterProbe: false)
    }

    private func give(_ fd: Int32, _ address: sockaddr_storage, _ length: socklen_t, afterProbe: Bool) {
        var address = address
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { handOff(fd, $0, length, afterProbe) } }
    }

    /// The probe that `bytes` hold whole: a request line whose method and path `isProbe` takes,
    /// headers up to the blank line, and no body (`Content-Length` other than 0, or
    /// `Transfer-Encoding`); `nil` for anything else (the server thread reads it).
    static func probe(_ bytes: ArraySlice<UInt8>, isProbe: (String, String) -> Bool) -> Probe? {
        guard let end = bytes.firstRange(of: [13, 10, 13, 10]) else { return nil }
        let head = bytes[bytes.startIndex..<end.lowerBound]
        // Only printable ASCII, spaces, tabs and line breaks (anything else: the server's parser says what is wrong).
        guard head.allSatisfy({ ($0 >= 0x20 && $0 < 0x7f) || $0 == 13 || $0 == 10 || $0 == 9 }) else { return nil }
        let lines = head.split(separator: 10, omittingEmptySubsequences: false).map { line in
            line.last == 13 ? line.dropLast() : line[...]
        }
        let parts = lines[0].split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].first == UInt8(ascii: "/") else { return nil }
        let version = String(decoding: parts[2], as: UTF8.self)
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else { return nil }
        let method = String(decoding: parts[0], as: UTF8.self)
        let target = String(decoding: parts[1], as: UTF8.self)
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? target
        guard isProbe(method, path) else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            // A folded line or a line without a colon: the server thread's parser refuses it.
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), line.first != 0x20, line.first != 9, colon > line.startIndex else { return nil }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self).lowercased()
            guard !name.contains(" "), !name.contains("\t"), headers[name] == nil else { return nil }
            headers[name] = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: " \t")
        }
        if headers["transfer-encoding"] != nil { return nil }
        if let length = headers["content-length"], length != "0" { return nil }
        let connection = headers["connection"]?.lowercased() ?? ""
        let keepAlive = version == "HTTP/1.1" ? !connection.contains("close") : connection.contains("keep-alive")
        return Probe(method: method, target: target, headers: headers, length: end.upperBound - bytes.startIndex, keepAlive: keepAlive && version == "HTTP/1.1")
    }

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}

private extension String {
    func trimmingCharacters(in set: String) -> String {
        let isTrimmed: (Character) -> Bool = { set.contains($0) }
        return String(drop(while: isTrimmed).reversed().drop(while: isTrimmed).reversed())
    }
}
