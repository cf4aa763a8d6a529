import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// The `webpush` transport's connections: one ``HTTP2Client`` per push service, made when its
/// first delivery comes, and closed and dropped once unused for `idleTimeout`, so a gateway that
/// has seen 10,000 origins does not keep 10,000 connections (and their threads).
///
/// The client runs on the configured `engine`: nghttp2 (the default: the least CPU per request)
/// or libcurl. An nghttp2 client speaks HTTP/2 only; a push service whose TLS (ALPN) offers no
/// `h2` is given a libcurl client that speaks HTTP/1.1 instead (``fallBackToHTTP1(_:)``), kept
/// for that service while the transport runs.
final class PushServiceClients: Sendable {
    private struct Entry {
        var client: HTTP2Client
        /// Sends under way on it (between ``client(for:)`` and ``release(_:)``).
        var inUse = 0
        var lastUsed: Date
    }

    private struct State {
        var clients: [PushServiceOrigin: Entry] = [:]
        /// Services found to offer no HTTP/2: they get a libcurl client with HTTP/1.1.
        var http1: Set<PushServiceOrigin> = []
        var stopped = false
    }

    private let transport: String
    private let configuration: WebPushConfiguration
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let clock: any WallClock
    private let state = Locked(State())

    init(transport: String, configuration: WebPushConfiguration, logger: Logger, metrics: MetricsRegistry, clock: any WallClock) {
        self.transport = transport
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        self.clock = clock
    }

    /// The client for `origin`, made and started on first use (under the lock, so one per
    /// service), marked in use until ``release(_:)``; `nil` after ``stop(deadline:)``.
    func client(for origin: PushServiceOrigin) throws(HTTP2ClientError) -> HTTP2Client? {
        let now = clock.now
        return try state.withLock { (s: inout State) throws(HTTP2ClientError) -> HTTP2Client? in
            if s.stopped { return nil }
            if var existing = s.clients[origin] {
                existing.inUse += 1
                existing.lastUsed = now
                s.clients[origin] = existing
                return existing.client
            }
            let http1 = s.http1.contains(origin)
            var c = HTTP2ClientConfiguration(host: origin.host, port: origin.port)
            c.caFile = configuration.caFile
            c.engine = http1 ? .curl : configuration.engine
            c.allowHTTP1 = c.engine == .curl
            c.connections = configuration.connections
            c.maxConcurrentStreams = configuration.maxConcurrentStreams
            c.timeout = configuration.timeout
            c.connectTimeout = configuration.timeout
            c.idleTimeout = configuration.idleTimeout
            let client = try HTTP2Client(configuration: c, name: "\(transport) \(origin)", logger: logger.with(["push_service": origin.description]),
                                         metrics: metrics, metricNames: HTTP2MetricNames(prefix: "webpush", service: "Web Push"), clock: clock)
            try client.start()
            s.clients[origin] = Entry(client: client, inUse: 1, lastUsed: now)
            logger.info("push service client made", ["push_service": origin.description, "engine": c.engine.rawValue])
            return client
        }
    }

    /// Ends one use of `origin`'s client (its idle time starts now).
    func release(_ origin: PushServiceOrigin) {
        let now = clock.now
        state.withLock { s in
            guard var e = s.clients[origin] else { return }
            e.inUse = max(0, e.inUse - 1)
            e.lastUsed = now
            s.clients[origin] = e
        }
    }

    /// `origin` offers no HTTP/2: its nghttp2 client is dropped (and stopped) and the next
    /// ``client(for:)`` makes a libcurl one that speaks HTTP/1.1. False when the engine is
    /// already libcurl (nothing to fall back to).
    func fallBackToHTTP1(_ origin: PushServiceOrigin) async -> Bool {
        guard configuration.engine == .nghttp2 else { return false }
        let old: HTTP2Client? = state.withLock { s in
            guard !s.http1.contains(origin) else { return nil }
            s.http1.insert(origin)
            return s.clients.removeValue(forKey: origin)?.client
        }
        if let old {
            logger.notice("push service offers no HTTP/2: using HTTP/1.1 (libcurl) for it", ["push_service": origin.description])
            await old.stop(deadline: 0)
        }
        return true
    }

    /// Closes and drops the clients unused for `idleTimeout` (none in use); returns their origins.
    @discardableResult
    func evictIdle() async -> [PushServiceOrigin] {
        let now = clock.now
        let idle: [(PushServiceOrigin, HTTP2Client)] = state.withLock { s in
            let due = s.clients.filter { $0.value.inUse == 0 && now.timeIntervalSince($0.value.lastUsed) >= configuration.idleTimeout }
            for origin in due.keys { s.clients[origin] = nil }
            return due.map { ($0.key, $0.value.client) }
        }
        guard !idle.isEmpty else { return [] }
        await withDiscardingTaskGroup { group in
            for (_, client) in idle { group.addTask { await client.stop(deadline: 1) } }
        }
        logger.info("idle push service clients closed", ["count": String(idle.count), "open": String(count)])
        return idle.map(\.0)
    }

    /// How many push services have a client.
    var count: Int { state.withLock { $0.clients.count } }

    /// Whether `origin` has a client now.
    func hasClient(for origin: PushServiceOrigin) -> Bool { state.withLock { $0.clients[origin] != nil } }

    /// Stops every client (in-flight requests get up to `deadline` seconds).
    func stop(deadline: TimeInterval) async {
        let clients = state.withLock { s in
            s.stopped = true
            let all = s.clients.values.map(\.client)
            s.clients = [:]
            return all
        }
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { await client.stop(deadline: deadline) } }
        }
    }
}
