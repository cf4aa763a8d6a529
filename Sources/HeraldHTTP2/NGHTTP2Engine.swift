internal import CLinux  // epoll
internal import CNGHTTP2
import Dispatch
import FoundationEssentials
import HeraldCore
import HeraldCrypto
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection through libnghttp2's session API on OpenSSL (``TLSConnection``),
/// driven by epoll on the engine's own thread.
///
/// Each loop turn reads everything the socket has into the session (`nghttp2_session_mem_recv`),
/// starts waiting requests, then writes everything the session produced in one batch
/// (`nghttp2_session_mem_send`, one TLS write). Streams (``NGStream``), header arrays
/// (``NGHeaderShape``) and the I/O buffers are reused from request to request.
///
/// The rules are ``EngineCore``'s, shared with ``CurlEngine``: one stream until the connection
/// answers (with `singleStreamUntilFirstAnswer`), then up to `maxConcurrentStreams` and the
/// server's SETTINGS_MAX_CONCURRENT_STREAMS;
/// after GOAWAY the streams above its last-stream-id are taken back and sent again on the next
/// connection, the answered ones never; on a drop every unanswered request is taken back; a
/// reset stream, or one past its deadline while the connection answers others, is retried
/// alone. A connection that answers nothing is probed with PING and closed when the PING goes
/// unanswered; an idle one is closed after `idleTimeout`.
final class NGHTTP2Engine: EngineCore, HTTP2ConnectionEngine, @unchecked Sendable {
    enum Phase { case closed, connecting, proxy, handshake, open }

    let tls: TLSClientContext
    let authority: String
    let proxy: ProxyTunnel?
    /// Nanoseconds without a byte from the server after which an open connection is sent a PING (`pingInterval`).
    let pingAfter: UInt64

    // Connection (engine thread).
    var phase = Phase.closed
    var fd: Int32 = -1
    var connection: TLSConnection?
    var session: OpaquePointer?
    var epollMask: UInt32 = 0
    var connectDeadline: UInt64 = 0
    var openedAt: UInt64 = 0
    var lastReceiveAt: UInt64 = 0
    var pingDeadline: UInt64?
    /// The server sent GOAWAY: no new streams; streams above `goAwayLastStream` come back refused.
    var goingAway = false
    var goAwayLastStream: Int32 = .max
    var wantsWritable = false
    var proxyProgress = 0

    // Streams (engine thread).
    /// Streams begun on the current connection (submitted or waiting for it to open).
    var streams: [NGStream] = []
    var unsent: [NGStream] = []
    var spare: [NGStream] = []
    var shapes: [ShapeKey: NGHeaderShape] = [:]
    var lastShape: NGHeaderShape?
    /// Requests refused this turn (above GOAWAY's last-stream-id): taken back together.
    var refused: [(request: PendingRequest, wasOnIt: Bool)] = []
    var loneFailuresSinceAnswer = 0
    var lastLoneFailure = ""
    /// The earliest deadline of a request on the connection (monotonic nanoseconds).
    var nextDeadline: UInt64 = .max
    /// Run the next loop turn without waiting (more to read, or requests taken back).
    var immediate = false

    let inBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    var outBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    var outStart = 0
    var outEnd = 0
    let callbacks: OpaquePointer
    let options: OpaquePointer

    override init(settings: ClientSettings, index: Int) throws(HTTP2ClientError) {
        let c = settings.configuration
        do {
            tls = try TLSClientContext(caFile: c.caFile, identity: c.clientIdentity, alpn: ["h2"])
        } catch {
            throw .tls("\(error)")
        }
        authority = c.authority
        pingAfter = UInt64(max(0.01, c.pingInterval) * 1e9)
        if let text = c.proxy {
            guard let tunnel = ProxyTunnel(text, to: authority) else {
                throw .unsupportedProxy(ProxyTunnel.unsupported(text))
            }
            proxy = tunnel
        } else {
            proxy = nil
        }
        var callbacks: OpaquePointer?
        var options: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks, nghttp2_option_new(&options) == 0, let options else {
            throw .resources("cannot allocate nghttp2 callbacks")
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, NGHTTP2Callbacks.onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, NGHTTP2Callbacks.onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, NGHTTP2Callbacks.onFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, NGHTTP2Callbacks.onStreamClose)
        // No closed streams kept for the priority tree (no priorities are sent; it costs CPU per stream).
        nghttp2_option_set_no_closed_streams(options, 1)
        if c.singleStreamUntilFirstAnswer {
            // Before the server's SETTINGS arrive, assume one stream (APNs' rule on a new connection).
            nghttp2_option_set_peer_max_concurrent_streams(options, 1)
        }
        self.callbacks = callbacks
        self.options = options
        try super.init(settings: settings, index: index)
    }

