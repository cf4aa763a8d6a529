import FoundationEssentials
import HeraldCore

/// An HTTP/2 client for one origin: ``HTTP2ClientConfiguration/connections`` connections, each on
/// its own thread, multiplexing many streams; deadlines, GOAWAY, PING, resends after a lost
/// connection, TLS (optionally mutual) and CONNECT proxies. Used by the APNs, FCM and Web Push plugins.
///
/// Each connection is an engine on its own thread: ``HTTP2Engine/nghttp2`` (libnghttp2 on
/// OpenSSL, Herald's own epoll loop) or ``HTTP2Engine/curl`` (a libcurl multi handle). Both follow
/// the same rules: a request waits at most ``HTTP2ClientConfiguration/timeout`` for a stream and
/// as long again for its answer; after GOAWAY the streams above its last-stream-id go again on a
/// new connection, answered ones never; a dropped connection's unanswered requests go again
/// (``HTTP2ClientConfiguration/connectionRetries``); failing connections back off exponentially.
public final class HTTP2Client: Sendable {
    /// The configuration it was made with.
    public let configuration: HTTP2ClientConfiguration
    /// The name in logs, thread names and the metrics' `transport` label.
    public let name: String
    private let settings: ClientSettings
    private let engines = Locked<[any HTTP2ConnectionEngine]>([])
    private let nextEngine = Locked(0)

    /// A client; nothing connects before ``start()`` and the first request.
    ///
    /// - Parameters:
    ///   - hooks: per-attempt decisions (APNs's provider tokens); `nil` for none.
    ///   - metricNames: the names of its metrics (``HTTP2MetricNames``), labelled `transport=<name>`.
    ///   - clock: the wall clock for ``HTTP2Response/receivedAt``.
    /// - Throws: ``HTTP2ClientError/configuration(_:)`` for settings out of range or an option the
    ///   engine does not have, ``HTTP2ClientError/unsupportedProxy(_:)`` for a proxy the engine cannot use.
    public init(configuration: HTTP2ClientConfiguration, hooks: (any HTTP2RequestHooks)? = nil,
                name: String, logger: Logger, metrics: MetricsRegistry,
                metricNames: HTTP2MetricNames = .generic, clock: any WallClock = SystemClock()) throws(HTTP2ClientError) {
        let c = configuration
        if c.host.isEmpty { throw .configuration("host: empty") }
        if !(1...65535).contains(c.port) { throw .configuration("port: \(c.port) is not in 1…65535") }
        if c.connections < 1 { throw .configuration("connections: at least 1, not \(c.connections)") }
        if c.maxConcurrentStreams < 1 { throw .configuration("maxConcurrentStreams: at least 1, not \(c.maxConcurrentStreams)") }
        if !(c.timeout > 0) || !(c.connectTimeout > 0) || !(c.idleTimeout > 0) || !(c.pingInterval > 0) {
            throw .configuration("timeout, connectTimeout, idleTimeout and pingInterval must be positive")
        }
        if c.connectionRetries < 0 { throw .configuration("connectionRetries: at least 0, not \(c.connectionRetries)") }
        if c.allowHTTP1 && c.engine != .curl { throw .configuration("allowHTTP1 needs the curl engine") }
        if c.plainText && !c.allowHTTP1 { throw .configuration("plainText needs the curl engine with allowHTTP1") }
        if let proxy = c.proxy, let problem = HTTP2ClientConfiguration.proxyProblem(proxy, engine: c.engine) {
            throw .unsupportedProxy(problem)
        }
        self.configuration = configuration
        self.name = name
        settings = ClientSettings(configuration: configuration, name: name, logger: logger, hooks: hooks,
                                  metrics: ClientMetrics(registry: metrics, names: metricNames, transport: name),
                                  clock: clock, service: metricNames.service)
    }

    /// Starts the connection threads (connections open with the first request). A stopped client
    /// can be started again.
    ///
    /// - Throws: ``HTTP2ClientError/tls(_:)`` when the CA file or identity cannot be used,
    ///   ``HTTP2ClientError/resources(_:)`` when epoll, eventfd or a library handle cannot be had.
    /// Does nothing when the client runs already.
    public func start() throws(HTTP2ClientError) {
        if isRunning { return }
        var started: [any HTTP2ConnectionEngine] = []
        for i in 0..<configuration.connections {
            let engine: any HTTP2ConnectionEngine
            switch configuration.engine {
            case .curl: engine = try CurlEngine(settings: settings, index: i)
            case .nghttp2: engine = try NGHTTP2Engine(settings: settings, index: i)
            }
            started.append(engine)
        }
        for engine in started { engine.start() }
        engines.withLock { $0 = started }
        settings.metrics.connections.set(Double(started.count))
    }

    /// Sends `requests`, spread over the connections; one result per request, in order.
    ///
    /// Returns within the deadlines of ``HTTP2ClientConfiguration/timeout`` (see there);
    /// ``HTTP2Result/failed(_:)`` with ``HTTP2ClientError/notRunning`` before ``start()`` or after ``stop(deadline:)``.
    ///
    /// - Important: a request with a field HTTP/2 does not allow (a header value with CR, LF or
    ///   NUL, an upper-case or empty header name, a connection-specific header: RFC 9113 §8.2)
    ///   is never sent: its result is ``HTTP2Result/failed(_:)`` with
    ///   ``HTTP2ClientError/invalidRequest(_:)`` naming the header, not its value. Headers the
    ///   hooks add are checked the same way as each attempt starts.
    public func send(_ requests: [HTTP2Request]) async -> [HTTP2Result] {
        guard !requests.isEmpty else { return [] }
        let engines = self.engines.withLock { $0 }
        guard !engines.isEmpty else { return requests.map { _ in .failed(.notRunning) } }
        let completion = BatchCompletion(count: requests.count)
        var perEngine = Array(repeating: [PendingRequest](), count: engines.count)
        let first = nextEngine.withLock { n -> Int in
            defer { n = (n + 1) % engines.count }
            return n
        }
        let retries = configuration.connectionRetries
        var shared = SharedHeaders()
        for (slot, request) in requests.enumerated() {
            if let problem = shared.problem(request.headers) ?? HTTP2FieldCheck.problem(request, sharedChecked: true) {
                completion.complete(slot, .failed(.invalidRequest(problem + "; not sent")))
                continue
            }
            let pending = PendingRequest(request: request, slot: slot, batch: completion, retries: retries)
            // Consecutive requests (one notification's) stay together on one connection.
            perEngine[(first + slot * engines.count / requests.count) % engines.count].append(pending)
        }
        for (i, pending) in perEngine.enumerated() where !pending.isEmpty { engines[i].submit(pending) }
        return await completion.wait()
    }

    /// Finishes in-flight work for up to `deadline` seconds, fails the rest with
    /// ``HTTP2Result/noAnswer(reason:)``, and returns when every connection thread has ended (each
    /// resumes the caller as its last act: no thread of the cooperative pool or of
    /// `DispatchQueue.global()` waits for them).
    public func stop(deadline: TimeInterval) async {
        let engines = self.engines.withLock { e -> [any HTTP2ConnectionEngine] in
            defer { e = [] }
            return e
        }
        for engine in engines { engine.requestStop(deadline: deadline) }
        for engine in engines { await engine.ended() }
        if !engines.isEmpty { settings.metrics.connections.set(0) }
    }

    /// Whether ``start()`` ran and ``stop(deadline:)`` did not.
    public var isRunning: Bool { engines.withLock { !$0.isEmpty } }

    /// The engines running now (for tests).
    var runningEngines: [any HTTP2ConnectionEngine] { engines.withLock { $0 } }
}
