import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// The `webpush` transport's connections: one ``HTTP2Client`` per push service, made when its
/// first delivery comes (libcurl, HTTP/2 where the service offers it, HTTP/1.1 otherwise) and
/// kept until the transport shuts down.
final class PushServiceClients: Sendable {
    private struct State {
        var clients: [PushServiceOrigin: HTTP2Client] = [:]
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
    /// service); `nil` after ``stop(deadline:)``.
    func client(for origin: PushServiceOrigin) throws(HTTP2ClientError) -> HTTP2Client? {
        try state.withLock { (s: inout State) throws(HTTP2ClientError) -> HTTP2Client? in
            if s.stopped { return nil }
            if let existing = s.clients[origin] { return existing }
            var c = HTTP2ClientConfiguration(host: origin.host, port: origin.port)
            c.caFile = configuration.caFile
            c.engine = .curl
            c.allowHTTP1 = true
            c.connections = configuration.connections
            c.maxConcurrentStreams = configuration.maxConcurrentStreams
            c.timeout = configuration.timeout
            c.connectTimeout = configuration.timeout
            let client = try HTTP2Client(configuration: c, name: "\(transport) \(origin)", logger: logger.with(["push_service": origin.description]),
                                         metrics: metrics, metricNames: HTTP2MetricNames(prefix: "webpush", service: "Web Push"), clock: clock)
            try client.start()
            s.clients[origin] = client
            logger.info("push service client made", ["push_service": origin.description])
            return client
        }
    }

    /// How many push services have a client.
    var count: Int { state.withLock { $0.clients.count } }

    /// Stops every client (in-flight requests get up to `deadline` seconds).
    func stop(deadline: TimeInterval) async {
        let clients = state.withLock { s in
            s.stopped = true
            let all = Array(s.clients.values)
            s.clients = [:]
            return all
        }
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { await client.stop(deadline: deadline) } }
        }
    }
}
