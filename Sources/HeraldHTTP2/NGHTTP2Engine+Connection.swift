internal import CLinux  // epoll
internal import CNGHTTP2
import FoundationEssentials
import HeraldCore
import HeraldCrypto
#if canImport(Glibc)
import Glibc
#endif

/// The connection of an ``NGHTTP2Engine``: a non-blocking TCP connect (through an HTTP CONNECT
/// proxy when configured), the TLS handshake (ALPN `h2`, verification always on), the HTTP/2
/// session, reads and batched writes, and its end.
extension NGHTTP2Engine {
    var endpointText: String { "\(settings.configuration.host):\(settings.configuration.port)" }

    func openConnection(now: UInt64) {
        let c = settings.configuration
        let host = proxy?.host ?? c.host
        let port = proxy?.port ?? c.port
        connectDeadline = now + UInt64(c.connectTimeout * 1e9)
        goingAway = false
        goAwayLastStream = .max
        pingDeadline = nil
        proxyProgress = 0
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            connectionFailed("cannot resolve \(host): \(String(cString: gai_strerror(status)))")
            return
        }
        defer { freeaddrinfo(list) }
        var lastError = "no addresses"
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let info = cursor?.pointee {
            cursor = info.ai_next
            let s = socket(info.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard s >= 0 else { lastError = String(cString: strerror(errno)); continue }
            Self.setOption(s, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
            Self.setOption(s, SOL_SOCKET, SO_KEEPALIVE, 1)
            Self.setOption(s, Int32(IPPROTO_TCP), TCP_KEEPIDLE, 30)
            Self.setOption(s, Int32(IPPROTO_TCP), TCP_KEEPINTVL, 10)
            if Glibc.connect(s, info.ai_addr, info.ai_addrlen) == 0 || errno == EINPROGRESS {
                fd = s
                phase = .connecting
                watch(EPOLLOUT.rawValue)
                return
            }
            lastError = String(cString: strerror(errno))
            close(s)
        }
        connectionFailed("cannot connect to \(host):\(port): \(lastError)")
    }

    static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var v = value
        setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sets the epoll interest of the connection's socket (only when it changes).
    func watch(_ mask: UInt32) {
        guard fd >= 0, mask != epollMask else { return }
        var event = epoll_event(events: mask, data: epoll_data_t(fd: fd))
        epoll_ctl(epfd, epollMask == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &event)
        epollMask = mask
    }

    func socketReady(_ events: UInt32) {
        switch phase {
        case .closed:
            return
        case .connecting:
            var soError: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length)
            if soError != 0 || events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
                let host = proxy.map { "the proxy \($0.host):\($0.port)" } ?? endpointText
                connectionFailed("cannot connect to \(host): \(String(cString: strerror(soError != 0 ? soError : ECONNREFUSED)))")
                return
            }
            if proxy != nil {
                phase = .proxy
                proxyStep()
            } else {
                startTLS()
            }
        case .proxy:
            proxyStep()
        case .handshake:
            handshake()
        case .open:
            if events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { readAvailable() }
            if events & EPOLLOUT.rawValue != 0 { wantsWritable = false }
        }
    }

    /// Sends the CONNECT request, then reads the proxy's answer up to its blank line.
    func proxyStep() {
        guard let proxy else { return }
        while proxyProgress < proxy.request.count {
            let n = proxy.request.withUnsafeBytes { send(fd, $0.baseAddress! + proxyProgress, $0.count - proxyProgress, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EAGAIN { watch(EPOLLOUT.rawValue); return }
                connectionFailed("the proxy \(proxy.host):\(proxy.port) failed: \(String(cString: strerror(errno)))")
                return
            }
            proxyProgress += n
        }
        watch(EPOLLIN.rawValue)
        // Peek, then consume exactly the answer's head: what follows is the server's TLS.
        let peeked = recv(fd, inBuffer.baseAddress, inBuffer.count, Int32(MSG_PEEK))
        if peeked < 0 && errno == EAGAIN { return }
        guard peeked > 0 else {
            connectionFailed("the proxy \(proxy.host):\(proxy.port) closed the connection before answering CONNECT")
            return
        }
        let bytes = UnsafeRawBufferPointer(start: inBuffer.baseAddress, count: peeked)
        guard let end = ProxyTunnel.headEnd(bytes) else {
            if peeked == inBuffer.count { connectionFailed("the proxy's answer to CONNECT is too long") }
            return  // the rest of the head is still coming
        }
        _ = recv(fd, inBuffer.baseAddress, end, 0)
        let head = String(decoding: bytes[..<end], as: UTF8.self)
        let statusLine = head.prefix { $0 != "\r" && $0 != "\n" }
        let code = statusLine.split(separator: " ").dropFirst().first
        guard let code, code.hasPrefix("2") else {
            connectionFailed("the proxy \(proxy.host):\(proxy.port) refused the tunnel to \(endpointText): \(statusLine)")
            return
        }
        startTLS()
    }

    func startTLS() {
        do {
            connection = try TLSConnection.client(fd: fd, context: tls, serverName: settings.configuration.host)
        } catch {
            connectionFailed("TLS with \(endpointText) failed: \(error)")
            return
        }
        phase = .handshake
        handshake()
    }

    func handshake() {
        guard let connection else { return }
        switch connection.handshake() {
        case .bytes:
            guard connection.negotiatedALPN == "h2" else {
                // As with libcurl without allowHTTP1: the requests fail for good.
                noteConnectionFailure(now: Self.monotonic(), message: "the server did not speak HTTP/2")
                for stream in streams {
                    if let r = stream.request {
                        finish(r, .failed(.noHTTP2(settings.configuration.origin)))
                    }
                }
                closeConnection()
                return
            }
            startSession()
        case .wantRead: watch(EPOLLIN.rawValue)
        case .wantWrite: watch(EPOLLOUT.rawValue)
        case .closed: connectionFailed("TLS handshake with \(endpointText) failed: the server closed the connection")
        case .failed(let why): connectionFailed("TLS handshake with \(endpointText) failed: \(why)")
        }
    }

    func startSession() {
        var s: OpaquePointer?
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_client_new2(&s, callbacks, me, options) == 0, let s, herald_h2_submit_client_settings(s) == 0 else {
            connectionFailed("cannot start an HTTP/2 session")
            return
        }
        session = s
        phase = .open
        let now = Self.monotonic()
        openedAt = now
        lastReceiveAt = now
        watch(EPOLLIN.rawValue)
        immediate = true  // submit what waits for the connection in this turn
    }

    /// Reads what the socket has into the session.
    func readAvailable() {
        for _ in 0..<16 {
            guard phase == .open, let connection, let session else { return }
            switch connection.read(into: inBuffer) {
            case .bytes(let n):
                lastReceiveAt = Self.monotonic()
                pingDeadline = nil
                let consumed = nghttp2_session_mem_recv(session, inBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
                if consumed < 0 {
                    connectionFailed("HTTP/2 protocol error: \(String(cString: nghttp2_strerror(Int32(consumed))))")
                    return
                }
            case .wantRead:
                return
            case .wantWrite:
                wantsWritable = true
                return
            case .closed:
                peerClosed()
                return
            case .failed(let why):
                connectionFailed("the connection failed: \(why)")
                return
            }
        }
        immediate = true  // more to read: next turn, after writing
    }

    /// Moves the session's output to the socket in one write per turn.
    func flush() {
        guard phase == .open, let session, let connection else { return }
        var capped = false
        while true {
            if outEnd >= 256 * 1024 { capped = true; break }
            var chunk: UnsafePointer<UInt8>? = nil
            let n = nghttp2_session_mem_send(session, &chunk)
            if n < 0 {
                connectionFailed("HTTP/2 error: \(String(cString: nghttp2_strerror(Int32(n))))")
                return
            }
            if n == 0 { break }
            if outEnd + n > outBuffer.count { growOutput(to: outEnd + n) }
            (outBuffer.baseAddress! + outEnd).copyMemory(from: chunk!, byteCount: n)
            outEnd += n
        }
        if phase != .open { return }  // a callback during mem_send ended the connection
        while outStart < outEnd {
            switch connection.write(UnsafeRawBufferPointer(rebasing: outBuffer[outStart..<outEnd])) {
            case .bytes(let n):
                outStart += n
            case .wantWrite:
                wantsWritable = true
                watch(EPOLLIN.rawValue | EPOLLOUT.rawValue)
                return
            case .wantRead:
                return
            case .closed:
                peerClosed()
                return
            case .failed(let why):
                connectionFailed("the connection failed: \(why)")
                return
            }
        }
        outStart = 0
        outEnd = 0
        wantsWritable = false
        if capped { immediate = true }  // more output waits: next turn, after reading
        watch(EPOLLIN.rawValue)
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            // After GOAWAY with nothing left in flight (or our own termination): done.
            closeConnection()
            warm = false
        }
    }

    func growOutput(to size: Int) {
        let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, outBuffer.count * 2), alignment: 16)
        bigger.baseAddress!.copyMemory(from: outBuffer.baseAddress! + outStart, byteCount: outEnd - outStart)
        outEnd -= outStart
        outStart = 0
        outBuffer.deallocate()
        outBuffer = bigger
    }

    func goAway(lastStream: Int32, errorCode: UInt32) {
        goingAway = true
        goAwayLastStream = lastStream
        warm = false
        lastError = "the server sent GOAWAY (\(String(cString: nghttp2_http2_strerror(errorCode))))"
    }

    /// The server closed the socket: requests still on it got no answer.
    func peerClosed() {
        if streams.contains(where: { $0.request != nil }) {
            connectionFailed(goingAway ? lastError : "the server closed the connection")
        } else {
            if loneFailuresSinceAnswer > 0 {
                // Streams that failed "alone" just before the connection closed: the connection failed.
                noteConnectionFailure(now: Self.monotonic(), message: lastLoneFailure)
            }
            closeConnection()
            warm = false
        }
    }

    /// The connection failed (connect, proxy, TLS, protocol, drop, silence): every request on it
    /// is taken back and the failure backs off (``EngineCore/takeBack(_:message:)``).
    func connectionFailed(_ message: String) {
        lastError = message
        var taken = refused
        refused.removeAll(keepingCapacity: true)
        for stream in streams {
            if let r = stream.request { taken.append((r, true)) }
        }
        closeConnection()
        warm = false
        loneFailuresSinceAnswer = 0
        if taken.isEmpty {
            settings.logger.info("\(settings.service) connection closed", ["error": message, "engine": String(index)])
        }
        takeBack(taken, message: message)
        immediate = true
    }

    /// Ends the connection: every stream is released (requests still bound are the caller's).
    func closeConnection(graceful: Bool = false) {
        // Requests still on the connection are no longer in flight on it.
        while let stream = streams.last {
            release(stream)
        }
        unsent.removeAll(keepingCapacity: true)
        if graceful, phase == .open, let session {
            nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR.rawValue)
            var chunk: UnsafePointer<UInt8>? = nil
            outStart = 0
            outEnd = 0
            while true {
                let n = nghttp2_session_mem_send(session, &chunk)
                if n <= 0 { break }
                _ = connection?.write(UnsafeRawBufferPointer(start: chunk, count: n))
            }
        }
        if let session { nghttp2_session_del(session) }
        session = nil
        if fd >= 0, epollMask != 0 { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil) }
        epollMask = 0
        if let connection {
            connection.shutdown()
        } else if fd >= 0 {
            close(fd)
        }
        connection = nil
        fd = -1
        phase = .closed
        goingAway = false
        goAwayLastStream = .max
        pingDeadline = nil
        outStart = 0
        outEnd = 0
        nextDeadline = .max
        immediate = true  // requests waiting (after GOAWAY, say) open the next connection now
    }
}
