import FoundationEssentials
import Glibc

/// The delivery engine: drives one transport's deliveries from a ``DeliveryQueue`` to their
/// end. The daemon runs one per transport over its durable queue; `herald send` runs the same
/// worker over a ``MemoryDeliveryQueue``, so retries, expiry, invalidation, pausing and metrics
/// exist once.
///
/// It starts the transport (pausing while it cannot start), settles deliveries a crash left
/// ambiguous, then claims batches and hands them to the transport with at most `concurrency`
/// batches in flight. Every outcome goes through ``OutcomePolicy``.
///
/// When the transport numbers its deliveries in the inbox (``InboxNumberingTransport``, the
/// local transport) and the queue can do it in a claim (``InboxNumberingQueue``), each batch is
/// claimed and numbered in one transaction, and its events are written (``InboxNumbering/numbered(_:entries:)``)
/// while the next batch is claimed (one batch ahead). The worker also lends the numbering to the
/// queue's accepts (``InboxNumberingQueue/numberAtAccept(transport:_:)``): a delivery whose device
/// has a stream open here is numbered and claimed in its accept's own transaction and reaches
/// the worker with no claim. Batches of both kinds are written one at a time in commit order
/// (``InboxNumbering/committed(_:)``), so each device gets its events in number order; the
/// transport's answer and the outcome follow as for any batch.
///
/// - Important: a batch is never taken back from a transport that still holds it. A batch the
///   transport keeps past `deadline` is reported slow and its lease renewed until the transport
///   answers, and the answer is recorded however late: a slow peer cannot cause a second send.
///   Transports must answer within a bounded time (see ``Transport``).
public final class TransportWorker: Sendable {
    /// Tuning, read afresh for every batch (a reload may change it).
    public struct Settings: Sendable {
        public var retry: RetryPolicy
        /// Most deliveries in one batch.
        public var batchSize: Int
        /// Batches in flight at once. A batch numbered at its claim (``InboxNumbering``) holds
        /// its slot until its events are written; then, while it waits for the transport's answer
        /// (an acking client's ack), it counts among at most ``writtenBatchesPerSlot`` times as many.
        public var concurrency: Int
        /// A batch still with the transport after this long is logged as slow and its lease is
        /// renewed from then on.
        public var deadline: TimeInterval
        /// How long a claim holds a delivery before housekeeping may hand it out again.
        public var lease: TimeInterval
        /// Pause after a partial batch so the next one is fuller.
        public var linger: TimeInterval
        /// While paused, how often one delivery is sent to see whether the setup was fixed.
        public var probeInterval: TimeInterval
        /// Whether to renew the leases of slow batches (an in-process queue that nobody else
        /// claims from needs none).
        public var renewsLeases: Bool
        /// Presence grace and inbox TTL per app, for local deliveries.
        public var local: [String: LocalDeliveryRules] = [:]

        public init(retry: RetryPolicy, batchSize: Int, concurrency: Int, deadline: TimeInterval, lease: TimeInterval,
                    linger: TimeInterval = 0, probeInterval: TimeInterval = 60, renewsLeases: Bool = true) {
            self.retry = retry
            self.batchSize = batchSize
            self.concurrency = concurrency
            self.deadline = deadline
            self.lease = lease
            self.linger = linger
            self.probeInterval = probeInterval
            self.renewsLeases = renewsLeases
        }
    }

    /// Where the worker stands.
    public enum Status: Sendable, Equatable {
        case starting
        case started
        /// The transport cannot work until its setup is fixed (credentials refused, a start that
        /// fails); its deliveries wait in the queue.
        case paused(String)
        case stopped

        /// `started`, `starting`, `paused: <reason>` or `stopped`, for `/readyz` and logs.
        public var text: String {
            switch self {
            case .starting: return "starting"
            case .started: return "started"
            case .paused(let reason): return "paused: \(reason)"
            case .stopped: return "stopped"
            }
        }

        public var isPaused: Bool { if case .paused = self { return true } else { return false } }
    }

