import FoundationEssentials
import Glibc
import HeraldCore

/// Drives one transport's deliveries: starts the transport (retrying while it fails), settles
/// deliveries a crash left ambiguous, then claims batches from the queue and hands them to the
/// transport with at most `concurrency` batches in flight, each under a deadline.
///
/// Every transport has its own worker, claims and limits, so a broken or slow transport only
/// holds up its own deliveries.
final class TransportWorker: Sendable {
    /// Tuning read afresh for every batch (a reload may change it).
    struct Settings: Sendable {
        var retry: RetryPolicy
        var batchSize: Int
        var concurrency: Int
        var deadline: TimeInterval
        var lease: TimeInterval
        /// Pause after a partial batch so the next one is fuller.
        var linger: TimeInterval = 0
    }

    enum Status: Sendable, Equatable {
        case starting
        case started
        case failed(String)
        case stopped

        var text: String {
            switch self {
            case .starting: return "starting"
            case .started: return "started"
            case .failed(let reason): return "failed: \(reason)"
            case .stopped: return "stopped"
            }
        }
    }

    private struct State {
        var status: Status = .starting
        var inFlight = 0
        var stopping = false
        var loop: Task<Void, Never>?
    }

    let name: String
    let transport: any Transport
    private let queue: any DeliveryQueue
    private let store: any TokenStore
    private let clock: any WallClock
    private let logger: Logger
    private let metrics: ServerMetrics
    private let settings: @Sendable () -> Settings
    private let random: @Sendable () -> Double
    private let state = Locked(State())
    private let work = WakeSignal()
    private let slot = WakeSignal()
    /// How long to wait between attempts to start a failing transport.
    private let restartDelay: TimeInterval
    /// The transport was started by the caller (a reload starts it before swapping).
    private let alreadyStarted: Bool

    init(name: String, transport: any Transport, queue: any DeliveryQueue, store: any TokenStore, clock: any WallClock,
         logger: Logger, metrics: ServerMetrics, restartDelay: TimeInterval = 30, alreadyStarted: Bool = false,
         random: @escaping @Sendable () -> Double, settings: @escaping @Sendable () -> Settings) {
        self.name = name
        self.transport = transport
        self.queue = queue
        self.store = store
        self.clock = clock
        self.logger = logger.labeled("worker").with(["transport": name])
        self.metrics = metrics
        self.restartDelay = restartDelay
        self.random = random
        self.settings = settings
        self.alreadyStarted = alreadyStarted
    }

    var status: Status { state.withLock { $0.status } }
    var batchesInFlight: Int { state.withLock { $0.inFlight } }

    /// Starts the worker's loop.
    func start() {
        let task = Task.detached { [self] in await run() }
        state.withLock { $0.loop = task }
    }

    /// Tells the worker deliveries are waiting.
    func wake() { work.notify() }

    private var isStopping: Bool { state.withLock { $0.stopping } }

