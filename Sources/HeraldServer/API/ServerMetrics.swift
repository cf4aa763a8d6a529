import FoundationEssentials
import Glibc
import HeraldCore

/// The API's metric handles (Prometheus names); the delivery engine's are in
/// ``DeliveryMetrics``.
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
}