    private struct State {
        var status: Status = .starting
        var inFlight = 0
        /// Numbered batches whose events are written or being written, waiting for the transport's answer.
        var written = 0
        /// Of those, the batches accepts took (bounded by the accepts, not by the claims' limit:
        /// a client slow to ack does not hold the claims back).
        var writtenAtAccept = 0
        /// Numbered batches whose events are not all written yet.
        var writing = 0
        var stopping = false
        var probing = false
        var probeNow = false
        var nextProbe = Date.distantPast
        var loopDone = false
        var loop: Task<Void, Never>?
    }

    public let name: String
    public let transport: any Transport
    private let renderer: PayloadRenderer
    private let queue: any DeliveryQueue
    private let invalidator: TokenInvalidator
    private let clock: any WallClock
    private let logger: Logger
    private let metrics: DeliveryMetrics
    private let settings: @Sendable () -> Settings
    private let random: @Sendable () -> Double
    private let onStatus: (@Sendable (Status) -> Void)?
    private let onReroute: (@Sendable (Set<String>) -> Void)?
    private let state: Locked<State>
    private let work = WakeSignal()
    private let slot = WakeSignal()
    private let done = WakeSignal()
    /// The transport was started by the caller (a reload starts it before swapping).
    private let alreadyStarted: Bool
    /// Numbered claims (the transport's numbering and the queue that does it), when both offer it.
    private let numbering: (queue: any InboxNumberingQueue, numbering: any InboxNumbering, lent: SendableNumbering)?
    /// Numbered batches in commit order (claims' and accepts'), for their writes: see ``writeNumbered(_:)``.
    private let numberedBatches = AsyncStream.makeStream(of: NumberedClaim.self)

    /// - Parameters:
    ///   - configuration: the transport's configuration, which renders its payloads.
    ///   - invalidator: retires dead tokens (the timestamp rule).
    ///   - alreadyStarted: the caller started the transport.
    ///   - random: jitter in 0..<1 for retry backoff.
    ///   - onStatus: told of every status change (the CLI gives up on a paused transport).
    ///   - onReroute: told which transports deliveries were handed to (their workers have work).
    ///   - settings: read for every batch.
    public init(name: String, transport: any Transport, configuration: any TransportConfiguration,
                queue: any DeliveryQueue, invalidator: TokenInvalidator,
                clock: any WallClock, logger: Logger, metrics: DeliveryMetrics, alreadyStarted: Bool = false,
                random: @escaping @Sendable () -> Double, onStatus: (@Sendable (Status) -> Void)? = nil,
                onReroute: (@Sendable (Set<String>) -> Void)? = nil, settings: @escaping @Sendable () -> Settings) {
        self.name = name
        self.transport = transport
        self.renderer = PayloadRenderer(configuration: configuration)
        self.queue = queue
        self.invalidator = invalidator
        self.clock = clock
        self.logger = logger.labeled("worker").with(["transport": name])
        self.metrics = metrics
        self.alreadyStarted = alreadyStarted
        self.random = random
        self.onStatus = onStatus
        self.onReroute = onReroute
        self.settings = settings
        let state = Locked(State())
        self.state = state
        if let q = queue as? any InboxNumberingQueue, let n = (transport as? any InboxNumberingTransport)?.inboxNumbering {
            let batches = numberedBatches.continuation
            // On the store's writer thread, in commit order (and before the accept's 202): counted,
            // then lined up for the writes, nothing more.
            let lent = SendableNumbering(inner: n, renderer: renderer) { batch in
                state.withLock { st in
                    st.written += 1
                    st.writing += 1
                    if batch.atAccept { st.writtenAtAccept += 1 }
                }
                if case .terminated = batches.yield(batch) {
                    // The line has ended. Not for a claim's batch (claims end with the loop), and
                    // for an accept's only when the queue closed before this worker stopped (the
                    // loop waits for the accepts' batches before it ends the line): its deliveries
                    // stay `sent` until their lease ends or the next start settles them.
                    state.withLock { st in
                        st.written -= 1
                        st.writing -= 1
                        if batch.atAccept { st.writtenAtAccept -= 1 }
                    }
                }
            }
            numbering = (q, n, lent)
        } else {
            numbering = nil
        }
    }

