internal import CNGHTTP2
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// One client connection of ``SimulatorHTTP2Server``: a thread running a poll loop that feeds
/// bytes to an nghttp2 server session and writes what it produces; complete requests go to the
/// handler, and delayed answers wait in a deadline-ordered list.
///
/// Everything here runs on the connection's own thread; only the core is shared.
final class SimulatorHTTP2Connection: @unchecked Sendable {
    /// One stream's request as it arrives, then its answer's body as it is written.
    final class Stream {
        var method = ""
        var path = ""
        var authority = ""
        var scheme = ""
        var headers: [SimulatorHTTP2Header] = []
        var body: [UInt8] = []
        var tooLarge = false
        var answer: [UInt8] = []
        var answerOffset = 0
    }

    let id: Int
    /// The socket (owned and closed by ``stream``; used here only to poll).
    private let fd: Int32
    private let core: SimulatorHTTP2ServerCore
    private let stream: any SocketByteStream
    private var session: OpaquePointer?
    private var streams: [Int32: Stream] = [:]
    /// Answers held back by their delay, ordered by deadline (stream ids are never reused).
    private var delayed: [(deadline: UInt64, streamID: Int32, response: SimulatorHTTP2Response)] = []

    private let inBuffer: UnsafeMutableRawBufferPointer
    private var pending: [UInt8] = []
    private var pendingStart = 0
    private var needsWritable = false

    init(id: Int, fd: Int32, stream: any SocketByteStream, core: SimulatorHTTP2ServerCore) {
        self.id = id
        self.fd = fd
        self.stream = stream
        self.core = core
        inBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
    }

    deinit { inBuffer.deallocate() }

    /// Serves the connection until it closes or the server stops.
    func run() {
        var graceful = false
        defer {
            stream.close(graceful: graceful, linger: false)
            if let session { nghttp2_session_del(session) }
            session = nil
            core.connectionEnded()
        }
        guard SocketHandshake.run(stream, fd: fd, stopRead: core.stopRead, logger: core.logger, connection: id) else { return }
        if core.usesTLS, stream.negotiatedALPN != "h2" {
            core.logger.info("closing a TLS connection that did not negotiate h2", ["connection": String(id)])
            graceful = true
            return
        }
        guard startSession() else { return }
        graceful = serve()
    }

