import FoundationEssentials
import HeraldCore

/// Everything an engine needs from its client.
struct ClientSettings: Sendable {
    var configuration: HTTP2ClientConfiguration
    var name: String
    var logger: Logger
    var hooks: (any HTTP2RequestHooks)?
    var metrics: ClientMetrics
    var clock: any WallClock
    /// The service's name in log messages (``HTTP2MetricNames/service``).
    var service: String
}

/// The client's metric handles (``HTTP2MetricNames``).
struct ClientMetrics: Sendable {
    let inFlight: Gauge
    let connections: Gauge
    let reconnects: Counter
    let noAnswer: Counter
    private let registry: MetricsRegistry
    private let transport: String
    private let names: HTTP2MetricNames

    init(registry: MetricsRegistry, names: HTTP2MetricNames, transport: String) {
        self.registry = registry
        self.transport = transport
        self.names = names
        let labels = [("transport", transport)]
        let p = "herald_\(names.prefix)", s = names.service
        inFlight = registry.gauge("\(p)_requests_in_flight", help: "\(s) requests sent and not yet answered.", labels: labels)
        connections = registry.gauge("\(p)_connections", help: "\(s) HTTP/2 connections (engines) open.", labels: labels)
        reconnects = registry.counter("\(p)_connection_failures_total", help: "\(s) connection failures (each starts a backoff).", labels: labels)
        noAnswer = registry.counter("\(p)_requests_without_answer_total",
                                    help: "\(s) requests that failed without an answer (dropped connection, GOAWAY, timeout).", labels: labels)
    }

    /// The counter of answers with this HTTP status (look it up once, then keep it).
    func responses(status: Int) -> Counter {
        registry.counter("herald_\(names.prefix)_responses_total", help: "\(names.service) answers by HTTP status.",
                         labels: [("transport", transport), ("status", String(status))])
    }
}
