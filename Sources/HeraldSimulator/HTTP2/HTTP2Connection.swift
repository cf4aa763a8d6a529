internal import CNGHTTP2
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// One client connection: a thread running a poll loop that feeds bytes to an nghttp2 server
/// session (`nghttp2_session_mem_recv`) and writes what it produces (`nghttp2_session_mem_send`).
///
/// Everything here runs on the connection's own thread; only ``HTTP2ServerCore`` is shared.
final class HTTP2Connection: @unchecked Sendable {
    let id: Int
    /// The socket (owned and closed by ``stream``; used here only to poll).
    private let fd: Int32
    private let core: HTTP2ServerCore
    /// The core's token rules (`nil` with certificates), kept here so requests borrow them.
    private let authenticator: HTTP2TokenAuthenticator?
    private let validator = HTTP2RequestValidator()
    private let sandbox: Bool
    private let wantsNotifications: Bool
    private let stream: any SocketByteStream
    private var session: OpaquePointer?

    // Buffers.
    private let inBuffer: UnsafeMutableRawBufferPointer
    private var outBuffer: UnsafeMutableRawBufferPointer
    private var outStart = 0
    private var outEnd = 0
    private var needsWritable = false

    // Streams.
    private var pool: [HTTP2StreamContext] = []
    private var free: [HTTP2StreamContext] = []

    // Per-connection protocol state.
    private var auth = HTTP2TokenAuthState()
    private var topics = HTTP2TopicPolicy(required: true, allowed: [])
    private var raisedStreamLimit = false
    private var uuid = HTTP2UUIDGenerator()
    private var faults = HTTP2Faults()
    private var faultsVersion = -1
    private var faultsNeedBoard = false
    private var decided = 0
    private var answered = 0
    private var goAwayLastStream: Int32? = nil
    private var closeAfterFlush = false

    /// Responses held back by the latency fault, in deadline order.
    private var delayed: [(deadline: UInt64, context: HTTP2StreamContext, generation: UInt32)] = []
    private var delayedHead = 0

    init(id: Int, fd: Int32, stream: any SocketByteStream, core: HTTP2ServerCore) {
        self.id = id
        self.fd = fd
        self.stream = stream
        self.core = core
        authenticator = core.authenticator
        sandbox = core.sandbox
        wantsNotifications = core.recorder.wantsNotifications
        inBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        outBuffer = .allocate(byteCount: 256 * 1024, alignment: 16)
    }

    deinit {
        inBuffer.deallocate()
        outBuffer.deallocate()
    }

    // MARK: Thread entry

    /// Serves the connection until it closes or the simulator stops.
    /// - Important: the caller counts the connection with `core.connectionStarted()` first.
    func run() {
        var graceful = false
        defer {
            stream.close(graceful: graceful, linger: graceful && goAwayLastStream != nil)
            if let session { nghttp2_session_del(session) }
            session = nil
            core.recorder.flush()
            core.connectionEnded()
        }
        guard SocketHandshake.run(stream, fd: fd, stopRead: core.stopRead, logger: core.logger, connection: id) else { return }
        if core.usesTLS, stream.negotiatedALPN != "h2" {
            core.logger.info("closing a TLS connection that did not negotiate h2 with ALPN",
                             ["connection": String(id), "alpn": stream.negotiatedALPN ?? "none"])
            graceful = true
            return
        }
        topics = makeTopicPolicy()
        guard startSession() else { return }
        graceful = serve()
    }

    private func makeTopicPolicy() -> HTTP2TopicPolicy {
        if authenticator != nil { return HTTP2TopicPolicy(required: true, allowed: core.topics) }
        let topics = core.topics.isEmpty ? stream.peerTopics : core.topics
        // Apple's topics extension lists the bundle and its `.voip`/`.complication` topics;
        // `apns-topic` is required when there is more than one.
        var bundles: [String] = []
        for topic in topics {
            var bundle = topic
            for type in PushType.allCases where !type.topicSuffix.isEmpty && topic.hasSuffix(type.topicSuffix) {
                bundle = String(topic.dropLast(type.topicSuffix.count))
                break
            }
            if !bundles.contains(bundle) { bundles.append(bundle) }
        }
        return HTTP2TopicPolicy(required: topics.count != 1, allowed: bundles,
                                defaultBundle: topics.count == 1 ? bundles[0] : nil)
    }

    // MARK: nghttp2 session

