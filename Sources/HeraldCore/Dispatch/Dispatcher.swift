import Dispatch
import FoundationEssentials
import Glibc

/// Sends notifications in-process (`herald send`): the fan-out, then the same delivery engine
/// the daemon runs (``TransportWorker``), over a ``MemoryDeliveryQueue`` instead of the durable
/// queue. Retries follow the injected clock; dead tokens are retired with Apple's timestamp rule.
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
    private let metrics: DeliveryMetrics
    private let invalidator: TokenInvalidator

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
        self.metrics = DeliveryMetrics(registry: metrics)
        self.invalidator = TokenInvalidator(store: store, logger: logger, metrics: metrics)
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

    /// Sends a planned notification through the delivery engine: one ``TransportWorker`` per
    /// transport over a ``MemoryDeliveryQueue``.
    public func execute(_ plan: DispatchPlan,
                        onReport: @escaping @Sendable (DeliveryReport) -> Void = { _ in }) async -> [DeliveryReport] {
        logSkipped(plan)
        let collected = Locked<[DeliveryReport]>([])
        await deliver(transports: Set(plan.deliveries.map(\.transport)), onReport: { report in
            collected.withLock { $0.append(report) }
            onReport(report)
        }) { queue in
            _ = try? await queue.enqueue(self.queued(plan), idempotencySince: self.clock.now)
        }
        return collected.value
    }

    /// Sends one notification to `request`'s users and tokens and then to every token of
    /// `chunks`, in bounded memory: a chunk is planned (one store look-up) and queued only once
    /// fewer than `window` deliveries are unfinished, and a delivery is forgotten as soon as
    /// `onReport` has its outcome. Tokens repeated within a chunk are sent once; the same token in
    /// two chunks is sent twice.
    /// - Returns: how many devices ended in each state.
    public func sendBulk(_ request: NotificationRequest, chunks: some Sequence<[String]>, window: Int = 20_000,
                         onReport: @escaping @Sendable (DeliveryReport) -> Void) async throws(DispatchError) -> [DeliveryState: Int] {
        guard let app = configuration.app(request.app) else { throw .unknownApp(request.app, known: configuration.apps.keys.sorted()) }
        let notificationID = UUIDSource.timeOrdered().lowercasedString
        let first = request.users.isEmpty && request.tokens.isEmpty ? nil : try await fanOut.plan(request, notificationID: notificationID)
        let counts = Locked<[DeliveryState: Int]>([:])
        let failure = Locked<DispatchError?>(nil)
        await deliver(transports: Set(app.routes), onReport: { report in
            counts.withLock { $0[report.outcome, default: 0] += 1 }
            onReport(report)
        }) { queue in
            if let first {
                logSkipped(first)
                _ = try? await queue.enqueue(queued(first), idempotencySince: clock.now)
            }
            var offset = request.tokens.count
            var next = request
            next.users = []
            for chunk in chunks {
                await queue.waitForRoom(below: max(1, window - chunk.count))
                next.tokens = chunk
                do throws(DispatchError) {
                    let plan = try await fanOut.plan(next, notificationID: notificationID, tokenIndexOffset: offset)
                    _ = try? await queue.enqueue(queued(plan), idempotencySince: clock.now)
                } catch {
                    failure.withLock { $0 = error }
                    return
                }
                offset += chunk.count
            }
        }
        if let error = failure.value { throw error }
        return counts.value
    }

    private func logSkipped(_ plan: DispatchPlan) {
        if plan.skippedOverLimit > 0 {
            logger.notice("devices over the per-user limit were skipped",
                          ["app": plan.app.id, "skipped": String(plan.skippedOverLimit), "limit": String(plan.app.maxDevicesPerUser)])
        }
    }

    /// The plan as the queue stores it: its deliveries, and the devices already final.
    private func queued(_ plan: DispatchPlan) -> QueuedNotification {
        QueuedNotification(plan: plan, idempotencyKey: nil, createdAt: clock.now)
    }

    /// Runs a worker for each of `transports` over a new in-memory queue while `feed` fills it,
    /// then until every delivery is final.
    private func deliver(transports names: Set<String>, onReport: @escaping @Sendable (DeliveryReport) -> Void,
                         feed: (MemoryDeliveryQueue) async -> Void) async {
        let running = Locked<[String: TransportWorker]>([:])
        let queue = MemoryDeliveryQueue(onFinal: onReport, onEnqueue: { transports in
            let targets = running.withLock { w in transports.compactMap { w[$0] } }
            for worker in targets { worker.wake() }
        })
        let workers = startWorkers(queue, transports: names)
        running.withLock { w in for worker in workers { w[worker.name] = worker } }
        await feed(queue)
        await queue.drained()
        for worker in workers { await worker.stop(deadline: 0) }
        for worker in workers { await worker.finished(within: 1) }
        await queue.close()
    }

    /// Starts a worker for each transport. A transport that is not available, or that pauses
    /// (its setup refused), fails its waiting deliveries with the reason: nobody is there to fix
    /// it during a CLI run.
    private func startWorkers(_ queue: MemoryDeliveryQueue, transports names: Set<String>) -> [TransportWorker] {
        var workers: [TransportWorker] = []
        for name in names.sorted() {
            guard let transport = transports[name], let spec = configuration.transports[name] else {
                let why = unavailable[name] ?? "not configured"
                abandon(queue, transport: name, reason: "transport \(name) is not available: \(why)")
                continue
            }
            let tuning = self.tuning
            let worker = TransportWorker(
                name: name, transport: transport, configuration: spec.configuration, queue: queue, invalidator: invalidator, clock: clock, logger: logger,
                metrics: metrics, alreadyStarted: true, random: random,
                onStatus: { [self] status in
                    if case .paused(let reason) = status {
                        abandon(queue, transport: name, reason: "transport \(name) paused: \(reason)")
                    }
                },
                settings: {
                    TransportWorker.Settings(retry: tuning.retry, batchSize: max(1, min(tuning.batchSize, transport.preferredBatchSize)),
                                             concurrency: tuning.concurrentBatches, deadline: Self.noDeadline, lease: Self.noDeadline,
                                             renewsLeases: false)
                })
            worker.start()
            workers.append(worker)
        }
        return workers
    }

    /// Nobody else claims from an in-memory queue: leases and deadlines never matter (a year).
    private static let noDeadline: TimeInterval = 365 * 86_400

    private func abandon(_ queue: MemoryDeliveryQueue, transport: String, reason: String) {
        for report in queue.abandon(transport: transport, reason: reason) {
            metrics.finished(transport: transport, state: report.outcome, reason: report.reason)
        }
    }
}