    deinit {
        closeConnection()
        nghttp2_session_callbacks_del(callbacks)
        nghttp2_option_del(options)
        inBuffer.deallocate()
        outBuffer.deallocate()
    }

    func start() {
        startThread { [self] in self.run() }
    }

    override var streamLimit: Int {
        if goingAway { return 0 }
        let single = settings.configuration.singleStreamUntilFirstAnswer
        guard warm || !single else { return 1 }
        guard let session else { return single ? 1 : settings.configuration.maxConcurrentStreams }
        return min(settings.configuration.maxConcurrentStreams, Int(herald_h2_remote_max_streams(session)))
    }

    // MARK: Event loop

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 8)
        while true {
            turn &+= 1
            let n = epoll_wait(epfd, &events, Int32(events.count), timeoutMilliseconds(now: Self.monotonic()))
            immediate = false
            if n > 0 {
                for i in 0..<Int(n) {
                    if events[i].data.fd == wakeFD { takeInbox() } else { socketReady(events[i].events) }
                }
            }
            if phase == .open && connection?.hasBufferedData == true { readAvailable() }
            checkTimers(now: Self.monotonic())
            endTurn()
            startWaiting()
            pump(now: Self.monotonic())
            endTurn()
            if shouldEnd() { break }
        }
        abandonAll(reason: "transport \(settings.name) shut down before an answer")
    }

    func timeoutMilliseconds(now: UInt64) -> Int32 {
        if immediate { return 0 }
        var until = now + 1_000_000_000
        until = min(until, nextDeadline)
        switch phase {
        case .connecting, .proxy, .handshake: until = min(until, connectDeadline)
        case .open:
            if let pingDeadline { until = min(until, pingDeadline) } else { until = min(until, lastReceiveAt &+ pingAfter) }
            if streams.isEmpty { until = min(until, max(lastDoneAt, openedAt) &+ idleNanoseconds) }
        case .closed: break
        }
        if waitingCount > 0 { until = min(until, max(pausedUntil, now) + 50_000_000) }
        return until <= now ? 0 : Int32(min((until - now + 999_999) / 1_000_000, 1000))
    }

    /// Takes back what was refused this turn, as one burst.
    func endTurn() {
        guard !refused.isEmpty else { return }
        let taken = refused
        refused.removeAll(keepingCapacity: true)
        takeBack(taken, message: lastError.isEmpty ? "the server refused the stream (GOAWAY)" : lastError)
        immediate = true
    }

    // MARK: Requests

    override func begin(_ r: PendingRequest, now: UInt64) {
        let stream = spare.popLast() ?? NGStream()
        let shape = shape(for: r.shapeKey)
        shape.inUse += 1
        stream.prepare(r, shape: shape)
        r.startedAt = now
        stream.slot = streams.count
        streams.append(stream)
        unsent.append(stream)
        nextDeadline = min(nextDeadline, now + timeoutNanoseconds)
        inFlight += 1
        settings.metrics.inFlight.add(1)
    }

    func shape(for key: ShapeKey) -> NGHeaderShape {
        // A campaign sends one shape after another: compare with the last one before hashing the
        // key (arrays that share storage compare at once; hashing reads every header, a JWT too).
        if let last = lastShape, last.key == key { return last }
        if let s = shapes[key] { lastShape = s; return s }
        if shapes.count > 256 {
            for (k, s) in shapes where s.inUse == 0 { shapes[k] = nil }
        }
        let s = NGHeaderShape(key, authority: authority)
        shapes[key] = s
        lastShape = s
        return s
    }

    /// Opens a connection for requests begun without one; submits them once it is open; writes.
    func pump(now: UInt64) {
        if phase == .closed && !unsent.isEmpty { openConnection(now: now) }
        guard phase == .open, let session else { return }
        if !unsent.isEmpty {
            for stream in unsent where stream.request != nil {
                let me = Unmanaged.passUnretained(stream).toOpaque()
                let id = herald_h2_submit_request(session, stream.nva, stream.nvCount, NGHTTP2Callbacks.readBody, me, me)
                if id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
                    // Stream ids used up (after about a billion requests): a new connection takes them.
                    lastError = "cannot open a stream: \(String(cString: nghttp2_strerror(id)))"
                    refused.append((stream.request!, false))
                    release(stream)
                    goingAway = true
                    continue
                }
                if id < 0 {
                    // The request itself cannot be sent (nghttp2 refused its headers): never will be.
                    let r = stream.request!
                    release(stream)
                    finish(r, .failed(.invalidRequest(String(cString: nghttp2_strerror(id)))))
                    continue
                }
                stream.streamID = id
            }
            unsent.removeAll(keepingCapacity: true)
        }
        flush()
    }

    /// Removes `stream` from the connection's list and recycles it; its request, if still
    /// bound, is the caller's to complete (and no longer counts as in flight).
    func release(_ stream: NGStream) {
        if stream.request != nil {
            stream.request = nil
            inFlight -= 1
            settings.metrics.inFlight.add(-1)
        }
        if stream.slot >= 0 {
            let last = streams.removeLast()
            if last !== stream {
                streams[stream.slot] = last
                last.slot = stream.slot
            }
            stream.slot = -1
        }
        stream.shape?.inUse -= 1
        stream.shape = nil
        spare.append(stream)
    }

    /// Called by nghttp2 when a stream closed (answered, reset, refused).
    func streamClosed(_ stream: NGStream, errorCode: UInt32) {
        guard stream.slot >= 0 else { return }
        guard let r = stream.request else { release(stream); return }
        let now = Self.monotonic()
        lastDoneAt = now
        let status = stream.status
        let id = stream.streamID
        if errorCode == NGHTTP2_NO_ERROR.rawValue && status != 0 {
            let body = stream.body, headers = stream.headers
            release(stream)
            loneFailuresSinceAnswer = 0
            answered(r, status: status, headers: headers, body: body, now: now)
            return
        }
        release(stream)
        if goingAway && id > goAwayLastStream {
            // Never processed (GOAWAY's last-stream-id is lower): sent again on the next connection.
            refused.append((r, true))
            return
        }
        let message = errorCode == NGHTTP2_NO_ERROR.rawValue
            ? "the stream closed without an answer"
            : "the server reset the stream (RST_STREAM \(String(cString: nghttp2_http2_strerror(errorCode))))"
        if warm {
            // The connection and its other streams carry on; only this request goes again.
            loneFailuresSinceAnswer += 1
            lastLoneFailure = message
        } else {
            noteConnectionFailure(now: now, message: message)
        }
        retryOrFinish(r, now: now, failure: .noAnswer(reason: "no answer: \(message)"))
    }

    /// Requests past their deadline. One on a connection that answered others since it started
    /// failed alone: its stream is cancelled and it goes again. When the connection answered
    /// nothing meanwhile, it failed: every request on it is taken back, and a PING asks whether
    /// the connection is still alive.
    func checkTimers(now: UInt64) {
        switch phase {
        case .connecting, .proxy, .handshake:
            if now >= connectDeadline {
                let seconds = settings.configuration.connectTimeout
                connectionFailed("cannot connect to \(settings.configuration.authority): "
                                 + "timed out after \(seconds >= 1 ? "\(Int(seconds)) s" : "\(Int(seconds * 1000)) ms") (connectTimeout)")
                return
            }
        case .open:
            if goingAway && streams.isEmpty {
                // Nothing left to finish on a connection that takes no new streams.
                closeConnection(graceful: true)
                warm = false
                return
            }
            if let deadline = pingDeadline, now >= deadline {
                connectionFailed("the connection did not answer a PING within \(timeoutText)")
                return
            }
            if pingDeadline == nil && now &- lastReceiveAt >= pingAfter { ping(now: now) }
            if streams.isEmpty && waitingCount == 0 && now &- max(lastDoneAt, openedAt) >= idleNanoseconds {
                // Idle past `idleTimeout`: closed; the next request opens a new connection.
                closeConnection(graceful: true)
                warm = false
                return
            }
        case .closed: break
        }
        guard now >= nextDeadline else { return }
        nextDeadline = .max
        let limit = timeoutNanoseconds
        var silent = false
        var i = 0
        while i < streams.count {
            let stream = streams[i]
            guard let r = stream.request else { i += 1; continue }
            let due = r.startedAt + limit
            guard due <= now else { nextDeadline = min(nextDeadline, due); i += 1; continue }
            if lastAnswerAt > r.startedAt && stream.streamID > 0, let session {
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.streamID, NGHTTP2_CANCEL.rawValue)
                stream.request = nil
                inFlight -= 1
                settings.metrics.inFlight.add(-1)
                loneFailuresSinceAnswer += 1
                lastLoneFailure = timedOutMessage
                retryOrFinish(r, now: now, failure: .noAnswer(reason: "no answer: \(timedOutMessage)"))
                i += 1
            } else {
                silent = true
                i += 1
            }
        }
        guard silent else { return }
        if phase == .open {
            // Cancel every stream and take its request back; the connection stays while it answers PING.
            var taken: [(request: PendingRequest, wasOnIt: Bool)] = []
            for stream in streams {
                guard let r = stream.request else { continue }
                if stream.streamID > 0, let session {
                    nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream.streamID, NGHTTP2_CANCEL.rawValue)
                }
                taken.append((r, true))
                stream.request = nil
                inFlight -= 1
                settings.metrics.inFlight.add(-1)
            }
            for stream in unsent where stream.slot >= 0 { release(stream) }
            unsent.removeAll(keepingCapacity: true)
            warm = false
            if pingDeadline == nil { ping(now: now) }
            lastError = timedOutMessage
            takeBack(taken, message: timedOutMessage)
            immediate = true
        } else {
            connectionFailed(timedOutMessage)
        }
    }

    var timedOutMessage: String { "the request timed out after \(timeoutText)" }

    func ping(now: UInt64) {
        guard let session else { return }
        if herald_h2_submit_ping(session) == 0 { pingDeadline = now + timeoutNanoseconds }
    }

    /// Shutdown: fails what is queued and what is in flight, and closes the connection.
    func abandonAll(reason: String) {
        abandonWaiting(reason: reason)
        for stream in streams {
            if let r = stream.request { finish(r, .noAnswer(reason: reason)) }
        }
        closeConnection(graceful: true)
    }
}