    private func startSession() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, HTTP2Callbacks.onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, HTTP2Callbacks.onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, HTTP2Callbacks.onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, HTTP2Callbacks.onFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, HTTP2Callbacks.onStreamClose)

        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return false }
        defer { nghttp2_option_del(option) }
        // Clients such as curl 7.88 reset every finished stream; nghttp2's rapid-reset defence
        // would answer them with GOAWAY after ~1000 resets.
        nghttp2_option_set_stream_reset_rate_limit(option, 1 << 40, 1 << 40)
        // APNs ignores PRIORITY frames: keep no closed streams for the priority tree (it costs
        // CPU per stream with many streams in flight).
        nghttp2_option_set_no_closed_streams(option, 1)

        var s: OpaquePointer?
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_server_new2(&s, callbacks, me, option) == 0, let s else { return false }
        session = s
        let initial = authenticator != nil && core.singleStreamUntilAuthenticated ? 1 : core.maxConcurrentStreams
        raisedStreamLimit = initial == core.maxConcurrentStreams
        return herald_h2_submit_max_streams(s, initial) == 0
    }

    /// The poll loop; returns whether the connection ended gracefully (TLS close_notify is due).
    private func serve() -> Bool {
        var moreToRead = false
        while true {
            guard flush() else { return false }
            if closeAfterFlush && outStart == outEnd {
                core.recorder.closedAbruptly()
                return false
            }
            if let last = goAwayLastStream, outStart == outEnd, nghttp2_session_want_write(session) == 0,
               !hasDelayed(upTo: last) {
                return true
            }
            if outStart == outEnd, nghttp2_session_want_read(session) == 0, nghttp2_session_want_write(session) == 0 {
                return true
            }
            var timeout: Int32 = -1
            if moreToRead {
                timeout = 0
            } else if delayedHead < delayed.count {
                let now = HTTP2Connection.monotonicNanoseconds()
                let due = delayed[delayedHead].deadline
                timeout = due <= now ? 0 : Int32(min((due - now + 999_999) / 1_000_000, 60_000))
            }
            var fds = (pollfd(fd: fd, events: Int16(POLLIN) | (needsWritable ? Int16(POLLOUT) : 0), revents: 0),
                       pollfd(fd: core.stopRead, events: Int16(POLLIN), revents: 0))
            let rc = withUnsafeMutablePointer(to: &fds) {
                $0.withMemoryRebound(to: pollfd.self, capacity: 2) { poll($0, 2, timeout) }
            }
            if rc < 0 && errno != EINTR { return false }
            if fds.1.revents != 0 { return true }
            if moreToRead || fds.0.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                switch readAvailable() {
                case .closed: return false
                case .more: moreToRead = true
                case .drained: moreToRead = false
                }
            }
            submitDueResponses()
            core.recorder.flush()
        }
    }

    private enum ReadState { case drained, more, closed }

    /// Reads what the socket has (up to 1 MiB per turn) into the session.
    private func readAvailable() -> ReadState {
        for _ in 0..<16 {
            switch stream.read(into: inBuffer) {
            case .bytes(let n):
                let consumed = nghttp2_session_mem_recv(session, inBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
                if consumed < 0 {
                    core.logger.info("HTTP/2 protocol error", ["connection": String(id),
                                                                "error": String(cString: nghttp2_strerror(Int32(consumed)))])
                    _ = flush()
                    return .closed
                }
                if closeAfterFlush { return .drained }
            case .wantRead: return .drained
            case .wantWrite:
                needsWritable = true
                return .drained
            case .closed: return .closed
            case .failed(let why):
                core.logger.debug("connection read failed", ["connection": String(id), "error": why])
                return .closed
            }
        }
        return .more
    }

    /// Moves the session's output to the socket; `false` when the connection failed.
    private func flush() -> Bool {
        while true {
            while outEnd < outBuffer.count / 2 {
                var chunk: UnsafePointer<UInt8>? = nil
                let n = nghttp2_session_mem_send(session, &chunk)
                if n < 0 { return false }
                if n == 0 { break }
                if outEnd + n > outBuffer.count { growOutput(to: outEnd + n) }
                (outBuffer.baseAddress! + outEnd).copyMemory(from: chunk!, byteCount: n)
                outEnd += n
            }
            if outStart == outEnd {
                outStart = 0
                outEnd = 0
                needsWritable = false
                return true
            }
            switch stream.write(UnsafeRawBufferPointer(rebasing: outBuffer[outStart..<outEnd])) {
            case .bytes(let n):
                outStart += n
                if outStart == outEnd {
                    outStart = 0
                    outEnd = 0
                }
            case .wantWrite:
                needsWritable = true
                return true
            case .wantRead:
                needsWritable = false
                return true
            case .closed:
                return false
            case .failed(let why):
                core.logger.debug("connection write failed", ["connection": String(id), "error": why])
                return false
            }
        }
    }

    private func growOutput(to size: Int) {
        let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, outBuffer.count * 2), alignment: 16)
        bigger.baseAddress!.copyMemory(from: outBuffer.baseAddress! + outStart, byteCount: outEnd - outStart)
        outEnd -= outStart
        outStart = 0
        outBuffer.deallocate()
        outBuffer = bigger
    }

    // MARK: Streams (called from the nghttp2 callbacks)

    func beginStream(_ streamID: Int32) {
        let context: HTTP2StreamContext
        if let reused = free.popLast() {
            context = reused
        } else {
            context = HTTP2StreamContext()
            context.request.keepsAllHeaders = wantsNotifications
            pool.append(context)
        }
        context.reset(streamID: streamID)
        nghttp2_session_set_stream_user_data(session, streamID, Unmanaged.passUnretained(context).toOpaque())
    }

    func streamClosed(_ context: HTTP2StreamContext) {
        guard context.inUse else { return }
        context.inUse = false
        context.generation &+= 1
        free.append(context)
    }

    /// The request on `context` is complete: decide, record, and answer (now or after the latency).
    func requestComplete(_ context: HTTP2StreamContext) {
        refreshFaults()
        if let n = faults.goAwayAfterStreams, decided >= n { return }
        if let n = faults.closeAfterStreams, decided >= n { return }
        if goAwayLastStream != nil || closeAfterFlush { return }
        decided += 1

        let request = context.request
        var verdict: HTTP2Verdict
        if HTTP2BroadcastRules.isBroadcast(request) {
            verdict = core.broadcastRules.validate(request, topics: topics) { header in
                authenticator.flatMap { $0.authenticate(header, state: &auth) }
            }
            if authenticator != nil, !raisedStreamLimit && auth.isAuthenticated {
                raisedStreamLimit = true
                _ = herald_h2_submit_max_streams(session, core.maxConcurrentStreams)
            }
        } else if authenticator != nil {
            verdict = validator.validate(request, topics: topics) { header in
                authenticator!.authenticate(header, state: &auth)
            }
            if !raisedStreamLimit && auth.isAuthenticated {
                raisedStreamLimit = true
                _ = herald_h2_submit_max_streams(session, core.maxConcurrentStreams)
            }
        } else {
            verdict = validator.validate(request, topics: topics) { _ in nil }
        }
        if verdict.reason == nil, faultsNeedBoard, let range = verdict.token {
            let token = request.string(range).lowercased()
            if let streamFault = core.faults.streamFault(token: token) {
                switch streamFault {
                case .reset:
                    nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), context.streamID,
                                              NGHTTP2_INTERNAL_ERROR.rawValue)
                    core.recorder.streamReset()
                case .noAnswer:
                    core.recorder.leftUnanswered()
                }
                return
            }
            if let fault = core.faults.decide(token: token) {
                verdict.reason = fault.reason
                verdict.timestamp = fault.timestamp
            }
        }

        // The response.
        context.status = HTTP2StreamContext.statusText(verdict.status)
        context.isBroadcast = verdict.isBroadcast
        if verdict.echoesAPNsID, let range = request.valueRange(verdict.isBroadcast ? .apnsRequestID : .apnsID) {
            UnsafeMutableRawPointer(context.apnsID).copyMemory(from: request.bytes(range).baseAddress!, byteCount: 36)
        } else {
            uuid.write(to: context.apnsID)
        }
        if let reason = verdict.reason {
            // A response to HEAD must not carry a body (RFC 9110); everything else gets the JSON.
            if let method = request.value(.method), HTTP2RequestValidator.equals(method, "HEAD") {
                context.setNoBody()
            } else {
                context.setErrorBody(reason, timestamp: verdict.timestamp)
            }
            core.recorder.answered(reason, notification: nil)
        } else {
            if sandbox {
                context.hasUniqueID = true
                uuid.write(to: context.uniqueID)
            }
            if verdict.isBroadcast {
                core.channels.record(core.broadcastRules.broadcast(
                    request, requestID: HTTP2StreamContext.string(context.apnsID),
                    uniqueID: context.hasUniqueID ? HTTP2StreamContext.string(context.uniqueID) : nil, time: core.clock.now))
                core.recorder.answered(nil, notification: nil)
            } else {
                core.recorder.answered(nil, notification: wantsNotifications ? notification(context, verdict) : nil)
            }
        }

        if faults.latency > 0 {
            let deadline = HTTP2Connection.monotonicNanoseconds() + UInt64(faults.latency * 1_000_000_000)
            delayed.append((deadline, context, context.generation))
        } else {
            submit(context)
        }
    }

    private func notification(_ context: HTTP2StreamContext, _ verdict: HTTP2Verdict) -> ReceivedNotification {
        let request = context.request
        let headers = request.headerPairs.map { pair in
            ReceivedNotification.Header(name: pair.name, value: pair.name == "authorization" ? "<redacted>" : pair.value)
        }
        return ReceivedNotification(
            time: core.clock.now, connectionID: id, streamID: Int(context.streamID),
            deviceToken: verdict.token.map { request.string($0) } ?? "",
            topic: request.string(.apnsTopic).flatMap { $0.isEmpty ? nil : $0 } ?? verdict.defaultTopic ?? "",
            pushType: verdict.pushType,
            apnsID: HTTP2StreamContext.string(context.apnsID),
            uniqueID: context.hasUniqueID ? HTTP2StreamContext.string(context.uniqueID) : nil,
            headers: headers, payload: Array(request.body),
            keyID: auth.claims?.keyID, teamID: auth.claims?.teamID, tokenIssuedAt: auth.claims?.issuedAt)
    }

    private func submit(_ context: HTTP2StreamContext) {
        answered += 1
        if let n = faults.goAwayAfterStreams, answered == n {
            // GOAWAY goes out before this last answer, so the client sends nothing more here.
            let debug: StaticString = "{\"reason\":\"Shutdown\"}"
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), context.streamID,
                                  NGHTTP2_NO_ERROR.rawValue, debug.utf8Start, debug.utf8CodeUnitCount)
            goAwayLastStream = context.streamID
            core.recorder.goAwaySent()
        }
        let rc: Int32
        if context.isBroadcast {
            let name: StaticString = "apns-request-id"
            rc = name.withUTF8Buffer { n in
                n.withMemoryRebound(to: CChar.self) { n in
                    herald_h2_submit_apns_response_named(session, context.streamID, context.status.utf8Start, n.baseAddress, n.count,
                                                         context.apnsID, 36, context.hasUniqueID ? context.uniqueID : nil, 36,
                                                         context.hasBody ? HTTP2Callbacks.readBody : nil)
                }
            }
        } else {
            rc = herald_h2_submit_apns_response(session, context.streamID, context.status.utf8Start,
                                                context.apnsID, 36, context.hasUniqueID ? context.uniqueID : nil, 36,
                                                context.hasBody ? HTTP2Callbacks.readBody : nil)
        }
        if rc != 0 {
            core.logger.debug("cannot submit a response", ["connection": String(id), "stream": String(context.streamID),
                                                           "error": String(cString: nghttp2_strerror(rc))])
        }
        if let n = faults.closeAfterStreams, answered == n {
            closeAfterFlush = true
        }
    }

    private func submitDueResponses() {
        guard delayedHead < delayed.count else { return }
        let now = HTTP2Connection.monotonicNanoseconds()
        while delayedHead < delayed.count, delayed[delayedHead].deadline <= now {
            let entry = delayed[delayedHead]
            delayedHead += 1
            if entry.context.inUse && entry.context.generation == entry.generation { submit(entry.context) }
        }
        if delayedHead == delayed.count {
            delayed.removeAll(keepingCapacity: true)
            delayedHead = 0
        }
    }

    private func hasDelayed(upTo lastStream: Int32) -> Bool {
        guard delayedHead < delayed.count else { return false }
        for i in delayedHead..<delayed.count where delayed[i].context.streamID <= lastStream { return true }
        return false
    }

    private func refreshFaults() {
        let version = core.faults.version
        guard version != faultsVersion else { return }
        let snapshot = core.faults.snapshot()
        faults = snapshot.faults
        faultsVersion = snapshot.version
        faultsNeedBoard = faults.hasTokenFaults || faults.internalServerErrors > 0 || faults.serviceUnavailable > 0
            || faults.throttledRequests > 0
    }

    static func monotonicNanoseconds() -> UInt64 { SocketHandshake.monotonicNanoseconds() }
}
