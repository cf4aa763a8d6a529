import FoundationEssentials
import Glibc
import HeraldCore

/// The daemon's metric handles (Prometheus names); the dispatcher's counters keep their names:
/// `herald_deliveries_total{transport,outcome,reason}`, `herald_retries_total{transport}`,
/// `herald_token_invalidations_total{app,result}`.
final class ServerMetrics: Sendable {
    let registry: MetricsRegistry
    /// Handles by name and label values: looking one up in the registry renders and escapes
    /// the labels, too slow for every request; the key here is built without allocating.
    private let counters = Locked<[Key: Counter]>([:])
    private let histograms = Locked<[Key: Histogram]>([:])

    /// A metric name with up to three label values.
    private struct Key: Hashable {
        var name: String
        var values: (String, String, String)

        init(_ name: String, _ labels: [(String, String)]) {
            self.name = name
            values = (labels.count > 0 ? labels[0].1 : "", labels.count > 1 ? labels[1].1 : "", labels.count > 2 ? labels[2].1 : "")
        }

        static func == (a: Key, b: Key) -> Bool { a.name == b.name && a.values == b.values }

        func hash(into hasher: inout Hasher) {
            hasher.combine(name)
            hasher.combine(values.0)
            hasher.combine(values.1)
            hasher.combine(values.2)
        }
    }

    init(registry: MetricsRegistry) { self.registry = registry }

    private func counter(_ name: String, _ help: String, _ labels: [(String, String)]) -> Counter {
        precondition(labels.count <= 3, "ServerMetrics keys hold three labels")
        let key = Key(name, labels)
        if let c = counters.withLock({ $0[key] }) { return c }
        let c = registry.counter(name, help: help, labels: labels)
        counters.withLock { $0[key] = c }
        return c
    }

    private func histogram(_ name: String, _ help: String, _ labels: [(String, String)], buckets: [Double]) -> Histogram {
        precondition(labels.count <= 3, "ServerMetrics keys hold three labels")
        let key = Key(name, labels)
        if let h = histograms.withLock({ $0[key] }) { return h }
        let h = registry.histogram(name, help: help, labels: labels, buckets: buckets)
        histograms.withLock { $0[key] = h }
        return h
    }

    func accepted(app: String) {
        counter("herald_notifications_accepted_total", "Notifications accepted (committed) by the API.", [("app", app)]).increment()
    }

    func acceptedDeliveries(_ n: Int) {
        counter("herald_deliveries_accepted_total", "Deliveries queued by accepted notifications.", []).increment(by: Int64(n))
    }

    func replayed() {
        counter("herald_notifications_replayed_total", "Requests answered from an earlier idempotency key.", []).increment()
    }

    func refused(_ reason: String) {
        counter("herald_api_backpressure_total", "Requests refused with 503 under backpressure, by reason.", [("reason", reason)]).increment()
    }

    func request(route: String, status: Int) {
        counter("herald_http_requests_total", "HTTP requests by route and status.", [("route", route), ("status", String(status))]).increment()
    }

    func finished(transport: String, state: DeliveryState, reason: String?) {
        counter("herald_deliveries_total", "Deliveries by transport, final outcome and reason.", [("transport", transport), ("outcome", state.rawValue), ("reason", Self.reasonLabel(reason))]).increment()
    }

    func retried(transport: String) {
        counter("herald_retries_total", "Delivery attempts scheduled again after a temporary failure.", [("transport", transport)]).increment()
    }

    func invalidated(app: String, result: InvalidationResult) {
        counter("herald_token_invalidations_total", "Token invalidations reported by APNs, by result.", [("app", app), ("result", result.rawValue)]).increment()
    }

    func latency(transport: String) -> Histogram {
        histogram("herald_delivery_latency_seconds", "Time from acceptance to a final outcome, by transport.",
                  [("transport", transport)],
                  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600])
    }

    func batchTime(transport: String) -> Histogram {
        histogram("herald_transport_batch_seconds", "Time a transport took to answer one batch.",
                  [("transport", transport)], buckets: Histogram.latencyBuckets)
    }

    /// Sets the queue gauges from the queue's counts.
    func updateQueue(_ depth: [String: QueueDepth], waitingAccepts: Int) {
        for (transport, d) in depth {
            registry.gauge("herald_queue_depth", help: "Deliveries waiting (first attempt or retry), by transport.",
                           labels: [("transport", transport)]).set(Double(d.queued))
            registry.gauge("herald_deliveries_in_flight", help: "Deliveries handed to a transport and not yet answered.",
                           labels: [("transport", transport)]).set(Double(d.inFlight))
        }
        registry.gauge("herald_accepts_waiting_for_commit", help: "Accepted requests waiting for the group commit.").set(Double(waitingAccepts))
    }

    /// The first word of a reason (Apple's reason code), so label sets stay small.
    static func reasonLabel(_ reason: String?) -> String {
        guard let reason, !reason.isEmpty else { return "" }
        return String(reason.prefix { $0.isLetter || $0.isNumber || $0 == "_" }.prefix(40))
    }
}