    /// Stops claiming and waits (up to `deadline` seconds of real time) for batches in flight.
    /// Batches still running after that stay `sent` in the queue and are settled at the next start.
    /// - Returns: whether every batch finished.
    @discardableResult
    func stop(deadline: TimeInterval) async -> Bool {
        let loop: Task<Void, Never>? = state.withLock { s in
            s.stopping = true
            return s.loop
        }
        work.notify()
        slot.notify()
        loop?.cancel()
        await loop?.value
        let end = Date().addingTimeInterval(deadline)
        while batchesInFlight > 0 && Date() < end {
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        let clean = batchesInFlight == 0
        state.withLock { $0.status = .stopped }
        return clean
    }

    // MARK: Loop

    private func run() async {
        guard await startTransport() else { return }
        await settleInterrupted()
        while !isStopping {
            let s = settings()
            let canClaim: Bool = state.withLock { $0.inFlight < max(1, $0.stopping ? 0 : s.concurrency) }
            if !canClaim {
                await slot.wait()
                continue
            }
            let now = clock.now
            let claimed: [ClaimedDelivery]
            do {
                claimed = try await queue.claim(transport: name, limit: max(1, s.batchSize), now: now,
                                                leaseUntil: now.addingTimeInterval(s.lease))
            } catch {
                logger.error("cannot claim deliveries", ["error": String(describing: error)])
                await work.wait(until: clock.now.addingTimeInterval(1), clock: clock)
                continue
            }
            if isStopping {
                // Claimed while stopping: hand them back at once rather than leave them leased.
                let back = claimed.map { DeliveryCompletion.requeued($0.delivery, at: now, reason: "the daemon stopped before sending", countsAttempt: false) }
                try? await queue.complete(back, now: now)
                break
            }
            if claimed.isEmpty {
                let due = (try? await queue.nextDue(transport: name)) ?? nil
                let idle = now.addingTimeInterval(5)
                await work.wait(until: min(due ?? idle, idle), clock: clock)
                continue
            }
            state.withLock { $0.inFlight += 1 }
            Task.detached { [self] in
                await process(claimed, settings: s)
                state.withLock { $0.inFlight -= 1 }
                slot.notify()
            }
            if claimed.count < s.batchSize && s.linger > 0 {
                // A partial batch: let deliveries gather for a moment rather than pay the
                // per-batch cost (a claim, a transport call, an outcome write) for one or two.
                try? await clock.sleep(for: s.linger)
            }
        }
    }

    /// Starts the transport, retrying every `restartDelay` while it fails; `false` when stopped first.
    private func startTransport() async -> Bool {
        if alreadyStarted {
            state.withLock { $0.status = .started }
            return true
        }
        while !isStopping {
            do {
                try await transport.start()
                state.withLock { $0.status = .started }
                logger.info("transport started")
                return true
            } catch {
                let reason = String(describing: error)
                state.withLock { $0.status = .failed(reason) }
                logger.error("transport failed to start; its deliveries wait in the queue", ["error": reason, "retry_in_s": String(Int(restartDelay))])
                await work.wait(until: clock.now.addingTimeInterval(restartDelay), clock: clock)
            }
        }
        return false
    }

    /// Deliveries an earlier run handed to this transport without recording the outcome: ask the
    /// transport's ledger which it accepted; send the rest again (same `apns-id`).
    private func settleInterrupted() async {
        let interrupted: [ClaimedDelivery]
        do { interrupted = try await queue.interrupted(transport: name) } catch {
            logger.error("cannot read interrupted deliveries", ["error": String(describing: error)])
            return
        }
        guard !interrupted.isEmpty else { return }
        var confirmed: Set<String> = []
        var ledger = "none"
        if let l = transport as? any DeliveryLedger {
            ledger = "checked"
            do {
                confirmed = try await l.acceptedDeliveries(among: Set(interrupted.map { $0.delivery.apnsID.lowercasedString }))
            } catch {
                ledger = "failed"
                logger.warning("cannot read the transport's ledger; interrupted deliveries are sent again", ["error": String(describing: error)])
            }
        }
        let now = clock.now
        var completions: [DeliveryCompletion] = []
        for c in interrupted {
            let d = c.delivery
            let id = d.apnsID.lowercasedString
            if confirmed.contains(id) {
                completions.append(.finished(d, .delivered, reason: nil))
                metrics.finished(transport: name, state: .delivered, reason: nil)
                metrics.latency(transport: name).observe(now.timeIntervalSince(c.acceptedAt))
            } else {
                completions.append(.requeued(d, at: now, reason: "interrupted by a restart; sent again"))
            }
        }
        do {
            try await queue.complete(completions, now: now)
            logger.notice("settled deliveries interrupted by a restart",
                          ["interrupted": String(interrupted.count), "confirmed": String(confirmed.count),
                           "sent_again": String(interrupted.count - confirmed.count), "ledger": ledger])
        } catch {
            logger.error("cannot settle interrupted deliveries", ["error": String(describing: error)])
        }
    }

    // MARK: One batch

    private func process(_ batch: [ClaimedDelivery], settings s: Settings) async {
        let start = clock.now
        var completions: [DeliveryCompletion] = []
        completions.reserveCapacity(batch.count)
        var sendable: [ClaimedDelivery] = []
        let latency = metrics.latency(transport: name)
        for c in batch {
            if OutcomePolicy.hasExpired(c.delivery.content, now: start) {
                completions.append(.finished(c.delivery, .expired, reason: "expired before sending"))
                metrics.finished(transport: name, state: .expired, reason: "expired")
                latency.observe(start.timeIntervalSince(c.acceptedAt))
            } else {
                sendable.append(c)
            }
        }
        var straggler: Task<[DeliveryOutcome], Never>? = nil
        if !sendable.isEmpty {
            let deliveries = sendable.map(\.delivery)
            let (result, task) = await deliver(deliveries, deadline: s.deadline)
            straggler = result == nil ? task : nil
            let after = clock.now
            metrics.batchTime(transport: name).observe(after.timeIntervalSince(start))
            var outcomes = result ?? deliveries.map { _ in
                .retry(after: nil, reason: "transport \(name) did not answer within \(s.deadline) s")
            }
            if outcomes.count != deliveries.count {
                logger.error("transport returned the wrong number of outcomes", ["expected": String(deliveries.count), "got": String(outcomes.count)])
                outcomes = deliveries.map { _ in .retry(after: nil, reason: "transport \(name) returned a wrong number of outcomes") }
            }
            let policy = OutcomePolicy(retry: s.retry)
            for (c, outcome) in zip(sendable, outcomes) {
                let d = c.delivery
                // Jitter matters only for a retry (the default source makes a system call).
                let jitter: Double
                if case .retry = outcome { jitter = random() } else { jitter = 0 }
                switch policy.action(for: outcome, attempt: d.attempt, content: d.content, now: after, random: jitter) {
                case .finish(let final, let reason):
                    let state = final
                    var apnsID: String? = nil
                    // The id the peer confirmed; `nil` (keep the stored one) when it is the one sent.
                    if case .delivered(let id?, _) = outcome, id != d.apnsID.lowercasedString { apnsID = id }
                    completions.append(.finished(d, state, reason: reason, apnsID: apnsID))
                    metrics.finished(transport: name, state: state, reason: reason)
                    latency.observe(after.timeIntervalSince(c.acceptedAt))
                    if state != .delivered {
                        logger.info("delivery finished", ["token": Redact.token(d.token), "app": d.app, "state": state.rawValue,
                                                          "reason": reason ?? "", "attempts": String(d.attempt), "notification": d.notificationID])
                    }
                case .retry(let at, let reason):
                    completions.append(.requeued(d, at: at, reason: reason))
                    metrics.retried(transport: name)
                case .invalidate(let since, let reason):
                    await invalidate(d, since: since, reason: reason)
                    completions.append(.finished(d, .invalidToken, reason: reason))
                    metrics.finished(transport: name, state: .invalidToken, reason: reason)
                    latency.observe(after.timeIntervalSince(c.acceptedAt))
                case .pause(let reason):
                    completions.append(.requeued(d, at: after, reason: reason, countsAttempt: false))
                }
            }
        }
        do {
            try await queue.complete(completions, now: clock.now)
            // A retry changes when the next delivery is due: let the claim loop look again.
            if completions.contains(where: { $0.state == .queued }) {
                work.notify()
            }
        } catch {
            logger.error("cannot record outcomes; the deliveries return to the queue when their lease ends",
                         ["error": String(describing: error), "deliveries": String(completions.count)])
        }
        // A transport that missed its deadline still holds this batch's slot until it returns,
        // so a stuck peer cannot pile up unbounded calls.
        if let straggler { _ = await straggler.value }
    }

    /// Calls the transport; `nil` when it did not answer within `deadline` (then the call goes on
    /// in the returned task).
    private func deliver(_ batch: [Delivery], deadline: TimeInterval) async -> ([DeliveryOutcome]?, Task<[DeliveryOutcome], Never>) {
        let transport = self.transport
        let call = Task.detached { await transport.deliver(batch) }
        let clock = self.clock
        let end = clock.now.addingTimeInterval(deadline)
        // A race that does not wait for the loser: the transport call may never return.
        let waiter = Locked<CheckedContinuation<[DeliveryOutcome]?, Never>?>(nil)
        let timer = Locked<Task<Void, Never>?>(nil)
        @Sendable func finish(_ value: [DeliveryOutcome]?) {
            let c: CheckedContinuation<[DeliveryOutcome]?, Never>? = waiter.withLock { w in
                let c = w
                w = nil
                return c
            }
            c?.resume(returning: value)
        }
        let result: [DeliveryOutcome]? = await withCheckedContinuation { continuation in
            waiter.withLock { $0 = continuation }
            Task.detached { finish(await call.value) }
            let t = Task.detached {
                try? await clock.sleep(until: end)
                if !Task.isCancelled { finish(nil) }
            }
            timer.withLock { $0 = t }
        }
        timer.withLock { $0 }?.cancel()
        return (result, call)
    }

    private func invalidate(_ d: Delivery, since: Date, reason: String) async {
        do {
            let result = try await store.invalidate(app: d.app, token: d.token, at: since, reason: reason)
            metrics.invalidated(app: d.app, result: result)
            logger.info("token invalidated", ["token": Redact.token(d.token), "app": d.app, "reason": reason,
                                              "result": result.rawValue, "since": since.iso8601])
        } catch {
            logger.error("could not invalidate token", ["token": Redact.token(d.token), "app": d.app, "error": String(describing: error)])
        }
    }
}
