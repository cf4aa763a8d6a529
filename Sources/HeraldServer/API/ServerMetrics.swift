import Foundation
import HeraldCore

/// The daemon's metric handles (Prometheus names); the dispatcher's counters keep their names:
/// `herald_deliveries_total{transport,outcome,reason}`, `herald_retries_total{transport}`,
/// `herald_token_invalidations_total{app,result}`.
struct ServerMetrics: Sendable {
    let registry: MetricsRegistry

    func accepted(app: String) {
        registry.counter("herald_notifications_accepted_total", help: "Notifications accepted (committed) by the API.",
                         labels: [("app", app)]).increment()
    }

    func acceptedDeliveries(_ n: Int) {
        registry.counter("herald_deliveries_accepted_total", help: "Deliveries queued by accepted notifications.").increment(by: Int64(n))
    }

    func replayed() {
        registry.counter("herald_notifications_replayed_total", help: "Requests answered from an earlier idempotency key.").increment()
    }

    func refused(_ reason: String) {
        registry.counter("herald_api_backpressure_total", help: "Requests refused with 503 under backpressure, by reason.",
                         labels: [("reason", reason)]).increment()
    }

    func request(route: String, status: Int) {
        registry.counter("herald_http_requests_total", help: "HTTP requests by route and status.",
                         labels: [("route", route), ("status", String(status))]).increment()
    }

    func finished(transport: String, state: DeliveryState, reason: String?) {
        registry.counter("herald_deliveries_total", help: "Deliveries by transport, final outcome and reason.",
                         labels: [("transport", transport), ("outcome", state.rawValue), ("reason", Self.reasonLabel(reason))]).increment()
    }

    func retried(transport: String) {
        registry.counter("herald_retries_total", help: "Delivery attempts scheduled again after a temporary failure.",
                         labels: [("transport", transport)]).increment()
    }

    func invalidated(app: String, result: InvalidationResult) {
        registry.counter("herald_token_invalidations_total", help: "Token invalidations reported by APNs, by result.",
                         labels: [("app", app), ("result", result.rawValue)]).increment()
    }

    func latency(transport: String) -> Histogram {
        registry.histogram("herald_delivery_latency_seconds", help: "Time from acceptance to a final outcome, by transport.",
                           labels: [("transport", transport)],
                           buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600])
    }

    func batchTime(transport: String) -> Histogram {
        registry.histogram("herald_transport_batch_seconds", help: "Time a transport took to answer one batch.",
                           labels: [("transport", transport)])
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