    public var status: Status { state.withLock { $0.status } }
    public var batchesInFlight: Int { state.withLock { $0.inFlight + $0.written } }

    /// How many written batches (numbered at their claim, waiting for acks) may wait per slot of
    /// ``Settings/concurrency``: a claim is not held back by acks of earlier batches, and the
    /// deliveries claimed at once stay bounded.
    public static let writtenBatchesPerSlot = 16

    /// How many numbered batches may still be having their events written while the next claim
    /// runs: one, so a claim overlaps the previous batch's writes and numbered events do not
    /// pile up in memory ahead of the streams.
    public static let batchesWrittenDuringAClaim = 1

    /// Starts the worker's loop (once).
    public func start() {
        state.withLock { s in
            guard s.loop == nil else { return }
            s.loop = Task { [self] in
                await run()
                state.withLock { $0.loopDone = true }
                done.notify()
            }
        }
    }

    /// Tells the worker deliveries are waiting.
    public func wake() { work.notify() }

    /// A paused worker tries again now (its configuration was reloaded); others ignore it.
    public func resume() {
        state.withLock { $0.probeNow = true }
        work.notify()
    }

    private var isStopping: Bool { state.withLock { $0.stopping } }

    /// Stops claiming and waits up to `deadline` seconds (real time) for the batches in flight.
    /// A batch still with the transport after that is recorded when the transport answers
    /// (``Transport/shutdown()`` makes it answer; await ``finished(within:)`` before closing the queue),
    /// or else settled at the next start.
    /// - Returns: whether every batch finished in time.
    @discardableResult
    public func stop(deadline: TimeInterval) async -> Bool {
        let loop: Task<Void, Never>? = state.withLock { s in
            s.stopping = true
            return s.loop
        }
        work.notify()
        slot.notify()
        if loop != nil, !state.withLock({ $0.loopDone }) {
            await done.wait(until: Date().addingTimeInterval(deadline), clock: SystemClock())
        }
        let clean = loop == nil || state.withLock { $0.loopDone }
        setStatus(.stopped)
        return clean
    }

    /// Waits up to `seconds` (real time) for the loop and every batch it started to end.
    /// - Returns: whether they ended (a transport that breaks its bound keeps its batch).
    @discardableResult
    public func finished(within seconds: TimeInterval) async -> Bool {
        if state.withLock({ $0.loop == nil || $0.loopDone }) { return true }
        await done.wait(until: Date().addingTimeInterval(seconds), clock: SystemClock())
        return state.withLock { $0.loopDone }
    }

    private func setStatus(_ status: Status) {
        let (previous, changed): (Status, Bool) = state.withLock { s in
            let p = s.status
            s.status = status
            return (p, p != status)
        }
        guard changed else { return }
        var before: String? = nil
        if case .paused(let r) = previous { before = r }
        var now: String? = nil
        if case .paused(let r) = status { now = r }
        if before != nil || now != nil { metrics.paused(transport: name, reason: now, previous: before) }
        onStatus?(status)
    }

    // MARK: Loop