/// The nghttp2 callbacks: capture nothing; the engine comes through `user_data` and each
/// stream through its stream user data, both borrowed.
enum NGHTTP2Callbacks {
    @inline(__always)
    static func engine(_ userData: UnsafeMutableRawPointer?) -> NGHTTP2Engine {
        Unmanaged<NGHTTP2Engine>.fromOpaque(userData!).takeUnretainedValue()
    }

    @inline(__always)
    static func stream(_ session: OpaquePointer?, _ id: Int32) -> NGStream? {
        guard let raw = nghttp2_session_get_stream_user_data(session, id) else { return nil }
        return Unmanaged<NGStream>.fromOpaque(raw).takeUnretainedValue()
    }

    static let onHeader: nghttp2_on_header_callback = { session, frame, name, nameLength, value, valueLength, _, _ in
        guard let frame, herald_h2_is_response_headers(frame) != 0, let name, let value,
              let s = stream(session, herald_h2_frame_stream_id(frame)) else { return 0 }
        s.header(name: UnsafeBufferPointer(start: name, count: nameLength), value: UnsafeBufferPointer(start: value, count: valueLength))
        return 0
    }

    static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { session, _, id, data, length, _ in
        if let data, let s = stream(session, id) { s.append(UnsafeBufferPointer(start: data, count: length)) }
        return 0
    }

    static let onFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
        guard let frame else { return 0 }
        if herald_h2_is_goaway(frame) != 0 {
            engine(userData).goAway(lastStream: herald_h2_goaway_last_stream_id(frame), errorCode: herald_h2_goaway_error_code(frame))
        }
        return 0
    }

    static let onStreamClose: nghttp2_on_stream_close_callback = { session, id, errorCode, userData in
        if let s = stream(session, id) { engine(userData).streamClosed(s, errorCode: errorCode) }
        return 0
    }

    static let readBody: nghttp2_data_source_read_callback = { _, _, buffer, length, flags, source, _ in
        guard let buffer, let raw = source?.pointee.ptr else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let (n, done) = Unmanaged<NGStream>.fromOpaque(raw).takeUnretainedValue().readBody(into: buffer, length: length)
        if done { flags!.pointee |= herald_h2_data_flag_eof() }
        return n
    }
}
