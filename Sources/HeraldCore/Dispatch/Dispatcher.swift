import Dispatch
import FoundationEssentials
import Glibc

/// Sends notifications in-process: fan-out, routing, batches to transports, retries with
/// backoff on the injected clock, token invalidation with Apple's timestamp rule.
///
/// The CLI's `herald send` uses it directly; the daemon uses the same ``FanOut`` and
/// ``OutcomePolicy`` over its durable queue.
public final class Dispatcher: Sendable {
    /// Tuning of the in-process dispatcher.
    public struct Configuration: Sendable {
        public var retry: RetryPolicy
        /// Most deliveries in one transport call (the transport's own limit also applies).
        public var batchSize: Int
        /// Batches in flight at once per transport.
        public var concurrentBatches: Int

        public init(retry: RetryPolicy = RetryPolicy(), batchSize: Int = 500, concurrentBatches: Int = 4) {
            self.retry = retry
            self.batchSize = batchSize
            self.concurrentBatches = concurrentBatches
        }
    }

    public let configuration: HeraldConfiguration
    private let tuning: Configuration
    private let fanOut: FanOut
    private let store: any TokenStore
    private let transports: [String: any Transport]
    private let unavailable: [String: String]
    private let clock: any WallClock
    private let logger: Logger
    private let random: @Sendable () -> Double
    private let metrics: DispatchMetrics

    /// - Parameters:
    ///   - transports: started transports by name.
    ///   - unavailable: transports that could not start, with the reason (their deliveries fail).
    ///   - random: source of jitter in 0..<1 (inject a constant in tests).
    public init(configuration: HeraldConfiguration, tuning: Configuration? = nil, store: any TokenStore,
                transports: [String: any Transport], unavailable: [String: String] = [:],
                clock: any WallClock = SystemClock(), logger: Logger, metrics: MetricsRegistry = MetricsRegistry(),
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.configuration = configuration
        self.tuning = tuning ?? Configuration(retry: configuration.delivery.retry, batchSize: configuration.delivery.batchSize)
        self.fanOut = FanOut(configuration: configuration, store: store)
        self.store = store
        self.transports = transports
        self.unavailable = unavailable
        self.clock = clock
        self.logger = logger.labeled("dispatcher")
        self.random = random
        self.metrics = DispatchMetrics(registry: metrics)
    }

    /// Plans and sends `request`; returns one report per device.
    /// - Parameter onReport: called once per device as soon as its outcome is final.
    public func send(_ request: NotificationRequest,
                     onReport: @escaping @Sendable (DeliveryReport) -> Void = { _ in }) async throws(DispatchError) -> [DeliveryReport] {
        let plan = try await fanOut.plan(request)
        return await execute(plan, onReport: onReport)
    }

    /// Plans `request` without sending (the fan-out, for dry runs and the daemon).
    public func plan(_ request: NotificationRequest) async throws(DispatchError) -> DispatchPlan {
        try await fanOut.plan(request)
    }

    /// Sends a planned notification.
    public func execute(_ plan: DispatchPlan,
                        onReport: @escaping @Sendable (DeliveryReport) -> Void = { _ in }) async -> [DeliveryReport] {
        if plan.skippedOverLimit > 0 {
            logger.notice("devices over the per-user limit were skipped",
                          ["app": plan.app.id, "skipped": String(plan.skippedOverLimit), "limit": String(plan.app.maxDevicesPerUser)])
        }
        plan.reports.forEach(onReport)
        let byTransport = Dictionary(grouping: plan.deliveries, by: \.transport)
        let reports = await withTaskGroup(of: [DeliveryReport].self) { group in
            for (name, deliveries) in byTransport {
                group.addTask { await self.run(transportName: name, deliveries: deliveries, onReport: onReport) }
            }
            var all: [DeliveryReport] = []
            for await part in group { all += part }
            return all
        }
        return plan.reports + reports
    }

