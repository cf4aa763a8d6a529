internal import CMicroHTTPD
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP/1.1 server on libmicrohttpd: one internal poll() thread parses requests (epoll stalls
/// past ~100 connections in libmicrohttpd 0.9.75, see the shim); complete
/// requests are handed to an async handler while their connection is suspended, and resumed
/// with the response. A handler may answer with a stream (``HTTPResponse/stream(status:headers:heartbeat:closing:open:)``):
/// its connection is suspended whenever it has nothing to send, has no idle timeout, and is
/// counted against ``Options/maxStreams``, not ``Options/connectionLimit``.
///
/// Connections are accepted by an ``HTTPAcceptor`` thread, every waiting one at once, and handed
/// to the library; a health probe (``Options/isProbeRequest``) that arrives whole in a new
/// connection's first bytes is answered from there, so a reconnect storm that keeps the poll
/// thread busy does not delay it.
///
/// Slow and greedy clients are bounded (``ConnectionTable``): a request's headers and body have
/// deadlines (``Options/headerTimeout``, ``Options/bodyTimeout``) however often bytes trickle in,
/// one address may hold ``Options/connectionsPerAddress`` connections (loopback is exempt), and
/// past ``Options/connectionLimit`` API connections, a new one closes the oldest API connection
/// that is still waiting for or sending its request, so requests that arrive whole are answered.
/// A connection is an API connection once its request line has been read and its path is not a
/// stream's (``Options/isStreamRequest``): one whose request the server has not read yet counts
/// against no budget and is closed only at its deadline (in a reconnect storm, thousands wait
/// for the one server thread to read them), and stream openings count against
/// ``Options/maxStreams`` alone. Only when every budget is full (``Options/connectionLimit`` plus
/// ``Options/maxStreams`` connections, the descriptors' bound) does a new connection close the
/// oldest one that is not a stream and has no complete request.
///
/// Requests whose length means two things (RFC 9112 §6.3: `Content-Length` with
/// `Transfer-Encoding`, two different `Content-Length`s, a transfer coding other than `chunked`)
/// are answered 400 before their body is read, and their connection is closed.
///
/// - Important: suspended connections do not notice a client that went away, so ``stop(deadline:)``
///   resumes every one of them before stopping the daemon. It never answers for a handler: past
///   the deadline it cancels the handlers still running and sends what they answer (the API
///   refuses with 503 only what it has not started to commit, and answers 202 what it committed).
public final class HTTPServer: @unchecked Sendable {
    /// Tuning of the server.
    public struct Options: Sendable {
        /// API connections at most (streams and connections whose request is unread aside):
        /// past it, the oldest API connection without a complete request is closed, and when
        /// every one is being answered, a request is answered 503 `too_many_connections`.
        public var connectionLimit: Int = 1024
        public var connectionTimeout: TimeInterval = 60
        /// Largest request body; bigger bodies are answered by the handler with 413.
        public var maxBodyBytes: Int = 1 << 20
        /// Memory per connection for the request line, headers and buffers (libmicrohttpd's
        /// pool). It bounds a request's line and headers together: 12 KiB takes at least 8 KiB
        /// of them (nginx's default bound for one header line); past the pool the request is
        /// answered `431` and its connection closed. An open stream's connection keeps nearly
        /// all of its pool resident (libmicrohttpd zeroes the read buffer when it shrinks it):
        /// 16 KiB cost 2 KB more per stream than 12 KiB (`herald-bench stream-http --memory`).
        public var connectionMemoryLimit: Int = 12 * 1024
        /// Open streams at most; past it a stream request is answered 503 `too_many_streams`.
        /// Streams do not count against ``connectionLimit``.
        public var maxStreams: Int = 10_000
        /// Unsent bytes a stream may hold; a write past it disconnects the client (it stopped reading).
        public var streamBufferBytes: Int = 65_536
        /// Which requests are health probes (method, path): one that arrives whole in a new
        /// connection's first bytes, with no body, is taken by the acceptor thread and answered
        /// with the same handlers (the immediate one on that thread, else the async one in a task),
        /// without waiting for the server thread, which may be busy with a reconnect storm.
        /// Others, and a probe whose bytes come in pieces, go through the server thread.
        public var isProbeRequest: @Sendable (_ method: String, _ path: String) -> Bool = { _, _ in false }
        /// Which requests open streams (method, path): they are checked against ``maxStreams``
        /// instead of ``connectionLimit`` from their first byte. A handler may still answer any
        /// request with a stream; it then counts as one from that moment.
        public var isStreamRequest: @Sendable (_ method: String, _ path: String) -> Bool = { _, _ in false }
        /// A request's headers are due this long after its connection opened (on a reused
        /// connection, after its request line), its bytes trickling in or not; past it the
        /// connection is closed without an answer (nginx's `client_header_timeout`).
        public var headerTimeout: TimeInterval = 10
        /// A request's body is due this long after its headers (the whole body, not between reads).
        public var bodyTimeout: TimeInterval = 10
        /// Connections one address may hold at once, streams aside (0: no limit). Loopback
        /// (127.0.0.0/8, ::1) is exempt: a proxy on the same machine, the tests and the benchmarks
        /// connect from it. Past it a new connection is closed at accept, before any byte is read.
        public var connectionsPerAddress: Int = 256
        /// Called on the server thread for each answer the server gives itself rather than a
        /// handler (503 `too_many_streams`, `too_many_connections`, `shutting_down`; 400 for an
        /// ambiguous length): the request's method and path, and the status. For metrics.
        public var answeredByServer: @Sendable (_ method: String, _ path: String, _ status: Int) -> Void = { _, _, _ in }

        public init(connectionLimit: Int = 1024, connectionTimeout: TimeInterval = 60, maxBodyBytes: Int = 1 << 20,
                    maxStreams: Int = 10_000) {
            self.connectionLimit = connectionLimit
            self.connectionTimeout = connectionTimeout
            self.maxBodyBytes = maxBodyBytes
            self.maxStreams = maxStreams
        }

        /// The options the `server` section sets (connection limits and timeouts), with the
        /// listener's body bound and stream limit.
        public init(_ server: ServerConfiguration, maxBodyBytes: Int, maxStreams: Int = 10_000) {
            self.init(connectionLimit: server.connectionLimit, connectionTimeout: server.connectionTimeout,
                      maxBodyBytes: maxBodyBytes, maxStreams: maxStreams)
            headerTimeout = server.headerTimeout
            bodyTimeout = server.bodyTimeout
            connectionsPerAddress = server.connectionsPerAddress
        }
    }

    /// Answers a request at once on the server thread (`nil`: not handled here). Must be quick.
    public typealias ImmediateHandler = @Sendable (HTTPRequest) -> HTTPResponse?
    /// Answers a request asynchronously.
    public typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse

    private let options: Options
    private let handler: Handler
    private let immediate: ImmediateHandler
    private let logger: Logger
    private var daemon: OpaquePointer?
    /// Requests between first byte and completion, and the suspended ones among them.
    private let state: Locked<State>
    private let connections: Gauge
    private let connectionsTotal: Counter
    /// Suspended requests: handed to the async handler, not answered yet.
    private let inFlight: Gauge
    /// Connections closed before their request was complete, by reason.
    private let shedCounters: [ConnectionTable.ShedReason: Counter]
    private let refusedPerAddress: Counter
    /// Closes connections past their deadlines (``ConnectionTable/overdue(now:)``) until stopped.
    private let reaper = Locked<Task<Void, Never>?>(nil)
    /// The library's logger's target (``lengthRefused()``), freed after the daemon stops.
    private var logTarget: UnsafeMutablePointer<herald_mhd_log_target>?
    /// Accepts connections and hands them to the library (set by ``start(_:setting:)``).
    private var acceptor: HTTPAcceptor?
    /// Probes answered by the async handler, by number; awaited by ``stop(deadline:)``.
    private let probes = Locked<(running: [Int: Task<Void, Never>], next: Int, stopping: Bool)>(([:], 0, false))

    private struct State {
        var table: ConnectionTable
        var active = 0
        var suspended: [ObjectIdentifier: RequestContext] = [:]
        var stopping = false
        /// Open connections, and those among them holding (or opening) a stream.
        var connections = 0
        var streams = 0
        /// Connections closed early or refused at accept since the last summary in the log, by
        /// metric label, and when that summary was written (one line a minute at most, whatever
        /// the flood).
        var unlogged: [String: Int] = [:]
        var loggedAt = 0.0
        /// Sockets handed over after the acceptor answered a probe on them: their next request
        /// comes on a kept-alive connection (``ConnectionTable/responded(_:now:)`` at open).
        var afterProbe: Set<Int32> = []
    }
    /// Open streams and their heartbeats.
    private let registry: StreamRegistry

    /// Streams open now.
    public var openStreams: Int { registry.count }

    /// Open connections, and those among them holding (or opening) a stream.
    var connectionCounts: (connections: Int, streams: Int) { state.withLock { ($0.connections, $0.streams) } }

    /// The port the server listens on (after ``start(_:)``).
    public private(set) var port: Int = 0

    public init(options: Options, logger: Logger, metrics: MetricsRegistry,
                immediate: @escaping ImmediateHandler = { _ in nil }, handler: @escaping Handler) {
        self.options = options
        self.handler = handler
        self.immediate = immediate
        self.logger = logger
        connections = metrics.gauge("herald_http_connections", help: "Open HTTP connections.")
        connectionsTotal = metrics.counter("herald_http_connections_total", help: "HTTP connections accepted.")
        inFlight = metrics.gauge("herald_http_requests_in_flight",
                                 help: "Requests handed to the API's store and queue work and not yet answered.")
        registry = StreamRegistry(gauge: metrics.gauge("herald_http_streams", help: "Open streaming responses."))
        var shed: [ConnectionTable.ShedReason: Counter] = [:]
        for reason in ConnectionTable.ShedReason.allCases {
            shed[reason] = metrics.counter("herald_http_connections_shed_total",
                                           help: "Connections the server closed before their request was complete, by reason.",
                                           labels: [("reason", reason.rawValue)])
        }
        shedCounters = shed
        refusedPerAddress = metrics.counter("herald_http_connections_refused_total",
                                            help: "Connections closed at accept, by reason.", labels: [("reason", "per_address")])
        state = Locked(State(table: ConnectionTable(limits: .init(
            headerTimeout: options.headerTimeout, bodyTimeout: options.bodyTimeout,
            idleTimeout: options.connectionTimeout, perAddress: options.connectionsPerAddress))))
    }

    deinit {
        reaper.withLock { $0?.cancel() }
        acceptor?.stop()
        if let daemon {
            // Not stopped with stop(deadline:): cut the streams first (see there).
            registry.stopHeartbeats()
            for stream in registry.all { stream.abort(reason: .serverStopping) }
            for _ in 0..<2_000 where registry.count > 0 { usleep(5_000) }
            MHD_stop_daemon(daemon)
        }
        logTarget?.deallocate()
    }

    /// Binds `address` and starts serving; returns the port (useful with port 0).
    /// - Throws: ``HTTPServerError`` naming the address and the system's reason.
    @discardableResult
    /// - Parameter setting: the configuration key of `address`, for errors.
    public func start(_ address: ListenAddress, setting: String = "api.listen") throws(HTTPServerError) -> Int {
        var storage = try Self.socketAddress(address, setting: setting)
        raiseFileLimit()
        let length = socklen_t(Int32(storage.ss_family) == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
        let me = Unmanaged.passUnretained(self).toOpaque()
        let options = self.options
        let log = logTarget ?? UnsafeMutablePointer<herald_mhd_log_target>.allocate(capacity: 1)
        log.initialize(to: herald_mhd_log_target(length_refused: { cls in
            Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue().lengthRefused()
        }, cls: me))
        logTarget = log
        let listener: Int32 = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { herald_listen_socket($0, length, Int32(Self.listenBacklog(options))) }
        }
        guard listener >= 0 else {
            throw HTTPServerError(message: "cannot listen on \(address): \(String(cString: strerror(errno))) (is another process using the port?)")
        }
        let d: OpaquePointer? = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                // The library's own limit leaves room above ours: a connection past connectionLimit is
                // accepted so that it can close the oldest idle one (connectionChanged).
                var o = herald_mhd_options(address: sa, address_length: length,
                                           connection_limit: UInt32(options.connectionLimit + options.maxStreams + Self.acceptHeadroom),
                                           connection_timeout: UInt32(max(0, options.connectionTimeout.rounded(.up))),
                                           connection_memory_limit: options.connectionMemoryLimit,
                                           listen_backlog: UInt32(Self.listenBacklog(options)))
                return herald_mhd_start(&o, { cls, connection, url, method, _, data, size, context in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    return herald_mhd_result(server.access(connection!, url!, method!, data, size!, context!) ? 1 : 0)
                }, me, { cls, connection, context, _ in
                    guard let cls else { return }
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
                    if let connection { server.responded(connection) }
                    guard let context, let pointer = context.pointee else { return }
                    let request = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
                    context.pointee = nil
                    server.completed(request)
                }, me, { cls, connection, _, code in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    server.connectionChanged(connection!, opened: code.rawValue == 0 /* MHD_CONNECTION_NOTIFY_STARTED */)
                }, me, { _, _, s in
                    // Keep the path and query raw: segments are decoded one by one, so "%2F" stays inside a segment.
                    strlen(s!)
                }, me, { cls, uri, connection in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    if let connection, let uri { server.requestLineArrived(connection, uri) }
                    return nil
                }, me, { cls, address, _ in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    return herald_mhd_result(server.admits(address) ? 1 : 0)
                }, me, log)
            }
        }
        guard let d else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw HTTPServerError(message: "cannot serve on \(address): \(reason)")
        }
        daemon = d
        port = Int(herald_socket_port(listener))
        let acceptor: HTTPAcceptor
        do {
            // unowned(unsafe): the acceptor's thread is joined in stop() and first thing in deinit,
            // while the server's memory is still there (a checked unowned traps once deinit began).
            acceptor = try HTTPAcceptor(listener: listener, admits: { [unowned(unsafe) self] in admits($0) },
                                        isProbe: options.isProbeRequest,
                                        serve: { [unowned(unsafe) self] probe, fd, address, length in serveProbe(probe, fd, address, length) },
                                        handOff: { [unowned(unsafe) self] fd, address, length, afterProbe in
                                            handOff(fd, address, length, afterProbe: afterProbe)
                                        })
        } catch {
            close(listener)
            daemon = nil
            MHD_stop_daemon(d)
            throw error
        }
        self.acceptor = acceptor
        acceptor.start()
        let tick = UInt64(max(0.05, min(0.25, min(options.headerTimeout, options.bodyTimeout) / 4)) * 1e9)
        reaper.withLock {
            $0 = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: tick)
                    guard let self else { return }
                    self.closeOverdue()
                }
            }
        }
        return port
    }

    /// The socket address for `address` (an IP literal, or `localhost`).
    private static func socketAddress(_ address: ListenAddress, setting: String) throws(HTTPServerError) -> sockaddr_storage {
        let host = address.host == "localhost" ? "127.0.0.1" : address.host
        var storage = sockaddr_storage()
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sa in
                    sa.pointee.sin_family = sa_family_t(AF_INET)
                    sa.pointee.sin_port = in_port_t(UInt16(address.port).bigEndian)
                    sa.pointee.sin_addr = v4
                }
            }
        } else if inet_pton(AF_INET6, host, &v6) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sa in
                    sa.pointee.sin6_family = sa_family_t(AF_INET6)
                    sa.pointee.sin6_port = in_port_t(UInt16(address.port).bigEndian)
                    sa.pointee.sin6_addr = v6
                }
            }
        } else {
            throw HTTPServerError(message: "\(setting): \"\(address.host)\" is not an IP address (use e.g. 127.0.0.1, 0.0.0.0 or [::1])")
        }
        return storage
    }

    // MARK: Callbacks (on the server thread)

    private func access(_ connection: OpaquePointer, _ url: UnsafePointer<CChar>, _ method: UnsafePointer<CChar>,
                        _ data: UnsafePointer<CChar>?, _ size: UnsafeMutablePointer<Int>,
                        _ context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> Bool {
        guard let pointer = context.pointee else {
            // The headers are complete (the first call); nothing of the body has been read yet.
            let request = RequestContext(connection: connection, method: String(cString: method),
                                         url: Self.originForm(String(cString: url)))
            context.pointee = Unmanaged.passRetained(request).toOpaque()
            let path = request.path
            let isStream = options.isStreamRequest(request.method, path)
            let id = Self.key(connection), now = Self.monotonicNow()
            let (refusal, victim): (HTTPResponse?, Int32?) = state.withLock { s in
                s.active += 1
                s.table.headersComplete(id, now: now)
                if isStream {
                    request.countedAsStream = true
                    s.streams += 1
                    s.table.becameStream(id)
                    return (s.streams > options.maxStreams ? Self.tooManyStreams(options.maxStreams) : nil, nil)
                }
                // (An API request on a stream path: it counts against the API's budget from now.)
                s.table.classify(id, stream: false)
                let victim = shedForAPI(&s, sparing: id, limit: options.connectionLimit)
                if s.table.apiConnections > options.connectionLimit {
                    s.table.busy(id)
                    return (Self.tooManyConnections(options.connectionLimit), victim)
                }
                return (nil, victim)
            }
            if let victim { shedUnderPressure(victim) }
            if let refusal { return answerAtOnce(connection, request, refusal) }
            let framing = Self.collectHeaders(connection)
            request.headers = framing.headers
            if let problem = framing.problem {
                // RFC 9112 §6.3: a length that means two things. Refused before the body is read,
                // and the connection is closed (a proxy in front may have framed it differently).
                return answerAtOnce(connection, request, Self.ambiguousLength(problem))
            }
            if let length = framing.contentLength, Int(length).map({ $0 > options.maxBodyBytes }) ?? true {
                // Refuse before reading the body; libmicrohttpd closes the connection afterwards.
                request.bodyTooLarge = true
                state.withLock { $0.table.busy(id) }
                if let response = dispatch(request, immediateOnly: true) { return respond(connection, response) }
                return answerAtOnce(connection, request, HTTPResponse(status: 413, headers: [("Connection", "close")]))
            }
            return true
        }
        let request = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
        if let response = request.takeResponse() { return respond(connection, response, request) }
        if size.pointee > 0 {
            if !request.bodyTooLarge, let data {
                if request.body.count + size.pointee > options.maxBodyBytes {
                    request.bodyTooLarge = true
                    request.body = []
                } else {
                    data.withMemoryRebound(to: UInt8.self, capacity: size.pointee) {
                        request.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: size.pointee))
                    }
                }
            }
            size.pointee = 0
            return true
        }
        if request.dispatched { return true }
        request.dispatched = true
        let id = Self.key(connection)
        state.withLock { $0.table.busy(id) }
        if let response = dispatch(request, immediateOnly: false) { return respond(connection, response, request) }
        return true
    }

    /// Answers on the first call with a response of the server's own (a refusal), counted
    /// through ``Options/answeredByServer``.
    private func answerAtOnce(_ connection: OpaquePointer, _ request: RequestContext, _ response: HTTPResponse) -> Bool {
        let id = Self.key(connection)
        state.withLock { $0.table.busy(id) }
        options.answeredByServer(request.method, request.path, response.status)
        return respond(connection, response)
    }

    /// The request headers by lower-case name (a repeated one keeps its last value), and what
    /// their framing headers say: RFC 9112 §6.3's ambiguities, and the one `Content-Length`.
    private static func collectHeaders(_ connection: OpaquePointer) -> (headers: [String: String], contentLength: String?, problem: (field: String, message: String)?) {
        let collector = HeaderCollector()
        _ = herald_mhd_headers(connection, { cls, _, key, value in
            let h = Unmanaged<HeaderCollector>.fromOpaque(cls!).takeUnretainedValue()
            if let key {
                let name = String(cString: key).lowercased()
                let text = value.map { String(cString: $0) } ?? ""
                if let value, HeaderCollector.isFolded(key: key, value: value) { h.folded.append(name) }
                h.values[name] = text
                if name == "content-length" { h.lengths.append(text) }
                if name == "transfer-encoding" { h.encodings.append(text) }
            }
            return herald_mhd_result(1)
        }, Unmanaged.passUnretained(collector).toOpaque())
        return (collector.values, collector.lengths.first, collector.framingProblem)
    }

    /// The origin form of a request target: an absolute-form target (`http://host:port/path?q`,
    /// RFC 9112 §3.2.2, which a server must accept) loses its scheme and authority; any other
    /// target is returned as it is.
    static func originForm(_ target: String) -> String {
        guard !target.hasPrefix("/"), let colon = target.firstIndex(of: ":") else { return target }
        let scheme = target[..<colon].lowercased()
        guard scheme == "http" || scheme == "https", target[colon...].hasPrefix("://") else { return target }
        let rest = target[target.index(colon, offsetBy: 3)...]
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return "/" }
        return rest[start] == "?" ? "/" + rest[start...] : String(rest[start...])
    }

    /// Builds the request; answers it at once when the immediate handler does, else suspends
    /// the connection and runs the async handler.
    private func dispatch(_ context: RequestContext, immediateOnly: Bool) -> HTTPResponse? {
        let connection = context.connection
        let headers = context.headers
        let query = QueryCollector()
        let box = Unmanaged.passUnretained(query).toOpaque()
        _ = herald_mhd_query_arguments(connection, { cls, _, key, value in
            let q = Unmanaged<QueryCollector>.fromOpaque(cls!).takeUnretainedValue()
            if let key {
                let k = PercentEncoding.decode(String(cString: key), plusIsSpace: true) ?? String(cString: key)
                let v = value.map { PercentEncoding.decode(String(cString: $0), plusIsSpace: true) ?? String(cString: $0) } ?? ""
                q.values[k] = v
            }
            return herald_mhd_result(1)
        }, box)
        let request = HTTPRequest(method: context.method, path: context.path, query: query.values, headers: headers,
                                  body: context.body, bodyTooLarge: context.bodyTooLarge,
                                  peer: IPAddress(peerOf: herald_mhd_connection_fd(connection)))
        context.request = request
        if let response = immediate(request) { return response }
        if immediateOnly { return nil }
        let refused: Bool = state.withLock { s in
            if s.stopping { return true }
            s.suspended[ObjectIdentifier(context)] = context
            inFlight.set(Double(s.suspended.count))
            herald_mhd_suspend(connection)
            return false
        }
        if refused {
            options.answeredByServer(context.method, context.path, 503)
            return Self.shuttingDown
        }
        let handler = self.handler
        context.setHandler(Task { [self] in
            let response = await handler(request)
            finish(context, with: response)
        })
        return nil
    }

    /// Stores the response of a suspended request and resumes its connection (unless shutdown
    /// already did).
    private func finish(_ context: RequestContext, with response: HTTPResponse) {
        state.withLock { s in
            guard s.suspended.removeValue(forKey: ObjectIdentifier(context)) != nil else { return }
            inFlight.set(Double(s.suspended.count))
            context.setResponse(response)
            herald_mhd_resume(context.connection)
        }
    }

    private func respond(_ connection: OpaquePointer, _ response: HTTPResponse, _ context: RequestContext? = nil) -> Bool {
        if let body = response.streamBody, let context {
            return respondStream(connection, response, body, context)
        }
        var headers = response.headers
        if context?.countedAsStream == true && !headers.contains(where: { $0.0.lowercased() == "connection" }) {
            // A stream request answered without a stream (refused): its client expects no reuse.
            headers.append(("Connection", "close"))
        }
        if !response.body.isEmpty && !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            headers.append(("Content-Type", "application/json"))
        }
        let names = headers.map { strdup($0.0) }
        let values = headers.map { strdup($0.1) }
        defer {
            names.forEach { free($0) }
            values.forEach { free($0) }
        }
        var pairs = (0..<headers.count).map { herald_mhd_header_pair(name: names[$0], value: values[$0]) }
        let ok = response.body.withUnsafeBytes { body in
            pairs.withUnsafeMutableBufferPointer { p in
                herald_mhd_respond(connection, UInt32(response.status), body.baseAddress, body.count, p.baseAddress, p.count)
            }
        }
        return ok == 1
    }

    /// Queues a streaming response (on the server thread): the stream is registered for
    /// heartbeats and shutdown, its connection gets no idle timeout, then `open` runs.
    private func respondStream(_ connection: OpaquePointer, _ response: HTTPResponse, _ body: HTTPStreamBody,
                               _ context: RequestContext) -> Bool {
        let stream = HTTPStream(body: body, connection: connection, limit: options.streamBufferBytes, registry: registry)
        // The context lives as long as the connection: keep only what the stream needs.
        context.request = nil
        context.headers = [:]
        context.body = []
        context.clearHandler()
        let id = Self.key(connection)
        let refusal: HTTPResponse? = state.withLock { s in
            if s.stopping { return Self.shuttingDown }
            if !context.countedAsStream {
                context.countedAsStream = true
                s.streams += 1
                if s.streams > options.maxStreams { return Self.tooManyStreams(options.maxStreams) }
            }
            s.table.becameStream(id)
            // Registered under the state lock, so that stop() either sees it or it is refused.
            registry.add(stream)
            return nil
        }
        if let refusal {
            options.answeredByServer(context.method, context.path, refusal.status)
            return respond(connection, refusal)
        }
        let names = response.headers.map { strdup($0.0) }
        let values = response.headers.map { strdup($0.1) }
        defer {
            names.forEach { free($0) }
            values.forEach { free($0) }
        }
        var pairs = (0..<response.headers.count).map { herald_mhd_header_pair(name: names[$0], value: values[$0]) }
        let retained = Unmanaged.passRetained(stream).toOpaque()
        let ok = pairs.withUnsafeMutableBufferPointer { p in
            herald_mhd_respond_stream(connection, UInt32(response.status), p.baseAddress, p.count, Self.streamBlockSize, { cls, _, buffer, max in
                Unmanaged<HTTPStream>.fromOpaque(cls!).takeUnretainedValue().read(into: buffer!, max: max)
            }, retained, { cls in
                let stream = Unmanaged<HTTPStream>.fromOpaque(cls!).takeRetainedValue()
                stream.registry.remove(stream)
                let (reason, handler) = stream.released()
                handler?(reason)
            })
        }
        guard ok == 1 else { return false }
        herald_mhd_set_connection_timeout(connection, 0)
        // The kernel's buffer is bounded too (loopback autotunes it to megabytes): a client that
        // stops reading reaches the stream's own bound after about twice `streamBufferBytes`.
        herald_mhd_set_send_buffer(connection, Int32(min(options.streamBufferBytes, Int(Int32.max))))
        body.open(stream)
        return true
    }

    /// The callback block size of stream responses: chunks are built in the connection's own
    /// write buffer, so this only sizes a buffer the library allocates and HTTP/1.0 uses.
    private static let streamBlockSize = 512

    /// The listen socket's backlog: room for every connection the budgets hold to arrive at once
    /// (a reconnect storm) without a SYN dropped, which costs its client a second or more before
    /// it tries again. The kernel caps it at `net.core.somaxconn` (4096 on Debian 12).
    static func listenBacklog(_ options: Options) -> Int {
        min(65_535, max(1_024, options.connectionLimit + options.maxStreams))
    }

    /// Connections the library accepts past ``Options/connectionLimit`` plus ``Options/maxStreams``,
    /// so that a new connection can still close the oldest idle one and be served.
    private static let acceptHeadroom = 64

    private static func ambiguousLength(_ problem: (field: String, message: String)) -> HTTPResponse {
        HTTPResponse.json(400, headers: [("Connection", "close")]) { o in
            o.object("error") { e in
                e.string("code", "invalid_request")
                e.string("message", problem.message)
                e.string("field", problem.field)
            }
        }
    }

    private static func tooManyStreams(_ limit: Int) -> HTTPResponse {
        HTTPResponse.json(503, headers: [("Retry-After", "5"), ("Connection", "close")]) { o in
            o.object("error") { e in
                e.string("code", "too_many_streams")
                e.string("message", "this server holds its limit of \(limit) open streams (api.streams.maxStreams); retry later or raise the limit")
            }
        }
    }

    private static func tooManyConnections(_ limit: Int) -> HTTPResponse {
        HTTPResponse.json(503, headers: [("Retry-After", "1"), ("Connection", "close")]) { o in
            o.object("error") { e in
                e.string("code", "too_many_connections")
                e.string("message", "this server holds its limit of \(limit) API connections (server.connectionLimit); retry later or reuse connections")
            }
        }
    }

    private static var shuttingDown: HTTPResponse {
        HTTPResponse.json(503, headers: [("Retry-After", "1")]) { o in
            o.object("error") { e in e.string("code", "shutting_down"); e.string("message", "the server is shutting down; nothing was stored") }
        }
    }

    /// Raises the soft limit of open files to the hard one: every connection and stream is a
    /// descriptor. Warns when even the hard limit is below what the limits need.
    private func raiseFileLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0 else { return }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        let needed = options.connectionLimit + options.maxStreams + 128
        if limit.rlim_cur != rlim_t.max, limit.rlim_cur < rlim_t(needed) {
            logger.warning("open-file limit \(limit.rlim_cur) is below the \(needed) descriptors that connectionLimit (\(options.connectionLimit)) and maxStreams (\(options.maxStreams)) need; raise it (ulimit -n, LimitNOFILE= in systemd) or lower the limits")
        }
    }

    /// libmicrohttpd is refusing a request for its `Content-Length` (see `herald_mhd_log` in the
    /// shim), on the server thread, before it writes its own answer with the status line and
    /// headers twice: answers the request once, 400, and shuts the connection's writing side, so
    /// that the library's copy is never sent (its write fails and it closes the connection).
    /// The request is the one whose headers are complete with a first `Content-Length` that is
    /// not a 64-bit count of digits, which is the library's rule.
    private func lengthRefused() {
        let candidates = state.withLock { $0.table.receivingHeaders }
        for (id, fd) in candidates {
            guard let connection = OpaquePointer(bitPattern: id),
                  let value = herald_mhd_header(connection, "Content-Length").map({ String(cString: $0) }),
                  value.isEmpty || !value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) || UInt64(value) == nil
            else { continue }
            // Marked closing: not answered twice (its headers stay readable until the library
            // cleans the connection up), not counted as a connection that can take requests.
            guard state.withLock({ $0.table.closing(id) }) != nil else { continue }
            var response = HTTPResponse.json(400) { o in
                o.object("error") { e in
                    e.string("code", "invalid_request")
                    e.string("message", "Content-Length must be a count of bytes (digits only, RFC 9112 section 6.3)")
                    e.string("field", "Content-Length")
                }
            }
            response.headers.append(("Connection", "close"))
            var bytes = Array("HTTP/1.1 400 Bad Request\r\n".utf8)
            for (name, value) in response.headers { bytes += Array("\(name): \(value)\r\n".utf8) }
            bytes += Array("Content-Length: \(response.body.count)\r\n\r\n".utf8) + response.body
            _ = bytes.withUnsafeBytes { herald_send_now(fd, $0.baseAddress, $0.count) }
            shutdown(fd, Int32(SHUT_WR))
            options.answeredByServer("", "", 400)
        }
    }

    /// Answers a probe the acceptor read whole (on the acceptor thread): at once with the
    /// immediate handler's response, else with the async handler's in a task of the server's
    /// own (awaited by ``stop(deadline:)``); then the connection goes to the library when kept
    /// alive, or is closed.
    private func serveProbe(_ probe: HTTPAcceptor.Probe, _ fd: Int32, _ address: sockaddr_storage, _ length: socklen_t) {
        let parts = probe.target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [String: String] = [:]
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = PercentEncoding.decode(String(kv[0]), plusIsSpace: true) ?? String(kv[0])
                query[key] = kv.count == 2 ? PercentEncoding.decode(String(kv[1]), plusIsSpace: true) ?? String(kv[1]) : ""
            }
        }
        let request = HTTPRequest(method: probe.method, path: String(parts[0]), query: query, headers: probe.headers,
                                  body: [], bodyTooLarge: false, peer: IPAddress(peerOf: fd))
        if let response = immediate(request) {
            finishProbe(response, probe, fd, address, length)
            return
        }
        let handler = self.handler
        probes.withLock { p in
            if p.stopping {
                options.answeredByServer(probe.method, request.path, 503)
                finishProbe(Self.shuttingDown, probe, fd, address, length)
                return
            }
            let id = p.next
            p.next += 1
            // Ahead of the handlers of a storm's requests, which may fill the pool's queue.
            p.running[id] = Task(priority: .high) { [self] in
                let response = await handler(request)
                finishProbe(response, probe, fd, address, length)
                probes.withLock { _ = $0.running.removeValue(forKey: id) }
            }
        }
    }

    /// Writes a probe's answer (small: the socket's buffer takes it at once), then hands the
    /// connection to the library when it is kept alive, or closes it.
    private func finishProbe(_ response: HTTPResponse, _ probe: HTTPAcceptor.Probe, _ fd: Int32, _ address: sockaddr_storage, _ length: socklen_t) {
        let keepAlive = probe.keepAlive && response.streamBody == nil
        let bytes = Self.wire(response.streamBody == nil ? response : HTTPResponse(status: 500), keepAlive: keepAlive)
        let sent = bytes.withUnsafeBytes { herald_send_now(fd, $0.baseAddress, $0.count) }
        guard sent == bytes.count, keepAlive else {
            close(fd)
            return
        }
        var address = address
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { handOff(fd, $0, length, afterProbe: true) } }
    }

    /// A response as HTTP/1.1 bytes, as libmicrohttpd writes it (status line, `Date`, the
    /// headers, `Content-Length`; `Connection: close` when the connection ends).
    static func wire(_ response: HTTPResponse, keepAlive: Bool) -> [UInt8] {
        var headers = response.headers
        if !response.body.isEmpty && !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            headers.append(("Content-Type", "application/json"))
        }
        if !keepAlive && !headers.contains(where: { $0.0.lowercased() == "connection" }) { headers.append(("Connection", "close")) }
        var text = "HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\nDate: \(httpDate())\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "Content-Length: \(response.body.count)\r\n\r\n"
        return Array(text.utf8) + response.body
    }

    private static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status \(status)"
        }
    }

    /// Now as an HTTP date (RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`).
    private static func httpDate() -> String {
        var t = time(nil)
        var parts = tm()
        gmtime_r(&t, &parts)
        var buffer = [CChar](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Hands an accepted socket to the library (on the acceptor thread).
    private func handOff(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t, afterProbe: Bool) {
        guard let daemon else {
            close(fd)
            return
        }
        if afterProbe { state.withLock { _ = $0.afterProbe.insert(fd) } }
        if herald_mhd_add_connection(daemon, fd, address, length) == 0 && afterProbe {
            // Refused (the library closed the socket): forget the mark before the number is reused.
            state.withLock { _ = $0.afterProbe.remove(fd) }
        }
    }

    /// A connection's key in the ``ConnectionTable``.
    private static func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: connection)) }

    /// Seconds on the monotonic clock (the deadlines' clock: wall-clock steps do not move them).
    private static func monotonicNow() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// Whether a new connection from `address` is within ``Options/connectionsPerAddress``.
    private func admits(_ address: UnsafePointer<sockaddr>?) -> Bool {
        guard options.connectionsPerAddress > 0 else { return true }
        let peer = Self.peer { herald_sockaddr_peer(address, $0) }
        let admitted = state.withLock { s in
            if s.table.admits(peer) { return true }
            s.unlogged["refused_per_address", default: 0] += 1
            return false
        }
        if !admitted { refusedPerAddress.increment() }
        return admitted
    }

    private static func peer(_ read: (UnsafeMutablePointer<UInt8>) -> Int32) -> ConnectionTable.Peer? {
        var bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)
            = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let family = withUnsafeMutableBytes(of: &bytes) { read($0.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
        return family == 0 ? nil : ConnectionTable.Peer(bytes)
    }

    /// A request line arrived: the connection is an API connection or a stream opening from now
    /// (by its path; the library does not give the method yet, so a stream path counts as a
    /// stream opening until the headers say otherwise). An API connection past
    /// ``Options/connectionLimit`` closes the oldest API connection still waiting for or sending
    /// its request; connections whose request has not been read yet are never closed for it.
    private func requestLineArrived(_ connection: OpaquePointer, _ uri: UnsafePointer<CChar>) {
        let id = Self.key(connection), now = Self.monotonicNow()
        let target = Self.originForm(String(cString: uri))
        let path = target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? target
        let isStream = options.isStreamRequest("GET", path)
        let limit = options.connectionLimit
        let victim: Int32? = state.withLock { s in
            s.table.requestLine(id, now: now)
            s.table.classify(id, stream: isStream)
            return isStream ? nil : shedForAPI(&s, sparing: id, limit: limit)
        }
        if let victim { shedUnderPressure(victim) }
    }

    /// Marks the oldest API connection still waiting for or sending its request as shed when the
    /// API connections are past `limit`; returns its socket (under the state lock).
    private func shedForAPI(_ s: inout State, sparing id: UInt, limit: Int) -> Int32? {
        guard s.table.apiConnections > limit, let fd = s.table.shedOldest(sparing: id) else { return nil }
        s.unlogged[ConnectionTable.ShedReason.pressure.rawValue, default: 0] += 1
        return fd
    }

    /// Closes a connection shed to make room, on the server thread: the library closes sockets
    /// only on this thread, so the descriptor is still the victim's. Its peer sees the close at once.
    private func shedUnderPressure(_ fd: Int32) {
        shutdown(fd, Int32(SHUT_RDWR))
        shedCounters[.pressure]?.increment()
    }

    /// A request is over (answered, or its connection closing): the connection waits for the next.
    private func responded(_ connection: OpaquePointer) {
        let id = Self.key(connection), now = Self.monotonicNow()
        state.withLock { $0.table.responded(id, now: now) }
    }

    /// Closes the connections past their deadlines. Under the lock: a socket is closed by the
    /// library only after it reported the close (``connectionChanged(_:opened:)``), which takes
    /// the lock first, so a descriptor shut down here is never one already reused.
    private func closeOverdue() {
        let now = Self.monotonicNow()
        let (late, summary): ([ConnectionTable.ShedReason], [String: Int]) = state.withLock { s in
            let late = s.table.overdue(now: now).map { fd, reason in
                shutdown(fd, Int32(SHUT_RDWR))
                return reason
            }
            for reason in late { s.unlogged[reason.rawValue, default: 0] += 1 }
            guard !s.unlogged.isEmpty, now - s.loggedAt >= 60 else { return (late, [:]) }
            defer { s.unlogged = [:]; s.loggedAt = now }
            return (late, s.unlogged)
        }
        for reason in late { shedCounters[reason]?.increment() }
        if !summary.isEmpty {
            var metadata = summary.mapValues(String.init)
            metadata["connection_limit"] = String(options.connectionLimit)
            logger.notice("closed slow, idle or surplus connections (herald_http_connections_shed_total, _refused_total)", metadata)
        }
    }

    private func completed(_ request: RequestContext) {
        state.withLock { s in
            s.active -= 1
            if request.countedAsStream { s.streams -= 1 }
            if s.suspended.removeValue(forKey: ObjectIdentifier(request)) != nil { inFlight.set(Double(s.suspended.count)) }
        }
    }

    private func connectionChanged(_ connection: OpaquePointer, opened: Bool) {
        let id = Self.key(connection)
        if opened {
            let peer = Self.peer { herald_mhd_client_address(connection, $0) }
            let fd = herald_mhd_connection_fd(connection), now = Self.monotonicNow()
            // Every budget full (API connections and streams): the descriptors run out next, so
            // the oldest connection that is not a stream and still waits for or sends its
            // request makes room. Below that, a connection whose request is unread is never closed.
            let limit = options.connectionLimit + options.maxStreams
            let victim: Int32? = state.withLock { s in
                s.connections += 1
                s.table.opened(id, fd: fd, peer: peer, now: now)
                if s.afterProbe.remove(fd) != nil {
                    // Answered once by the acceptor: its next request is a kept-alive one.
                    s.table.classify(id, stream: false)
                    s.table.responded(id, now: now)
                }
                guard s.connections - s.table.shedPending > limit,
                      let fd = s.table.shedOldest(sparing: id, among: [.unknown, .api]) else { return nil }
                s.unlogged[ConnectionTable.ShedReason.pressure.rawValue, default: 0] += 1
                return fd
            }
            if let victim { shedUnderPressure(victim) }
        } else {
            state.withLock { s in
                s.connections -= 1
                s.table.closed(id)
            }
        }
        if opened {
            connections.add(1)
            connectionsTotal.increment()
        } else {
            connections.add(-1)
        }
    }

    // MARK: Lifecycle

    /// Stops accepting connections; requests already received still get their answers.
    public func stopAccepting() {
        acceptor?.stop()
    }

    /// Stops the server: no new connections, and requests that arrive on open connections are
    /// refused with 503 before any handler runs. Waits up to `deadline` for the handlers in
    /// flight, then cancels the rest and waits for their answers (a cancelled handler answers
    /// what really happened: 503 when it did nothing, 202 when its notification was committed),
    /// and closes every connection.
    public func stop(deadline: TimeInterval) async {
        guard daemon != nil else { return }
        stopAccepting()
        if let task = reaper.withLock({ r in defer { r = nil }; return r }) {
            task.cancel()
            await task.value
        }
        state.withLock { $0.stopping = true }
        // The acceptor has stopped: no probe starts after this; the running ones end quickly.
        for task in probes.withLock({ p in p.stopping = true; return Array(p.running.values) }) { await task.value }
        // Streams get their closing bytes and a clean end now; none waits for the deadline.
        registry.stopHeartbeats()
        for stream in registry.all { stream.end(final: stream.closing, reason: .serverStopping) }
        let end = Date().addingTimeInterval(deadline)
        while Date() < end, state.withLock({ !$0.suspended.isEmpty }) {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        let late = state.withLock { s in s.suspended.values.compactMap { $0.handler } }
        for task in late { task.cancel() }
        for task in late { await task.value }
        // Let the server thread write the last answers before the connections close.
        let flushEnd = Date().addingTimeInterval(min(1, max(0.05, deadline)))
        while Date() < flushEnd, state.withLock({ $0.active > 0 }) {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        // Streams whose clients did not read their end in time are cut; the daemon must not
        // stop while one of their connections is suspended (libmicrohttpd aborts the process).
        for stream in registry.all { stream.abort(reason: .serverStopping) }
        // (Each is resumed by abort and never suspends again: this takes one loop of the server
        // thread; the bound is only for a machine too busy to run it.)
        let cutEnd = Date().addingTimeInterval(10)
        while Date() < cutEnd, registry.count > 0 {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        // Cleared first: the last reference to the server may go inside MHD_stop_daemon, on
        // libmicrohttpd's own thread, and a deinit that stopped it again would join itself.
        let stopping = daemon
        daemon = nil
        if let stopping { MHD_stop_daemon(stopping) }
    }
}

/// A server that cannot start; the message names the address and the reason.
public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}

/// Per-request state between libmicrohttpd callbacks.
final class RequestContext: @unchecked Sendable {
    let connection: OpaquePointer
    let method: String
    /// The target in origin form (path and query, still percent-encoded).
    let url: String
    /// The path of ``url`` (without the query).
    var path: String { url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url }
    /// Request headers by lower-case name, read once the headers are complete.
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    var bodyTooLarge = false
    var dispatched = false
    /// Counted in the server's open streams (a stream request, or answered with a stream).
    var countedAsStream = false
    /// The request handed to the handlers (kept for a stream).
    var request: HTTPRequest?
    private let response = Locked<HTTPResponse?>(nil)

    init(connection: OpaquePointer, method: String, url: String) {
        self.connection = connection
        self.method = method
        self.url = url
    }

    private let task = Locked<Task<Void, Never>?>(nil)

    func setResponse(_ r: HTTPResponse) { response.withLock { $0 = r } }
    func setHandler(_ t: Task<Void, Never>) { task.withLock { $0 = t } }
    func clearHandler() { task.withLock { $0 = nil } }
    /// The task running the async handler, once dispatched.
    var handler: Task<Void, Never>? { task.withLock { $0 } }
    func takeResponse() -> HTTPResponse? { response.withLock { r in defer { r = nil }; return r } }
}

/// Collects query arguments from libmicrohttpd's iterator.
final class QueryCollector {
    var values: [String: String] = [:]
}

/// Collects request headers from libmicrohttpd's iterator, with every `Content-Length` and
/// `Transfer-Encoding` value in order.
final class HeaderCollector {
    var values: [String: String] = [:]
    var lengths: [String] = []
    var encodings: [String] = []
    /// Names (lower-cased, as the library joined them) of header lines that had a line folded
    /// onto them (obs-fold).
    var folded: [String] = []

    /// Whether the header whose name and value the library gives at `key` and `value` had an
    /// obs-fold line (a line starting with a space or tab) joined onto it.
    ///
    /// libmicrohttpd 0.9.75 parses a header line in place in its read buffer (the name, its colon
    /// turned into a NUL, optional spaces, the value), and joins a folded line onto the *name*
    /// (`process_broken_line`): the name is copied to a new block of the connection's pool,
    /// after the read buffer, with the folded text after it, and the value stays where it was.
    /// So a name and value that are not adjacent (only spaces or tabs between the name's NUL and
    /// the value) are a folded header, whatever the folded text was: `X: y` then
    /// ` Transfer-Encoding: chunked` is read as one header named `xtransfer-encoding: chunked`,
    /// and a proxy that unfolds it reads `Transfer-Encoding` where the library reads none.
    /// (Pinned by FrontDoorTests' obs-fold test: a library that parsed otherwise fails it.)
    static func isFolded(key: UnsafePointer<CChar>, value: UnsafePointer<CChar>) -> Bool {
        let afterName = key + strlen(key) + 1
        let gap = afterName.distance(to: value)
        // Both lie in the connection's pool (12 KiB by default): a gap past it is no header line.
        guard gap >= 0, gap <= 64 * 1024 else { return true }
        return !(0..<gap).allSatisfy { afterName[$0] == 0x20 || afterName[$0] == 0x09 }
    }

    /// What makes the body's length ambiguous (RFC 9112 section 6.3), naming the header, or `nil`.
    /// libmicrohttpd 0.9.75 reads the first `Content-Length`, and lets `Transfer-Encoding`
    /// override it; a proxy in front may have read either.
    ///
    /// A folded header line (obs-fold) is refused first (RFC 9112 section 5.2 lets a server refuse
    /// it with 400): the library joins it onto the previous header's name, so a folded
    /// ` Transfer-Encoding: chunked` beside `Content-Length` is a length the library and a proxy
    /// in front would read differently (section 6.1).
    var framingProblem: (field: String, message: String)? {
        if let name = folded.first {
            let field = name.contains("transfer-encoding") ? "Transfer-Encoding"
                : name.contains("content-length") ? "Content-Length" : "headers"
            return (field, "a header line folded onto the previous one (a line that starts with a space or tab, obs-fold) is refused (RFC 9112 section 5.2); send each header on one line")
        }
        if !encodings.isEmpty {
            if !lengths.isEmpty {
                return ("Transfer-Encoding", "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112 section 6.3); send one of them")
            }
            let codings = encodings.flatMap { $0.split(separator: ",") }.map { Self.trim($0).lowercased() }
            if codings != ["chunked"] {
                return ("Transfer-Encoding", "only \"Transfer-Encoding: chunked\" is supported (got \"\(encodings.joined(separator: ", "))\"); send the body chunked or with Content-Length")
            }
        }
        if Set(lengths.map { Self.trim($0[...]) }).count > 1 {
            return ("Content-Length", "the request has Content-Length headers with different values (\(lengths.joined(separator: ", "))) (RFC 9112 section 6.3); send one")
        }
        return nil
    }

    /// `text` without leading and trailing spaces and tabs (optional whitespace, RFC 9110 §5.6.3).
    private static func trim(_ text: Substring) -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        return String(text.drop(while: isSpace).reversed().drop(while: isSpace).reversed())
    }
}
