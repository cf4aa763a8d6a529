import CMicroHTTPD
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
/// - Important: suspended connections do not notice a client that went away, so ``stop(deadline:)``
///   resumes every one of them before stopping the daemon. It never answers for a handler: past
///   the deadline it cancels the handlers still running and sends what they answer (the API
///   refuses with 503 only what it has not started to commit, and answers 202 what it committed).
public final class HTTPServer: @unchecked Sendable {
    /// Tuning of the server.
    public struct Options: Sendable {
        public var connectionLimit: Int = 1024
        public var connectionTimeout: TimeInterval = 60
        /// Largest request body; bigger bodies are answered by the handler with 413.
        public var maxBodyBytes: Int = 1 << 20
        /// Memory per connection for headers and buffers.
        public var connectionMemoryLimit: Int = 16 * 1024
        /// Open streams at most; past it a stream request is answered 503 `too_many_streams`.
        /// Streams do not count against ``connectionLimit``.
        public var maxStreams: Int = 10_000
        /// Unsent bytes a stream may hold; a write past it disconnects the client (it stopped reading).
        public var streamBufferBytes: Int = 65_536
        /// Which requests open streams (method, path): they are checked against ``maxStreams``
        /// instead of ``connectionLimit`` from their first byte. A handler may still answer any
        /// request with a stream; it then counts as one from that moment.
        public var isStreamRequest: @Sendable (_ method: String, _ path: String) -> Bool = { _, _ in false }

        public init(connectionLimit: Int = 1024, connectionTimeout: TimeInterval = 60, maxBodyBytes: Int = 1 << 20,
                    maxStreams: Int = 10_000) {
            self.connectionLimit = connectionLimit
            self.connectionTimeout = connectionTimeout
            self.maxBodyBytes = maxBodyBytes
            self.maxStreams = maxStreams
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
    private let state = Locked(State())
    private let connections: Gauge
    private let connectionsTotal: Counter
    /// Suspended requests: handed to the async handler, not answered yet.
    private let inFlight: Gauge

    private struct State {
        var active = 0
        var suspended: [ObjectIdentifier: RequestContext] = [:]
        var stopping = false
        /// Open connections, and those among them holding (or opening) a stream.
        var connections = 0
        var streams = 0
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
    }

    deinit {
        guard let daemon else { return }
        // Not stopped with stop(deadline:): cut the streams first (see there).
        registry.stopHeartbeats()
        for stream in registry.all { stream.abort(reason: .serverStopping) }
        for _ in 0..<2_000 where registry.count > 0 { usleep(5_000) }
        MHD_stop_daemon(daemon)
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
        let d: OpaquePointer? = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                var o = herald_mhd_options(address: sa, address_length: length, connection_limit: UInt32(options.connectionLimit + options.maxStreams),
                                           connection_timeout: UInt32(max(0, options.connectionTimeout.rounded(.up))),
                                           connection_memory_limit: options.connectionMemoryLimit)
                return herald_mhd_start(&o, { cls, connection, url, method, _, data, size, context in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    return herald_mhd_result(server.access(connection!, url!, method!, data, size!, context!) ? 1 : 0)
                }, me, { cls, _, context, _ in
                    guard let cls, let context, let pointer = context.pointee else { return }
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
                    let request = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
                    context.pointee = nil
                    server.completed(request)
                }, me, { cls, _, _, code in
                    let server = Unmanaged<HTTPServer>.fromOpaque(cls!).takeUnretainedValue()
                    server.connectionChanged(opened: code.rawValue == 0 /* MHD_CONNECTION_NOTIFY_STARTED */)
                }, me, { _, _, s in
                    // Keep the path and query raw: segments are decoded one by one, so "%2F" stays inside a segment.
                    strlen(s!)
                }, me)
            }
        }
        guard let d else {
            throw HTTPServerError(message: "cannot listen on \(address): \(String(cString: strerror(errno))) (is another process using the port?)")
        }
        daemon = d
        port = Int(herald_mhd_bound_port(d))
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
            let request = RequestContext(connection: connection, method: String(cString: method), url: String(cString: url))
            context.pointee = Unmanaged.passRetained(request).toOpaque()
            let path = request.url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.url
            let isStream = options.isStreamRequest(request.method, path)
            let refusal: HTTPResponse? = state.withLock { s in
                s.active += 1
                if isStream {
                    request.countedAsStream = true
                    s.streams += 1
                    return s.streams > options.maxStreams ? Self.tooManyStreams(options.maxStreams) : nil
                }
                return s.connections - s.streams > options.connectionLimit ? Self.tooManyConnections(options.connectionLimit) : nil
            }
            if let refusal { return respond(connection, refusal) }
            if let length = herald_mhd_header(connection, "Content-Length").map({ String(cString: $0) }),
               let n = Int(length), n > options.maxBodyBytes {
                // Refuse before reading the body; libmicrohttpd closes the connection afterwards.
                request.bodyTooLarge = true
                return respond(connection, dispatch(request, immediateOnly: true) ?? HTTPResponse(status: 413))
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
        if let response = dispatch(request, immediateOnly: false) { return respond(connection, response, request) }
        return true
    }

