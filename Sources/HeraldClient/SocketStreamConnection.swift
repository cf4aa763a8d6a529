#if os(Linux)
import Foundation
import FoundationNetworking
import Glibc

/// One `GET /v1/stream` request over `http` on a socket of its own, read by a thread of its own
/// (the Linux transport of the stream; Apple platforms use ``URLSessionStreamConnection``).
///
/// FoundationNetworking's `URLSession` (libcurl) sometimes kept a cancelled stream's socket open
/// while other sessions opened and closed in the process, so the server went on counting the app
/// as in the foreground. Here the connection owns its socket: ``close()`` wakes the reading
/// thread through a pipe, the thread closes the socket (the server sees the FIN at once) and
/// ends, and ``close()`` returns after that. The request line and headers are the request's;
/// the response is read by ``HTTPResponseReader`` (chunked, `Content-Length` or until the end)
/// and handed on as ``StreamPiece``s.
///
/// `@unchecked Sendable`: the descriptors are set in `init` and closed after the thread ended;
/// the rest is behind a lock.
final class SocketStreamConnection: StreamConnection, @unchecked Sendable {
    let pieces: AsyncThrowingStream<StreamPiece, any Error>
    private let continuation: AsyncThrowingStream<StreamPiece, any Error>.Continuation
    private let request: URLRequest
    private let idleTimeout: TimeInterval
    /// The wake pipe: ``close()`` writes to `wake[1]`, the thread polls `wake[0]`.
    private let wake: (Int32, Int32)

    private struct State {
        var started = false
        var closing = false
    }
    private let state = Locked(State())
    /// Opens when the reading thread has closed the socket and ends.
    private let finished = Latch()

    /// Whether this transport serves `request` (plain `http`; `https` needs TLS, which URLSession brings).
    static func serves(_ request: URLRequest) -> Bool { request.url?.scheme?.lowercased() == "http" }