    private func run() async {
        guard await startTransport() else { return }
        await settleInterrupted()
        await withDiscardingTaskGroup { group in
            let atAccept = numbering.map { n in
                AcceptNumbering(numbering: n.lent, lease: { [settings] in settings().lease }, batchSize: { [settings] in settings().batchSize })
            }
            if let numbering, let atAccept {
                group.addTask { [self] in await writeNumbered(numbering.numbering) }
                numbering.queue.numberAtAccept(transport: name, atAccept)
            }
            while !isStopping {
                let s = settings()
                let (canClaim, paused, probeDue): (Bool, Bool, Bool) = state.withLock { st in
                    let paused = st.status.isPaused
                    let free = paused ? (!st.probing)
                        : st.inFlight < max(1, s.concurrency) && st.written - st.writtenAtAccept < max(1, s.concurrency) * Self.writtenBatchesPerSlot
                            && st.writing <= Self.batchesWrittenDuringAClaim
                    return (free, paused, st.probeNow || clock.now >= st.nextProbe)
                }
                if !canClaim {
                    await slot.wait()
                    continue
                }
                if paused && !probeDue {
                    let next = state.withLock { $0.nextProbe }
                    await work.wait(until: next, clock: clock)
                    continue
                }
                let now = clock.now
                let limit = paused ? 1 : max(1, s.batchSize)
                let claimed: [ClaimedDelivery]
                let entries: [InboxEntry?]
                do {
                    if !paused, let numbering {
                        let batch = try await numbering.queue.claim(transport: name, limit: limit, now: now, leaseUntil: now.addingTimeInterval(s.lease),
                                                                    numbering: numbering.lent)
                        (claimed, entries) = (batch.claimed, batch.entries)
                    } else {
                        (claimed, entries) = (try await queue.claim(transport: name, limit: limit, now: now, leaseUntil: now.addingTimeInterval(s.lease)), [])
                    }
                } catch {
                    logger.error("cannot claim deliveries", ["error": String(describing: error)])
                    await work.wait(until: clock.now.addingTimeInterval(1), clock: clock)
                    continue
                }
                // Numbered at its claim: committed() has lined it up for its writes, then its
                // transport's answer (``writeNumbered(_:)``), and counted it as written.
                let written = numbering != nil && entries.contains { $0 != nil }
                if isStopping {
                    // Claimed while stopping: hand them back at once rather than leave them leased
                    // (a numbered batch is written and answered as lined up).
                    if written { break }
                    try? await queue.complete(claimed.map { .requeued($0.delivery, at: now, reason: "the daemon stopped before sending",
                                                                      countsAttempt: false) }, now: now)
                    break
                }
                if claimed.isEmpty {
                    if paused { state.withLock { $0.probeNow = false } }
                    if batchesInFlight > 0 {
                        // A batch out may schedule a retry: look again when it ends (or work arrives).
                        await waitForWorkOrSlot()
                        continue
                    }
                    let due = (try? await queue.nextDue(transport: name)) ?? nil
                    let idle = now.addingTimeInterval(5)
                    await work.wait(until: min(due ?? idle, idle), clock: clock)
                    continue
                }
                if written {
                    // Lined up by committed() (counted there): nothing more to do here.
                } else {
                    state.withLock { st in
                        st.inFlight += 1
                        if paused {
                            st.probing = true
                            st.probeNow = false
                            st.nextProbe = now.addingTimeInterval(s.probeInterval)
                        }
                    }
                    if paused { logger.info("paused: sending one delivery to see whether the setup was fixed") }
                    group.addTask { [self] in
                        await process(claimed, settings: s, probe: paused)
                        state.withLock { st in
                            st.inFlight -= 1
                            if paused { st.probing = false }
                        }
                        slot.notify()
                    }
                }
                if !paused && claimed.count < s.batchSize && s.linger > 0 {
                    // A partial batch: let deliveries gather for a moment rather than pay the
                    // per-batch cost (a claim, a transport call, an outcome write) for one or two.
                    try? await clock.sleep(for: s.linger)
                }
            }
            // Accepts stop handing batches over (every one that took some has handed them over
            // when this returns), then the line ends once its last batch is written.
            if let numbering, let atAccept { await numbering.queue.stopNumberingAtAccept(transport: name, atAccept) }
            numberedBatches.continuation.finish()
        }
    }

    /// The transport's numbering as the engine lends it to a claim: deliveries that cannot be
    /// sent (their route cannot render them any more, or they expired) are not numbered; the
    /// batch's own pass finishes them as for any transport.
    private struct SendableNumbering: InboxNumbering {
        let inner: any InboxNumbering
        let renderer: PayloadRenderer
        /// Lines a committed batch up for its writes (on the store's writer thread).
        let lineUp: @Sendable (NumberedClaim) -> Void

        func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?] {
            var sendable: [Int] = []
            for (i, d) in deliveries.enumerated() {
                var payload = d.payload
                if payload == .unrendered {
                    guard let p = try? renderer.payload(for: d) else { continue }
                    payload = p
                }
                if !OutcomePolicy.hasExpired(payload, now: now) { sendable.append(i) }
            }
            var result = [InboxEntry.New?](repeating: nil, count: deliveries.count)
            guard !sendable.isEmpty else { return result }
            // Usually all of them: then the batch as it is, not a copy of each delivery.
            let given = inner.entries(for: sendable.count == deliveries.count ? deliveries : sendable.map { deliveries[$0] }, now: now)
            for (i, e) in zip(sendable, given) { result[i] = e }
            return result
        }

