import FoundationEssentials
import Glibc

/// The delivery engine's metric handles, the same for the daemon and `herald send`:
/// `herald_deliveries_total{transport,outcome,reason}`, `herald_retries_total{transport}`,
/// `herald_delivery_latency_seconds{transport}`, `herald_transport_batch_seconds{transport}`,
/// `herald_transport_paused{transport,reason}`, `herald_transport_slow_batches_total{transport}`,
/// `herald_parked_total{transport}`, `herald_rerouted_total{transport}`.
///
/// Handles are cached by label values: looking one up in the registry renders and escapes the
/// labels, too slow for every delivery.
public final class DeliveryMetrics: Sendable {
    public let registry: MetricsRegistry
    private let counters = Locked<[Key: Counter]>([:])
    private let histograms = Locked<[Key: Histogram]>([:])

    /// A metric name with up to three label values.
    private struct Key: Hashable {
        var name: String
        var a: String
        var b: String
        var c: String
    }

    public init(registry: MetricsRegistry) { self.registry = registry }

    private func counter(_ name: String, _ help: String, _ labels: [(String, String)]) -> Counter {
        let key = Key(name: name, a: labels.count > 0 ? labels[0].1 : "", b: labels.count > 1 ? labels[1].1 : "",
                      c: labels.count > 2 ? labels[2].1 : "")
        if let c = counters.withLock({ $0[key] }) { return c }
        let c = registry.counter(name, help: help, labels: labels)
        counters.withLock { $0[key] = c }
        return c
    }

    private func histogram(_ name: String, _ help: String, transport: String, buckets: [Double]) -> Histogram {
        let key = Key(name: name, a: transport, b: "", c: "")
        if let h = histograms.withLock({ $0[key] }) { return h }
        let h = registry.histogram(name, help: help, labels: [("transport", transport)], buckets: buckets)
        histograms.withLock { $0[key] = h }
        return h
    }

    /// A delivery reached a final state.
    public func finished(transport: String, state: DeliveryState, reason: String?) {
        counter("herald_deliveries_total", "Deliveries by transport, final outcome and reason.",
                [("transport", transport), ("outcome", state.rawValue), ("reason", Self.reasonLabel(reason))]).increment()
    }

    public func retried(transport: String) {
        counter("herald_retries_total", "Delivery attempts scheduled again after a temporary failure.",
                [("transport", transport)]).increment()
    }

    /// A local delivery found its device not connected and waits for it (`herald_parked_total`).
    public func parked(transport: String) {
        counter("herald_parked_total", "Deliveries parked to wait for their device's stream (presence grace or inbox).",
                [("transport", transport)]).increment()
    }

    /// A delivery was handed to its fallback transport (`herald_rerouted_total{transport}`: the one it left).
    public func rerouted(transport: String) {
        counter("herald_rerouted_total", "Deliveries handed from this transport to their fallback route.",
                [("transport", transport)]).increment()
    }

    /// A batch outlasted the transport deadline (it stays claimed until the transport answers).
    public func slowBatch(transport: String) {
        counter("herald_transport_slow_batches_total", "Batches a transport held past server.transportDeadline.",
                [("transport", transport)]).increment()
    }

    /// Sets `herald_transport_paused{transport,reason}`: 1 for the reason a transport is paused
    /// for now (its first word, such as `InvalidProviderToken`), 0 for the reason it had before.
    public func paused(transport: String, reason: String?, previous: String?) {
        if let previous {
            registry.gauge("herald_transport_paused", help: Self.pausedHelp,
                           labels: [("transport", transport), ("reason", Self.reasonLabel(previous))]).set(0)
        }
        if let reason {
            registry.gauge("herald_transport_paused", help: Self.pausedHelp,
                           labels: [("transport", transport), ("reason", Self.reasonLabel(reason))]).set(1)
        }
    }

    private static let pausedHelp = "1 while a transport is paused because its credentials or setup are wrong, by reason."

    public func latency(transport: String) -> Histogram {
        histogram("herald_delivery_latency_seconds", "Time from acceptance to a final outcome, by transport.", transport: transport,
                  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600])
    }

    public func batchTime(transport: String) -> Histogram {
        histogram("herald_transport_batch_seconds", "Time a transport took to answer one batch.", transport: transport,
                  buckets: Histogram.latencyBuckets)
    }

    /// The first word of a reason (Apple's reason code), so label sets stay small.
    public static func reasonLabel(_ reason: String?) -> String {
        guard let reason, !reason.isEmpty else { return "" }
        // ASCII first (every reason Herald and the platforms give): the same label without
        // Unicode property look-ups per character, once per finished delivery.
        var ascii = 0
        for b in reason.utf8 {
            guard b < 0x80 else { return String(reason.prefix { $0.isLetter || $0.isNumber || $0 == "_" }.prefix(40)) }
            let wordByte = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F
            if !wordByte || ascii == 40 { break }
            ascii += 1
        }
        return String(decoding: reason.utf8.prefix(ascii), as: UTF8.self)
    }
}