    /// - Parameter idleTimeout: the longest silence (no byte, not even a heartbeat) before the
    ///   connection counts as dead; also the bound on connecting.
    init(request: URLRequest, idleTimeout: TimeInterval) {
        (pieces, continuation) = AsyncThrowingStream.makeStream(of: StreamPiece.self, throwing: (any Error).self, bufferingPolicy: .unbounded)
        self.request = request
        self.idleTimeout = idleTimeout
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            }
        } else {
            fds = [-1, -1]
        }
        wake = (fds[0], fds[1])
    }

    /// Starts the reading thread, which connects and sends the request.
    func start() {
        let go: Bool = state.withLock { s in
            guard !s.started, !s.closing else { return false }
            s.started = true
            return true
        }
        guard go else { return }
        let thread = Thread { [self] in
            do throws(HeraldClientError) {
                try run()
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
            finished.open()
        }
        thread.name = "herald.client.stream"
        thread.start()
    }

    /// Closes the connection and returns once its socket is closed and its thread has ended.
    func close() async {
        let started: Bool = state.withLock { s in
            s.closing = true
            return s.started
        }
        if started {
            var byte: UInt8 = 1
            _ = Glibc.write(wake.1, &byte, 1)
            await finished.wait()
        } else {
            continuation.finish()
        }
        let (r, w) = wake
        if r >= 0 { Glibc.close(r) }
        if w >= 0 { Glibc.close(w) }
    }

    // MARK: The reading thread

    /// Ends with the response's end (or ``close()``, which is not an error); throws why it broke.
    private func run() throws(HeraldClientError) {
        guard wake.0 >= 0 else { throw .transport("cannot make a pipe: \(String(cString: strerror(errno)))") }
        guard let url = request.url, let host = url.host, !host.isEmpty else { throw .transport("the server URL has no host") }
        let port = url.port ?? 80
        guard let fd = try connect(host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: port) else { return }
        defer { Glibc.close(fd) }
        guard try send(Self.requestBytes(request, url: url), on: fd) else { return }
        var reader = HTTPResponseReader()
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            guard try waitFor(fd, events: Int16(POLLIN), timeout: idleTimeout, what: "timed out (no byte within the timeout)") else { return }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
                throw .transport(errno == ECONNRESET ? "the connection was lost (reset by the server)" : "cannot read: \(String(cString: strerror(errno)))")
            }
            let outputs: [HTTPResponseReader.Output]
            do throws(HTTPResponseReader.Malformed) { outputs = n == 0 ? try reader.finish() : try reader.feed(buffer[0..<n]) } catch {
                throw .transport(error.description)
            }
            for output in outputs {
                switch output {
                case .head(let status, let headers): continuation.yield(.response(status: status, headers: headers))
                case .body(let data): continuation.yield(.bytes(data))
                case .end: return
                }
            }
        }
    }

    /// A connected non-blocking socket to `host:port` (each address in turn); `nil` when
    /// ``close()`` came first.
    private func connect(host: String, port: Int) throws(HeraldClientError) -> Int32? {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let found = getaddrinfo(host, String(port), &hints, &list)
        guard found == 0, let first = list else {
            throw .transport("cannot find the server's host: \(String(cString: gai_strerror(found)))")
        }
        defer { freeaddrinfo(first) }
        var problem = "cannot connect to the server"
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let ai = next {
            next = ai.pointee.ai_next
            let fd = socket(ai.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { continue }
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 { return fd }
            guard errno == EINPROGRESS else {
                problem = "cannot connect to the server: \(String(cString: strerror(errno)))"
                Glibc.close(fd)
                continue
            }
            let ready: Bool
            do throws(HeraldClientError) { ready = try waitFor(fd, events: Int16(POLLOUT), timeout: idleTimeout, what: "timed out (connecting)") } catch {
                Glibc.close(fd)
                throw error
            }
            guard ready else {
                Glibc.close(fd)
                return nil
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
            if error == 0 { return fd }
            problem = "cannot connect to the server: \(String(cString: strerror(error)))"
            Glibc.close(fd)
        }
        throw .transport(problem)
    }

    /// Writes all of `bytes`; `false` when ``close()`` came first.
    private func send(_ bytes: [UInt8], on fd: Int32) throws(HeraldClientError) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n >= 0 {
                sent += n
                continue
            }
            if errno == EINTR { continue }
            guard errno == EAGAIN || errno == EWOULDBLOCK else { throw .transport("cannot send the request: \(String(cString: strerror(errno)))") }
            guard try waitFor(fd, events: Int16(POLLOUT), timeout: idleTimeout, what: "timed out (sending the request)") else { return false }
        }
        return true
    }

    /// Waits until `fd` is ready for `events`; `false` when ``close()`` woke the thread.
    /// - Throws: ``HeraldClientError/transport(_:)`` with `what` when `timeout` passes first.
    private func waitFor(_ fd: Int32, events: Int16, timeout: TimeInterval, what: String) throws(HeraldClientError) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if state.withLock({ $0.closing }) { return false }
            var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: wake.0, events: Int16(POLLIN), revents: 0)]
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { throw .transport(what) }
            let r = poll(&fds, 2, Int32(min(left * 1000 + 1, Double(Int32.max))))
            if r < 0 {
                if errno == EINTR { continue }
                throw .transport("poll: \(String(cString: strerror(errno)))")
            }
            if fds[1].revents != 0 { return false }
            // Errors and hang-ups are read (or reported by SO_ERROR) by the caller.
            if fds[0].revents != 0 { return true }
        }
    }

    /// `GET <path?query> HTTP/1.1` with the request's headers, `Host`, and `Connection: close`.
    static func requestBytes(_ request: URLRequest, url: URL) -> [UInt8] {
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var target = components?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = components?.percentEncodedQuery { target += "?" + query }
        var host = url.host ?? ""
        if host.contains(":") && !host.hasPrefix("[") { host = "[\(host)]" }
        if let port = url.port { host += ":\(port)" }
        var text = "\(request.httpMethod ?? "GET") \(target) HTTP/1.1\r\nHost: \(host)\r\n"
        for (name, value) in (request.allHTTPHeaderFields ?? [:]).sorted(by: { $0.key < $1.key })
        where !["host", "connection", "content-length"].contains(name.lowercased()) {
            // No CR or LF may reach the wire from a header value.
            let clean = value.filter { $0 != "\r" && $0 != "\n" }
            text += "\(name): \(clean)\r\n"
        }
        text += "Connection: close\r\n\r\n"
        return Array(text.utf8)
    }
}
#endif