        func inboxMaxPerUser(_ app: String) -> Int { inner.inboxMaxPerUser(app) }

        func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {
            await inner.numbered(deliveries, entries: entries)
        }

        func committed(_ batch: NumberedClaim) { lineUp(batch) }
    }

    /// Writes the numbered batches (``InboxNumbering/numbered(_:entries:)``) one at a time in
    /// commit order, which keeps each device's events in number order, then has each answered
    /// by the transport beside the next batch's writes. A batch's writes are work (at most
    /// ``batchesWrittenDuringAClaim`` behind a claim); its answer is waiting (an acking client's
    /// ack). Batches come at most `batchSize` long (a claim's limit; the queue hands an accept's
    /// over in batches of ``AcceptNumbering/batchSize``).
    /// Ends when the loop has stopped and every batch lined up is written.
    private func writeNumbered(_ numbering: any InboxNumbering) async {
        await withDiscardingTaskGroup { group in
            for await batch in numberedBatches.stream {
                let deliveries = batch.claimed.map { c in
                    var d = c.delivery
                    d.acceptedAt = c.acceptedAt
                    return d
                }
                await numbering.numbered(deliveries, entries: batch.entries)
                state.withLock { $0.writing -= 1 }
                slot.notify()
                let s = settings()
                group.addTask { [self] in
                    await process(batch.claimed, settings: s, probe: false)
                    state.withLock { st in
                        st.written -= 1
                        if batch.atAccept { st.writtenAtAccept -= 1 }
                    }
                    slot.notify()
                }
            }
        }
    }

    /// Returns at the next ``wake()`` or when a batch ends.
    private func waitForWorkOrSlot() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.work.wait() }
            group.addTask { await self.slot.wait() }
            await group.next()
            group.cancelAll()
        }
    }

    /// Starts the transport; while it fails, the worker is paused and tries again every
    /// `probeInterval` or at ``resume()``. `false` when stopped first.
    private func startTransport() async -> Bool {
        if alreadyStarted {
            setStatus(.started)
            return true
        }
        while !isStopping {
            do {
                try await transport.start()
                setStatus(.started)
                logger.info("transport started")
                return true
            } catch {
                let reason = String(describing: error)
                let interval = settings().probeInterval
                if status != .paused(reason) {
                    logger.error("transport cannot start; its deliveries wait in the queue. Fix its configuration and send SIGHUP",
                                 ["error": reason, "retry_in_s": String(Int(interval))])
                }
                setStatus(.paused(reason))
                state.withLock { $0.probeNow = false }
                await work.wait(until: clock.now.addingTimeInterval(interval), clock: clock)
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
                confirmed = try await l.acceptedDeliveries(among: Set(interrupted.map { $0.delivery.messageID.lowercasedString }))
            } catch {
                ledger = "failed"
                logger.warning("cannot read the transport's ledger; interrupted deliveries are sent again", ["error": String(describing: error)])
            }
        }
        let now = clock.now
        var completions: [DeliveryCompletion] = []
        for c in interrupted {
            if confirmed.contains(c.delivery.messageID.lowercasedString) {
                completions.append(.finished(c.delivery, .delivered, reason: "confirmed by the transport's ledger after a restart")
                    .recording(DeliveryAttempt(route: name, at: now, outcome: "interrupted",
                                               answer: "confirmed by the transport's ledger after a restart", next: "delivered")))
                metrics.finished(transport: name, state: .delivered, reason: nil)
                metrics.latency(transport: name).observe(now.timeIntervalSince(c.acceptedAt))
            } else {
                completions.append(.requeued(c.delivery, at: now, reason: "interrupted by a restart; sent again")
                    .recording(DeliveryAttempt(route: name, at: now, outcome: "interrupted", answer: nil, next: "sent again")))
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

    private func process(_ batch: [ClaimedDelivery], settings s: Settings, probe: Bool) async {
        let start = clock.now
        var completions: [DeliveryCompletion] = []
        completions.reserveCapacity(batch.count)
        var sendable: [ClaimedDelivery] = []
        let latency = metrics.latency(transport: name)
        for var c in batch {
            if c.delivery.payload == .unrendered {
                do {
                    c.delivery.payload = try renderer.payload(for: c.delivery)
                } catch {
                    // The configuration changed since the accept (a route that no longer takes this content).
                    let reason = "cannot render for \(name): \(error)"
                    completions.append(.finished(c.delivery, .rejected, reason: reason)
                        .recording(DeliveryAttempt(route: name, at: start, outcome: "not_sent", answer: reason, next: "rejected")))
                    metrics.finished(transport: name, state: .rejected, reason: "render")
                    latency.observe(start.timeIntervalSince(c.acceptedAt))
                    continue
                }
            }
            if OutcomePolicy.hasExpired(c.delivery.payload, now: start) {
                completions.append(.finished(c.delivery, .expired, reason: "expired before sending")
                    .recording(DeliveryAttempt(route: name, at: start, outcome: "not_sent", answer: "expired before sending", next: "expired")))
                metrics.finished(transport: name, state: .expired, reason: "expired")
                latency.observe(start.timeIntervalSince(c.acceptedAt))
            } else {
                sendable.append(c)
            }
        }
        var pausedFor: String? = nil
        var answered = false
        if !sendable.isEmpty {
            let deliveries = sendable.map { c in
                var d = c.delivery
                d.acceptedAt = c.acceptedAt
                return d
            }
            var outcomes = await deliver(deliveries, claims: sendable, started: start, settings: s)
            let after = clock.now
            metrics.batchTime(transport: name).observe(after.timeIntervalSince(start))
            if outcomes.count != deliveries.count {
                logger.error("transport returned the wrong number of outcomes", ["expected": String(deliveries.count), "got": String(outcomes.count)])
                outcomes = deliveries.map { _ in .retry(after: nil, reason: "transport \(name) returned a wrong number of outcomes") }
            }
            let policy = OutcomePolicy(retry: s.retry, local: s.local)
            for (c, outcome) in zip(sendable, outcomes) {
                let d = c.delivery
                // Jitter matters only for a retry (the default source makes a system call).
                let jitter: Double
                if case .retry = outcome { jitter = random() } else { jitter = 0 }
                let action = policy.action(for: outcome, delivery: d, acceptedAt: c.acceptedAt, now: after, random: jitter)
                // What the platform answered and what follows, appended to the delivery's history
                // with its outcome (a postponed delivery was not sent: no attempt).
                let entry = DeliveryAttempt(route: name, at: after, outcome: outcome, action: action)
                switch action {
                case .finish(let final, let reason):
                    answered = true
                    var receipt: String? = nil
                    if case .delivered(let r?, _) = outcome { receipt = r }
                    completions.append(.finished(d, final, reason: reason, receipt: receipt).recording(entry))
                    metrics.finished(transport: name, state: final, reason: reason)
                    latency.observe(after.timeIntervalSince(c.acceptedAt))
                    if final != .delivered {
                        logger.info("delivery finished", ["token": Redact.token(d.token), "app": d.app, "state": final.rawValue,
                                                          "reason": reason ?? "", "attempts": String(d.attempt), "notification": d.notificationID])
                    }
                case .retry(let at, let reason):
                    answered = true
                    completions.append(.requeued(d, at: at, reason: reason).recording(entry))
                    metrics.retried(transport: name)
                case .invalidate(let since, let reason):
                    answered = true
                    await invalidator.invalidate(app: d.app, token: d.token, since: since, reason: reason)
                    if let fallback = d.fallback {
                        var retired = entry
                        retired.next = "retired device, fallback to \(fallback)"
                        completions.append(.rerouted(d, to: fallback, at: after, reason: "\(reason); kept for \(fallback)").recording(retired))
                        metrics.rerouted(transport: name)
                    } else {
                        completions.append(.finished(d, .invalidToken, reason: reason).recording(entry))
                        metrics.finished(transport: name, state: .invalidToken, reason: reason)
                        latency.observe(after.timeIntervalSince(c.acceptedAt))
                    }
                case .park(let until, let reason):
                    answered = true
                    completions.append(.parked(d, until: until, reason: reason).recording(entry))
                    metrics.parked(transport: name)
                case .postpone(let at, let reason):
                    // Not sent (its peer is held back): neither an answer nor an attempt.
                    completions.append(.requeued(d, at: at, reason: reason, countsAttempt: false))
                    metrics.retried(transport: name)
                case .reroute(let fallback, let reason):
                    answered = true
                    completions.append(.rerouted(d, to: fallback, at: after, reason: reason).recording(entry))
                    metrics.rerouted(transport: name)
                case .pause(let reason):
                    pausedFor = reason
                    completions.append(.requeued(d, at: after, reason: "transport paused: \(reason)", countsAttempt: false).recording(entry))
                }
            }
        }
        if let reason = pausedFor {
            pause(reason, settings: s)
        } else if probe && answered {
            resumed()
        }
        // Kept and written again while the store fails: an answered delivery is never sent twice for want of its outcome.
        if await OutcomeRecorder(queue: queue, clock: clock, logger: logger).record(completions, isStopping: { isStopping }) {
            // A retry changes when the next delivery is due: let the claim loop look again.
            if completions.contains(where: { $0.state == .queued && $0.transport == nil }) { work.notify() }
            let rerouted = Set(completions.compactMap(\.transport))
            if !rerouted.isEmpty { onReroute?(rerouted) }
        }
    }

    /// Calls the transport and waits for its answer however long it takes. Past the deadline the
    /// batch is logged as slow and, when the queue is shared, its lease is renewed while the
    /// transport holds it, so nobody claims and sends it a second time.
    private func deliver(_ deliveries: [Delivery], claims: [ClaimedDelivery], started: Date, settings s: Settings) async -> [DeliveryOutcome] {
        guard s.renewsLeases else { return await transport.deliver(deliveries) }
        return await withTaskGroup(of: [DeliveryOutcome]?.self) { group in
            group.addTask { [transport] in await transport.deliver(deliveries) }
            group.addTask { [self] in
                await keepClaimed(claims, started: started, settings: s)
                return nil
            }
            var outcomes: [DeliveryOutcome] = []
            for await result in group {
                if let result {
                    outcomes = result
                    group.cancelAll()
                }
            }
            return outcomes
        }
    }

    /// Sleeps until the deadline, then reports the batch slow and renews its lease every third of
    /// the lease until cancelled (the transport answered).
    private func keepClaimed(_ claims: [ClaimedDelivery], started: Date, settings s: Settings) async {
        do { try await clock.sleep(until: started.addingTimeInterval(s.deadline)) } catch { return }
        var first = true
        while !Task.isCancelled {
            do {
                try await queue.renewLeases(claims, until: clock.now.addingTimeInterval(s.lease))
            } catch {
                logger.error("cannot renew the lease of a slow batch", ["error": String(describing: error)])
            }
            if first {
                first = false
                metrics.slowBatch(transport: name)
                logger.warning("the transport has held a batch past server.transportDeadline; its deliveries stay claimed until it answers",
                               ["deliveries": String(claims.count), "deadline_s": String(s.deadline)])
            }
            do { try await clock.sleep(for: max(0.01, s.lease / 3)) } catch { return }
        }
    }

    private func pause(_ reason: String, settings s: Settings) {
        let wasPaused: Bool = state.withLock { st in
            let was = st.status.isPaused
            st.nextProbe = clock.now.addingTimeInterval(s.probeInterval)
            return was
        }
        if !wasPaused {
            logger.error("transport paused: its setup is refused, not the notifications; they stay queued. Fix the credentials or configuration and send SIGHUP",
                         ["reason": reason, "probe_every_s": String(Int(s.probeInterval))])
        }
        setStatus(.paused(reason))
    }

    private func resumed() {
        guard status.isPaused else { return }
        setStatus(.started)
        logger.notice("transport resumed: the peer accepted its setup again")
        work.notify()
    }
}