    /// Drives one transport's deliveries to a final outcome, retrying on the clock.
    private func run(transportName: String, deliveries: [Delivery],
                     onReport: @escaping @Sendable (DeliveryReport) -> Void) async -> [DeliveryReport] {
        var reports: [DeliveryReport] = []
        func finish(_ d: Delivery, _ outcome: DeliveryState, _ reason: String?, apnsID: String? = nil) {
            let report = DeliveryReport(token: d.token, user: d.user, transport: d.transport, outcome: outcome,
                                        reason: reason, attempts: d.attempt, apnsID: apnsID)
            metrics.finished(transport: d.transport, outcome: outcome, reason: reason)
            reports.append(report)
            onReport(report)
        }

        guard let transport = transports[transportName] else {
            let why = unavailable[transportName] ?? "not configured"
            for d in deliveries { finish(d, .failed, "transport \(transportName) is not available: \(why)") }
            return reports
        }
        let policy = OutcomePolicy(retry: tuning.retry)
        let batchSize = max(1, min(tuning.batchSize, transport.preferredBatchSize))
        var pending: [(due: Date, delivery: Delivery)] = deliveries.map { (clock.now, $0) }

        while !pending.isEmpty {
            let now = clock.now
            let due = pending.filter { $0.due <= now }.map(\.delivery)
            if due.isEmpty {
                let next = pending.map(\.due).min()!
                do { try await clock.sleep(until: next) } catch {
                    for item in pending { finish(item.delivery, .failed, "cancelled before retry") }
                    return reports
                }
                continue
            }
            pending.removeAll { $0.due <= now }

            var sendable: [Delivery] = []
            for d in due {
                if OutcomePolicy.hasExpired(d.content, now: now) { finish(d, .expired, "expired before sending") } else { sendable.append(d) }
            }
            let batches = stride(from: 0, to: sendable.count, by: batchSize).map { Array(sendable[$0..<min($0 + batchSize, sendable.count)]) }
            let results = await sendBatches(batches, through: transport)

            let after = clock.now
            for (delivery, outcome) in results {
                switch policy.action(for: outcome, attempt: delivery.attempt, content: delivery.content, now: after, random: random()) {
                case .finish(let final, let reason):
                    var apnsID: String? = nil
                    if case .delivered(let id, _) = outcome { apnsID = id ?? delivery.apnsID.lowercasedString }
                    finish(delivery, final, reason, apnsID: apnsID)
                case .retry(let at, let reason):
                    metrics.retried(transport: transportName)
                    logger.debug("retry scheduled", ["token": Redact.token(delivery.token), "transport": transportName,
                                                     "attempt": String(delivery.attempt), "reason": reason,
                                                     "in_ms": String(Int(at.timeIntervalSince(after) * 1000))])
                    var next = delivery
                    next.attempt += 1
                    pending.append((at, next))
                case .invalidate(let since, let reason):
                    await invalidate(delivery, since: since, reason: reason)
                    finish(delivery, .invalidToken, reason)
                case .pause(let reason):
                    finish(delivery, .failed, reason)
                }
            }
        }
        return reports
    }

    /// Sends batches with at most `concurrentBatches` in flight; returns (delivery, outcome) pairs.
    private func sendBatches(_ batches: [[Delivery]], through transport: any Transport) async -> [(Delivery, DeliveryOutcome)] {
        await withTaskGroup(of: [(Delivery, DeliveryOutcome)].self) { group in
            var results: [(Delivery, DeliveryOutcome)] = []
            var iterator = batches.makeIterator()
            var inFlight = 0
            func launch() -> Bool {
                guard let batch = iterator.next() else { return false }
                group.addTask {
                    let outcomes = await transport.deliver(batch)
                    if outcomes.count != batch.count {
                        return batch.map { ($0, .retry(after: nil, reason: "transport \(transport.name) returned \(outcomes.count) outcomes for \(batch.count) deliveries")) }
                    }
                    return Array(zip(batch, outcomes))
                }
                return true
            }
            while inFlight < max(1, tuning.concurrentBatches), launch() { inFlight += 1 }
            for await part in group {
                results += part
                if !launch() { continue }
            }
            return results
        }
    }

    private func invalidate(_ delivery: Delivery, since: Date, reason: String) async {
        do {
            let result = try await store.invalidate(app: delivery.app, token: delivery.token, at: since, reason: reason)
            metrics.invalidated(app: delivery.app, result: result)
            logger.info("token invalidated", ["token": Redact.token(delivery.token), "app": delivery.app,
                                              "reason": reason, "result": result.rawValue, "since": since.iso8601])
        } catch {
            logger.error("could not invalidate token", ["token": Redact.token(delivery.token), "app": delivery.app,
                                                        "error": String(describing: error)])
        }
    }
}

/// The dispatcher's metric handles.
struct DispatchMetrics: Sendable {
    let registry: MetricsRegistry

    func finished(transport: String, outcome: DeliveryState, reason: String?) {
        registry.counter("herald_deliveries_total", help: "Deliveries by transport, final outcome and reason.",
                         labels: [("transport", transport), ("outcome", outcome.rawValue), ("reason", Self.reasonLabel(reason))]).increment()
    }

    func retried(transport: String) {
        registry.counter("herald_retries_total", help: "Delivery attempts scheduled again after a temporary failure.",
                         labels: [("transport", transport)]).increment()
    }

    func invalidated(app: String, result: InvalidationResult) {
        registry.counter("herald_token_invalidations_total", help: "Token invalidations reported by APNs, by result.",
                         labels: [("app", app), ("result", result.rawValue)]).increment()
    }

    /// The first word of a reason (Apple's reason code), so label sets stay small.
    static func reasonLabel(_ reason: String?) -> String {
        guard let reason, !reason.isEmpty else { return "" }
        return String(reason.prefix { $0.isLetter || $0.isNumber || $0 == "_" }.prefix(40))
    }
}
