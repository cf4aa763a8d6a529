internal import CCurl
internal import CLinux  // epoll
import Dispatch
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection: a libcurl multi handle driven by `curl_multi_socket_action` and epoll
/// on its own thread, with reusable easy handles. With ``HTTP2ClientConfiguration/allowHTTP1``
/// and a server that offers no `h2`, up to ``HTTP2ClientConfiguration/maxHTTP1Connections``
/// HTTP/1.1 connections instead, one request on each at a time.
///
/// Requests queue here and start while fewer than `maxConcurrentStreams` are in flight (libcurl
/// also respects the server's SETTINGS_MAX_CONCURRENT_STREAMS: with one connection allowed,
/// extra transfers wait for a stream). A request that fails without an answer is sent again up
/// to `connectionRetries` times. When the connection failed (GOAWAY, a drop, TLS or protocol
/// errors, silence) every unanswered request is taken back and connection failures back off
/// exponentially, so an unreachable or flapping server is not hammered; when only its stream
/// failed (reset, or its deadline while the connection kept answering) only it is sent again.
final class CurlEngine: EngineCore, HTTP2ConnectionEngine, @unchecked Sendable {
    let multi: UnsafeMutableRawPointer

    // Engine-thread state.
    var idle: [EasyHandle] = []
    var all: [EasyHandle] = []
    var shapes: [ShapeKey: HeaderShape] = [:]
    var lastShape: HeaderShape?
    /// The server answered in HTTP/1.1 (allowHTTP1): one request per connection at a time.
    var http1 = false
    /// The sockets in the epoll set, with the events asked for.
    var watched: [Int32: UInt32] = [:]
    var curlTimerDeadline: UInt64? = nil
    /// libcurl closed a connection's socket during this loop turn.
    var socketClosed = false
    /// The local ports of connections that closed or failed during this loop turn: requests put
    /// on one of them (``EasyHandle/localPort``) went with it; others never were on it.
    var lostPorts: Set<Int> = []
    /// Requests that failed alone (see ``failedAlone(_:_:)``) since the last answer, and the last error.
    var loneFailuresSinceAnswer = 0
    var lastLoneFailure = ""
    /// A transfer failed its connection this turn: take back what is in flight.
    var pendingAbort = false
    /// The next request opens a new connection (the current one timed out without a word).
    var freshConnection = false

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    override init(settings: ClientSettings, index: Int) throws(HTTP2ClientError) {
        _ = Self.globalInit
        guard let multi = curl_multi_init() else { throw .resources("curl_multi_init failed") }
        self.multi = multi
        try super.init(settings: settings, index: index)

        let me = Unmanaged.passUnretained(self).toOpaque()
        herald_curl_multi_setopt_socket_callback(multi, curlSocketCallback)
        herald_curl_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, me)
        herald_curl_multi_setopt_timer_callback(multi, curlTimerCallback)
        herald_curl_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, me)
        herald_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        // One connection per engine: extra transfers wait for a free stream instead of opening
        // more. HTTP/1.1 (allowHTTP1) needs a connection per request in flight.
        let connections = settings.configuration.allowHTTP1 ? max(1, settings.configuration.maxHTTP1Connections) : 1
        herald_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, connections)
        herald_curl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, connections)
        herald_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, settings.configuration.maxConcurrentStreams)
    }

    deinit {
        for easy in all { curl_easy_cleanup(easy.handle) }
        curl_multi_cleanup(multi)
    }

    func start() {
        startThread { [self] in self.run() }
    }

    override var streamLimit: Int {
        guard http1 else { return super.streamLimit }
        return min(super.streamLimit, max(1, settings.configuration.maxHTTP1Connections))
    }

    // MARK: Event loop

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        var running: Int32 = 0
        while true {
            turn &+= 1
            let now = Self.monotonic()
            let n = epoll_wait(epfd, &events, Int32(events.count), timeoutMilliseconds(now: now))
            // Cork the connection while libcurl writes its many small frames (HEADERS, DATA,
            // RST_STREAM per request, each its own TLS record and send()), so the kernel sends
            // full segments once per loop turn instead of one packet per frame.
            setCork(true)
            defer { setCork(false) }
            if n > 0 {
                for i in 0..<Int(n) {
                    let fd = events[i].data.fd
                    if fd == wakeFD {
                        takeInbox()
                        continue
                    }
                    let e = events[i].events
                    var flags: Int32 = 0
                    if e & EPOLLIN.rawValue != 0 { flags |= CURL_CSELECT_IN }
                    if e & EPOLLOUT.rawValue != 0 { flags |= CURL_CSELECT_OUT }
                    if e & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { flags |= CURL_CSELECT_ERR }
                    curl_multi_socket_action(multi, fd, flags, &running)
                }
            }
            if let deadline = curlTimerDeadline, Self.monotonic() >= deadline {
                curlTimerDeadline = nil
                curl_multi_socket_action(multi, curl_socket_t(CURL_SOCKET_TIMEOUT), 0, &running)
            }
            drainCompleted()
            if socketClosed || pendingAbort {
                // Let libcurl finish streams whose answers it already read (it completes other
                // streams of a connection on its next timer run), then take back the rest.
                for _ in 0..<4 {
                    let before = inFlight
                    curl_multi_socket_action(multi, curl_socket_t(CURL_SOCKET_TIMEOUT), 0, &running)
                    drainCompleted()
                    if inFlight == before || inFlight == 0 { break }
                }
                let now = Self.monotonic()
                // A request libcurl had put on a connection that closed or failed: the connection
                // was lost under it. A close that took none (libcurl closing a connection idle past
                // `idleTimeout` as the next request opens a new one) is no failure.
                let lost = all.contains { $0.request != nil && $0.localPort != 0 && lostPorts.contains($0.localPort) }
                let idleClose = lastDoneAt != 0 && now &- lastDoneAt > idleNanoseconds
                if socketClosed && loneFailuresSinceAnswer > 0 && (lost || !idleClose) {
                    // Streams that failed "alone" just before the connection closed: the connection failed.
                    noteConnectionFailure(now: now, message: lastLoneFailure)
                }
                if socketClosed { loneFailuresSinceAnswer = 0 }
                let failed = pendingAbort || lost
                socketClosed = false
                pendingAbort = false
                if failed && inFlight > 0 {
                    connectionLost(message: lastError.isEmpty ? "the connection closed" : lastError)
                } else {
                    // The next connection is a new one: one stream until it answers.
                    warm = false
                }
                lostPorts.removeAll(keepingCapacity: true)
            }
            startWaiting()
            if shouldEnd() { break }
        }
        abandonAll(reason: "transport \(settings.name) shut down before an answer")
    }

    func setCork(_ on: Bool) {
        var value: Int32 = on ? 1 : 0
        for fd in watched.keys {
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_CORK, &value, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    func timeoutMilliseconds(now: UInt64) -> Int32 {
        var until: UInt64 = now + 1_000_000_000
        if let t = curlTimerDeadline { until = min(until, t) }
        if waitingCount > 0 {
            // Re-check paused or stream-starved queues, and their deadlines, regularly.
            until = min(until, max(pausedUntil, now) + 50_000_000)
        }
        return until <= now ? 0 : Int32(min((until - now + 999_999) / 1_000_000, 1000))
    }

    // MARK: Requests

    func shape(for key: ShapeKey) -> HeaderShape {
        // A campaign sends one shape after another: compare with the last one before hashing the
        // key (arrays that share storage compare at once; hashing reads every header).
        if let last = lastShape, last.key == key { return last }
        if let s = shapes[key] { lastShape = s; return s }
        if shapes.count > 256 {
            for (k, s) in shapes where s.inUse == 0 { shapes[k] = nil }
        }
        let s = HeaderShape(key)
        shapes[key] = s
        lastShape = s
        return s
    }

    override func begin(_ r: PendingRequest, now: UInt64) {
        let easy: EasyHandle
        if let reused = idle.popLast() {
            easy = reused
        } else {
            easy = EasyHandle(settings: settings, engine: Unmanaged.passUnretained(self).toOpaque())
            all.append(easy)
        }
        let shape = shape(for: r.shapeKey)
        shape.inUse += 1
        easy.prepare(request: r, shape: shape)
        easy.setFreshConnection(freshConnection)
        freshConnection = false
        r.startedAt = now
        inFlight += 1
        settings.metrics.inFlight.add(1)
        let rc = curl_multi_add_handle(multi, easy.handle)
        if rc != CURLM_OK {
            inFlight -= 1
            settings.metrics.inFlight.add(-1)
            shape.inUse -= 1
            easy.request = nil
            easy.shape = nil
            idle.append(easy)
            finish(r, .noAnswer(reason: "curl_multi_add_handle: \(String(cString: curl_multi_strerror(rc)))"))
        }
    }

    func drainCompleted() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            var privatePointer: UnsafeMutableRawPointer? = nil
            herald_curl_easy_getinfo_pointer(handle, CURLINFO_PRIVATE, &privatePointer)
            curl_multi_remove_handle(multi, handle)
            guard let privatePointer else { continue }
            let easy = Unmanaged<EasyHandle>.fromOpaque(privatePointer).takeUnretainedValue()
            lastDoneAt = Self.monotonic()
            inFlight -= 1
            settings.metrics.inFlight.add(-1)
            if let request = easy.request {
                completed(request, easy: easy, code: code)
            }
            easy.shape?.inUse -= 1
            easy.request = nil
            easy.shape = nil
            idle.append(easy)
        }
    }

    func completed(_ r: PendingRequest, easy: EasyHandle, code: CURLcode) {
        let now = Self.monotonic()
        if code == CURLE_OK {
            var status = 0
            herald_curl_easy_getinfo_long(easy.handle, CURLINFO_RESPONSE_CODE, &status)
            var version = 0
            herald_curl_easy_getinfo_long(easy.handle, CURLINFO_HTTP_VERSION, &version)
            if version != Int(CURL_HTTP_VERSION_2_0) {
                if !settings.configuration.allowHTTP1 {
                    noteConnectionFailure(now: now, message: "the server did not speak HTTP/2")
                    finish(r, .failed(.noHTTP2(settings.configuration.origin)))
                    return
                }
                http1 = true
            } else {
                http1 = false
            }
            loneFailuresSinceAnswer = 0
            answered(r, status: status, headers: easy.headers, body: easy.body, now: now)
            return
        }
        let message = easy.errorMessage(code)
        if failedAlone(code, r) {
            // The connection and its other streams carry on; only this request goes again.
            loneFailuresSinceAnswer += 1
            lastLoneFailure = message
        } else {
            noteConnectionFailure(now: now, message: message)
            pendingAbort = true
            if easy.localPort != 0 { lostPorts.insert(easy.localPort) }
            // A connection that answered nothing within the deadline may be dead without a close
            // (a middlebox dropped it): libcurl would keep using it, so the next request opens a
            // new one (the nghttp2 engine asks with PING instead).
            if code == CURLE_OPERATION_TIMEDOUT { freshConnection = true }
        }
        retryOrFinish(r, now: now, failure: .noAnswer(reason: "no answer: \(message) (curl error \(code.rawValue))"))
    }

    func abandonAll(reason: String) {
        abandonWaiting(reason: reason)
        // In-flight transfers: remove them from the multi handle and fail them.
        var left: Int32 = 0
        while curl_multi_info_read(multi, &left) != nil {}
        for easy in all where easy.request != nil {
            curl_multi_remove_handle(multi, easy.handle)
            if let r = easy.request { finish(r, .noAnswer(reason: reason)) }
            easy.shape?.inUse -= 1
            easy.request = nil
            easy.shape = nil
            idle.append(easy)
        }
    }

    // MARK: libcurl callbacks (engine thread)

    fileprivate func socketChanged(_ fd: Int32, what: Int32) {
        if what == CURL_POLL_REMOVE {
            if watched.removeValue(forKey: fd) != nil { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil) }
            return
        }
        var mask: UInt32 = 0
        if what & CURL_POLL_IN != 0 { mask |= EPOLLIN.rawValue }
        if what & CURL_POLL_OUT != 0 { mask |= EPOLLOUT.rawValue }
        var event = epoll_event(events: mask, data: epoll_data_t(fd: fd))
        if let current = watched[fd] {
            // libcurl repeats the same interest as transfers come and go on one connection.
            if current != mask {
                watched[fd] = mask
                if epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event) != 0 && errno == ENOENT {
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event)
                }
            }
        } else {
            watched[fd] = mask
            if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) != 0 && errno == EEXIST {
                epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event)
            }
        }
    }

    /// libcurl closes a connection: the next one must answer once before more streams go out.
    func socketClosing(_ fd: Int32) {
        if watched.removeValue(forKey: fd) != nil { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil) }
        socketClosed = true
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { return }
        let port: UInt16 = withUnsafeBytes(of: &address) { raw in
            // sin_port and sin6_port are both at offset 2, in network byte order.
            UInt16(raw[2]) << 8 | UInt16(raw[3])
        }
        if port != 0 { lostPorts.insert(Int(port)) }
    }

    fileprivate func timerChanged(_ milliseconds: Int) {
        curlTimerDeadline = milliseconds < 0 ? nil : Self.monotonic() + UInt64(milliseconds) * 1_000_000
    }

}

private let curlSocketCallback: herald_curl_socket_callback = { _, socket, what, userp, _ in
    guard let userp else { return 0 }
    Unmanaged<CurlEngine>.fromOpaque(userp).takeUnretainedValue().socketChanged(socket, what: what)
    return 0
}

private let curlTimerCallback: herald_curl_timer_callback = { _, timeout, userp in
    guard let userp else { return 0 }
    Unmanaged<CurlEngine>.fromOpaque(userp).takeUnretainedValue().timerChanged(timeout)
    return 0
}