    /// Builds the request; answers it at once when the immediate handler does, else suspends
    /// the connection and runs the async handler.
    private func dispatch(_ context: RequestContext, immediateOnly: Bool) -> HTTPResponse? {
        let connection = context.connection
        let headerCollector = QueryCollector()
        _ = herald_mhd_headers(connection, { cls, _, key, value in
            let h = Unmanaged<QueryCollector>.fromOpaque(cls!).takeUnretainedValue()
            if let key { h.values[String(cString: key).lowercased()] = value.map { String(cString: $0) } ?? "" }
            return herald_mhd_result(1)
        }, Unmanaged.passUnretained(headerCollector).toOpaque())
        let headers = headerCollector.values
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
        let path = context.url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? context.url
        let request = HTTPRequest(method: context.method, path: path, query: query.values, headers: headers,
                                  body: context.body, bodyTooLarge: context.bodyTooLarge, peer: IPAddress(peerOf: herald_mhd_connection_fd(connection)))
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
        if refused { return Self.shuttingDown }
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
        context.body = []
        context.clearHandler()
        let refusal: HTTPResponse? = state.withLock { s in
            if s.stopping { return Self.shuttingDown }
            if !context.countedAsStream {
                context.countedAsStream = true
                s.streams += 1
                if s.streams > options.maxStreams { return Self.tooManyStreams(options.maxStreams) }
            }
            // Registered under the state lock, so that stop() either sees it or it is refused.
            registry.add(stream)
            return nil
        }
        if let refusal { return respond(connection, refusal) }
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

    private func completed(_ request: RequestContext) {
        state.withLock { s in
            s.active -= 1
            if request.countedAsStream { s.streams -= 1 }
            if s.suspended.removeValue(forKey: ObjectIdentifier(request)) != nil { inFlight.set(Double(s.suspended.count)) }
        }
    }

    private func connectionChanged(opened: Bool) {
        state.withLock { $0.connections += opened ? 1 : -1 }
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
        guard let daemon else { return }
        let fd = herald_mhd_quiesce(daemon)
        if fd >= 0 { close(fd) }
    }

    /// Stops the server: no new connections, and requests that arrive on open connections are
    /// refused with 503 before any handler runs. Waits up to `deadline` for the handlers in
    /// flight, then cancels the rest and waits for their answers (a cancelled handler answers
    /// what really happened: 503 when it did nothing, 202 when its notification was committed),
    /// and closes every connection.
    public func stop(deadline: TimeInterval) async {
        guard daemon != nil else { return }
        stopAccepting()
        state.withLock { $0.stopping = true }
        // Streams get their closing bytes and a clean end now; none waits for the deadline.
        registry.stopHeartbeats()
        for stream in registry.all { stream.end(final: stream.body.closing, reason: .serverStopping) }
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
    let url: String
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