    private func startSession() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, SimulatorHTTP2Callbacks.onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, SimulatorHTTP2Callbacks.onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, SimulatorHTTP2Callbacks.onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, SimulatorHTTP2Callbacks.onFrameRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, SimulatorHTTP2Callbacks.onStreamClose)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return false }
        defer { nghttp2_option_del(option) }
        // curl 7.88 resets every finished stream; nghttp2's rapid-reset defence would answer
        // such clients with GOAWAY after ~1000 resets.
        nghttp2_option_set_stream_reset_rate_limit(option, 1 << 40, 1 << 40)
        nghttp2_option_set_no_closed_streams(option, 1)
        var s: OpaquePointer?
        guard nghttp2_session_server_new2(&s, callbacks, Unmanaged.passUnretained(self).toOpaque(), option) == 0, let s else {
            return false
        }
        session = s
        return herald_h2_submit_max_streams(s, core.maxConcurrentStreams) == 0
    }

    /// The poll loop; returns whether the connection ended gracefully (TLS close_notify is due).
    private func serve() -> Bool {
        var moreToRead = false
        while true {
            guard flush() else { return false }
            if pendingStart == pending.count, nghttp2_session_want_read(session) == 0, nghttp2_session_want_write(session) == 0 {
                return true
            }
            var timeout: Int32 = -1
            if moreToRead {
                timeout = 0
            } else if let first = delayed.first {
                let now = Self.monotonicNanoseconds()
                timeout = first.deadline <= now ? 0 : Int32(min((first.deadline - now + 999_999) / 1_000_000, 60_000))
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
            submitDueAnswers()
        }
    }

    private enum ReadState { case drained, more, closed }

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
            if pendingStart == pending.count {
                pending.removeAll(keepingCapacity: true)
                pendingStart = 0
                while pending.count < 256 * 1024 {
                    var chunk: UnsafePointer<UInt8>? = nil
                    let n = nghttp2_session_mem_send(session, &chunk)
                    if n < 0 { return false }
                    if n == 0 { break }
                    pending.append(contentsOf: UnsafeBufferPointer(start: chunk, count: n))
                }
                if pending.isEmpty {
                    needsWritable = false
                    return true
                }
            }
            let result = pending.withUnsafeBytes { stream.write(UnsafeRawBufferPointer(rebasing: $0[pendingStart...])) }
            switch result {
            case .bytes(let n): pendingStart += n
            case .wantWrite:
                needsWritable = true
                return true
            case .wantRead:
                needsWritable = false
                return true
            case .closed: return false
            case .failed(let why):
                core.logger.debug("connection write failed", ["connection": String(id), "error": why])
                return false
            }
        }
    }

    // MARK: Streams (called from the nghttp2 callbacks)

    func beginStream(_ streamID: Int32) { streams[streamID] = Stream() }

    func header(_ streamID: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        guard let s = streams[streamID] else { return }
        let n = String(decoding: name, as: UTF8.self)
        let v = String(decoding: value, as: UTF8.self)
        switch n {
        case ":method": s.method = v
        case ":path": s.path = v
        case ":authority": s.authority = v
        case ":scheme": s.scheme = v
        default: s.headers.append(SimulatorHTTP2Header(n, v))
        }
    }

    func data(_ streamID: Int32, _ bytes: UnsafeRawBufferPointer) {
        guard let s = streams[streamID], !s.tooLarge else { return }
        if s.body.count + bytes.count > core.maxRequestBodyBytes {
            s.tooLarge = true
            s.body = []
        } else {
            s.body.append(contentsOf: bytes)
        }
    }

    func streamClosed(_ streamID: Int32) { streams[streamID] = nil }

    /// The client finished the request on `streamID`: ask the handler, then answer (now or later).
    func requestComplete(_ streamID: Int32) {
        guard let s = streams[streamID] else { return }
        core.counters.withLock { $0.requests += 1 }
        let response: SimulatorHTTP2Response
        if s.tooLarge {
            response = .json(413, #"{"error":"request body larger than \#(core.maxRequestBodyBytes) bytes"}"#)
        } else {
            let request = SimulatorHTTP2Request(method: s.method, path: s.path, authority: s.authority, scheme: s.scheme,
                                                headers: s.headers, body: s.body, connectionID: id, streamID: streamID)
            s.headers = []
            s.body = []
            response = core.handler(request)
        }
        switch response.action {
        case .noAnswer:
            core.counters.withLock { $0.unanswered += 1 }
            return
        case .resetStream where response.delay <= 0:
            reset(streamID)
            return
        default: break
        }
        if response.delay > 0 {
            let deadline = Self.monotonicNanoseconds() + UInt64(response.delay * 1_000_000_000)
            let at = delayed.firstIndex { $0.deadline > deadline } ?? delayed.count
            delayed.insert((deadline, streamID, response), at: at)
        } else {
            submit(streamID, response)
        }
    }

    private func reset(_ streamID: Int32) {
        core.counters.withLock { $0.resets += 1 }
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_INTERNAL_ERROR.rawValue)
    }

    private func submitDueAnswers() {
        guard !delayed.isEmpty else { return }
        let now = Self.monotonicNanoseconds()
        var due = 0
        while due < delayed.count, delayed[due].deadline <= now { due += 1 }
        guard due > 0 else { return }
        let ready = delayed[..<due]
        delayed.removeFirst(due)
        for entry in ready where streams[entry.streamID] != nil {
            if entry.response.action == .resetStream { reset(entry.streamID) } else { submit(entry.streamID, entry.response) }
        }
    }

    private func submit(_ streamID: Int32, _ response: SimulatorHTTP2Response) {
        guard let s = streams[streamID] else { return }
        s.answer = response.body
        s.answerOffset = 0
        var fields: [(String, String)] = [(":status", String(min(max(response.status, 100), 599)))]
        for h in response.headers where h.name.lowercased() != "content-length" { fields.append((h.name.lowercased(), h.value)) }
        fields.append(("content-length", String(response.body.count)))
        let rc = Self.withHeaderFields(fields) { nva, count in
            if response.body.isEmpty {
                return nghttp2_submit_response(session, streamID, nva, count, nil)
            }
            var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: SimulatorHTTP2Callbacks.readBody)
            return nghttp2_submit_response(session, streamID, nva, count, &provider)
        }
        if rc != 0 {
            core.logger.debug("cannot submit a response", ["connection": String(id), "stream": String(streamID),
                                                           "error": String(cString: nghttp2_strerror(rc))])
        }
    }

    /// Copies up to `length` more bytes of `streamID`'s answer to `out`; returns how many and whether it is done.
    func readAnswer(_ streamID: Int32, into out: UnsafeMutablePointer<UInt8>, length: Int) -> (count: Int, done: Bool)? {
        guard let s = streams[streamID] else { return nil }
        let n = min(length, s.answer.count - s.answerOffset)
        s.answer.withUnsafeBufferPointer { out.update(from: $0.baseAddress! + s.answerOffset, count: n) }
        s.answerOffset += n
        return (n, s.answerOffset == s.answer.count)
    }

    /// Lays the fields out in one buffer and calls `body` with nghttp2 name/value pairs pointing
    /// into it (nghttp2 copies them, so the buffer only has to outlive the call).
    private static func withHeaderFields(_ fields: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> Int32) -> Int32 {
        var bytes: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for (name, value) in fields {
            let n = bytes.count
            bytes.append(contentsOf: name.utf8)
            let v = bytes.count
            bytes.append(contentsOf: value.utf8)
            spans.append((n, v - n, v, bytes.count - v))
        }
        bytes.append(0)
        return bytes.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let nva = spans.map { s in
                nghttp2_nv(name: base + s.0, value: base + s.2, namelen: s.1, valuelen: s.3,
                           flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            return nva.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }

    static func monotonicNanoseconds() -> UInt64 { SocketHandshake.monotonicNanoseconds() }
}

/// The nghttp2 callbacks of ``SimulatorHTTP2Connection``: they capture nothing; the connection
/// comes through `user_data`, borrowed.
enum SimulatorHTTP2Callbacks {
    @inline(__always)
    static func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (SimulatorHTTP2Connection) -> R) -> R {
        Unmanaged<SimulatorHTTP2Connection>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    static let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
        guard let frame, herald_h2_is_request_headers(frame) != 0 else { return 0 }
        withConnection(userData) { $0.beginStream(herald_h2_frame_stream_id(frame)) }
        return 0
    }

    static let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
        guard let frame else { return 0 }
        withConnection(userData) {
            $0.header(herald_h2_frame_stream_id(frame), name: UnsafeRawBufferPointer(start: name, count: nameLength),
                      value: UnsafeRawBufferPointer(start: value, count: valueLength))
        }
        return 0
    }

    static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
        withConnection(userData) { $0.data(streamID, UnsafeRawBufferPointer(start: data, count: length)) }
        return 0
    }

    static let onFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
        guard let frame, herald_h2_ends_stream(frame) != 0 else { return 0 }
        withConnection(userData) { $0.requestComplete(herald_h2_frame_stream_id(frame)) }
        return 0
    }

    static let onStreamClose: nghttp2_on_stream_close_callback = { _, streamID, _, userData in
        withConnection(userData) { $0.streamClosed(streamID) }
        return 0
    }

    static let readBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
        withConnection(userData) { connection in
            guard let (n, done) = connection.readAnswer(streamID, into: buffer!, length: length) else {
                return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
            }
            if done { flags!.pointee |= herald_h2_data_flag_eof() }
            return n
        }
    }
}
