import FoundationEssentials
import Glibc
import HeraldCore
import HeraldHTTP2

/// Sends one webhook's events, in the order of the outbox, batch after batch (issue 38).
///
/// A 2xx acknowledges the whole batch (the cursor moves past it); anything else (a status, a
/// timeout, a connection error; redirects are never followed) is retried after an exponential
/// backoff with jitter, or after the receiver's `Retry-After` when that is longer. Events older
/// than the webhook's `retention` are dropped, counted and logged once per run of drops. While
/// the receiver is down later events wait behind earlier ones: at least once, in order.
///
/// With several nodes on one database, the node holding the webhook's lease sends; the others
/// wait until it gives the lease up or it runs out.
public final class WebhookSender: Sendable {
    /// How the wait between failed attempts grows.
    public struct Backoff: Sendable {
        /// The first wait. Default 1 s.
        public var initial: TimeInterval
        /// The longest wait. Default 5 min.
        public var maximum: TimeInterval
        public init(initial: TimeInterval = 1, maximum: TimeInterval = 300) {
            self.initial = initial
            self.maximum = maximum
        }

        /// The wait after `failures` consecutive failures: `initial × 2^(failures-1)`, capped, times a jitter in [0.5, 1].
        public func delay(failures: Int) -> TimeInterval {
            let base = min(maximum, initial * pow(2, Double(min(max(failures - 1, 0), 30))))
            return base * Double.random(in: 0.5...1)
        }
    }

    public let webhook: WebhooksConfiguration.Webhook
    private let outbox: any EventOutbox
    private let node: String
    private let poster: WebhookPoster
    private let clock: any WallClock
    private let logger: Logger
    private let backoff: Backoff
    /// How often an idle sender looks for new events.
    private let pollInterval: TimeInterval
    /// How long a lease lasts (renewed at half).
    private let leaseDuration: TimeInterval
    private let sent: Counter
    private let failedAttempts: Counter
    private let dropped: Counter
    private let pending: Gauge
    private let oldestAge: Gauge
    /// When the oldest event waiting was recorded (`nil` when none), as of the last read: `/readyz`'s age.
    private let oldestPending = Locked<Date?>(nil)

    /// - Parameters:
    ///   - node: this node's name in the webhook's lease (unique per daemon).
    ///   - pollInterval: how often an idle sender reads the outbox.
    public init(webhook: WebhooksConfiguration.Webhook, outbox: any EventOutbox, node: String, clock: any WallClock = SystemClock(),
                logger: Logger, metrics: MetricsRegistry, backoff: Backoff = Backoff(), pollInterval: TimeInterval = 0.2,
                leaseDuration: TimeInterval = 30) throws(WebhookError) {
        self.webhook = webhook
        self.outbox = outbox
        self.node = node
        self.clock = clock
        self.logger = logger.with(["webhook": webhook.id])
        self.backoff = backoff
        self.pollInterval = pollInterval
        self.leaseDuration = leaseDuration
        poster = try WebhookPoster(webhook: webhook, clock: clock, logger: logger, metrics: metrics)
        let label = [("webhook", webhook.id)]
        sent = metrics.counter("herald_webhook_events_sent_total", help: "Events a webhook's receiver acknowledged.", labels: label)
        failedAttempts = metrics.counter("herald_webhook_failed_attempts_total", help: "POSTs to a webhook not answered with a 2xx.", labels: label)
        dropped = metrics.counter("herald_webhook_events_dropped_total", help: "Events dropped after the webhook's retention.", labels: label)
        pending = metrics.gauge("herald_webhook_pending_events", help: "Events waiting for a webhook (in its last read, at most one scan).", labels: label)
        oldestAge = metrics.gauge("herald_webhook_oldest_pending_seconds", help: "Age of the oldest event waiting for a webhook.", labels: label)
    }

    /// The age now of the oldest event waiting as of the last read (0 when none); it grows while
    /// the sender waits to retry.
    public var oldestPendingAge: TimeInterval {
        oldestPending.withLock { $0 }.map { max(0, clock.now.timeIntervalSince($0)) } ?? 0
    }

    /// Starts the HTTP client.
    public func start() throws(WebhookError) { try poster.start() }

    /// Stops the HTTP client and gives the lease up.
    public func stop() async {
        await poster.stop()
        try? await outbox.releaseWebhook(webhook.id, node: node)
    }

    /// Sends until the task is cancelled.
    public func run() async {
        var cursor: Int64?
        var leaseUntil = Date.distantPast
        var failures = 0
        var dropping = 0
        while !Task.isCancelled {
            do {
                let now = clock.now
                if cursor == nil || now >= leaseUntil.addingTimeInterval(-leaseDuration / 2) {
                    let until = now.addingTimeInterval(leaseDuration)
                    if let c = try await outbox.leaseWebhook(webhook.id, node: node, now: now, until: until) {
                        // Another node may have moved the cursor while it held the lease.
                        if cursor == nil || c > cursor! { cursor = c }
                        leaseUntil = until
                    } else {
                        cursor = nil
                        try await clock.sleep(for: leaseDuration / 2)
                        continue
                    }
                }
                guard let from = cursor else { continue }
                let page = try await EventPage.read(outbox, after: from, limit: webhook.batch, filter: webhook.filter)
                // Past the retention: dropped, counted, logged once per run of drops.
                let cutoff = now.addingTimeInterval(-webhook.retention)
                let expired = page.events.prefix { $0.createdAt < cutoff }
                if !expired.isEmpty {
                    let through = expired.last!.sequence
                    if try await outbox.acknowledge(webhook: webhook.id, node: node, through: through) {
                        cursor = through
                        dropped.increment(by: Int64(expired.count))
                        if dropping == 0 {
                            logger.error("dropping events older than the webhook's retention", ["retention_seconds": String(Int(webhook.retention)),
                                                                                                 "first_event": expired.first!.id])
                        }
                        dropping += expired.count
                    } else { cursor = nil }
                    continue
                }
                if dropping > 0 {
                    logger.warning("dropped events older than the webhook's retention", ["events": String(dropping)])
                    dropping = 0
                }
                pending.set(Double(page.events.count))
                let oldest = page.events.first.map { max(0, now.timeIntervalSince($0.createdAt)) } ?? 0
                oldestAge.set(oldest)
                oldestPending.withLock { $0 = page.events.first?.createdAt }
                if page.events.isEmpty {
                    if page.next > from {
                        // Only events this webhook does not take: move past them.
                        if try await outbox.acknowledge(webhook: webhook.id, node: node, through: page.next) { cursor = page.next } else { cursor = nil }
                    } else {
                        try await clock.sleep(for: pollInterval)
                    }
                    continue
                }
                switch await poster.post(page.events) {
                case .accepted:
                    failures = 0
                    sent.increment(by: Int64(page.events.count))
                    if try await outbox.acknowledge(webhook: webhook.id, node: node, through: page.next) { cursor = page.next } else {
                        // The lease was lost while the batch was out: another node owns the webhook now.
                        cursor = nil
                    }
                case .refused(let status, let retryAfter):
                    failures += 1
                    failedAttempts.increment()
                    let wait = max(backoff.delay(failures: failures), min(retryAfter ?? 0, backoff.maximum))
                    logger.warning("webhook refused a batch; retrying", ["status": String(status), "events": String(page.events.count),
                                                                        "retry_in_ms": String(Int(wait * 1000))])
                    try await clock.sleep(for: wait)
                case .failed(let reason):
                    failures += 1
                    failedAttempts.increment()
                    let wait = backoff.delay(failures: failures)
                    logger.warning("webhook did not answer; retrying", ["reason": reason, "events": String(page.events.count),
                                                                       "retry_in_ms": String(Int(wait * 1000))])
                    try await clock.sleep(for: wait)
                }
            } catch is CancellationError {
                return
            } catch {
                if Task.isCancelled { return }
                logger.error("webhook outbox read failed", ["error": "\(error)"])
                try? await clock.sleep(for: 1)
            }
        }
    }
}

/// One webhook's HTTP client: signs a batch and POSTs it once (the sender's attempts, and the
/// `ping` of `herald webhooks test`). Redirects are not followed (libcurl's default, kept); a
/// response body is kept only up to 64 KB; each attempt has the webhook's `timeout`.
public final class WebhookPoster: Sendable {
    /// What one attempt gave.
    public enum Attempt: Sendable, Equatable {
        /// A 2xx.
        case accepted(status: Int)
        /// Another status (a 3xx too: never followed); `retryAfter` from the receiver's header.
        case refused(status: Int, retryAfter: TimeInterval?)
        /// No answer (timeout, connection error).
        case failed(String)
    }

    public let webhook: WebhooksConfiguration.Webhook
    private let client: HTTP2Client
    private let clock: any WallClock

    public init(webhook: WebhooksConfiguration.Webhook, clock: any WallClock = SystemClock(), logger: Logger,
                metrics: MetricsRegistry) throws(WebhookError) {
        self.webhook = webhook
        self.clock = clock
        var c = HTTP2ClientConfiguration(host: webhook.url.host, port: webhook.url.port)
        c.engine = .curl
        c.allowHTTP1 = true
        c.maxHTTP1Connections = 1
        c.plainText = !webhook.url.secure
        c.caFile = webhook.caFile
        c.timeout = webhook.timeout
        c.connectTimeout = webhook.timeout
        c.connectionRetries = 0
        do {
            client = try HTTP2Client(configuration: c, name: "webhook-\(webhook.id)", logger: logger, metrics: metrics)
        } catch {
            throw .configuration("webhooks \(webhook.id): \(error)")
        }
    }

    /// Starts the HTTP client.
    public func start() throws(WebhookError) {
        do { try client.start() } catch { throw .configuration("webhooks \(webhook.id): \(error)") }
    }

    /// Stops the HTTP client.
    public func stop() async { await client.stop(deadline: 1) }

    /// POSTs `events` once, signed with every secret.
    public func post(_ events: [EventRecord]) async -> Attempt {
        let body = EventRecord.body(events)
        let signature = WebhookSignature.sign(body, secrets: webhook.secrets, timestamp: Int64(clock.now.timeIntervalSince1970))
        let request = HTTP2Request(method: "POST", path: webhook.url.path,
                                   headers: [HTTP2Header("content-type", "application/json"), HTTP2Header("user-agent", "Herald-Webhooks")],
                                   ownHeaders: [HTTP2Header(WebhookSignature.header, signature), HTTP2Header(WebhookSignature.webhookIDHeader, webhook.id)],
                                   body: HTTP2Body(body))
        switch await client.send([request]).first {
        case .answered(let r)?:
            if (200..<300).contains(r.status) { return .accepted(status: r.status) }
            return .refused(status: r.status, retryAfter: r.retryAfter)
        case .noAnswer(let reason)?: return .failed(reason)
        case .failed(let error)?: return .failed("\(error)")
        case .endedByHooks?, nil: return .failed("no result")
        }
    }

    /// The `ping` event `herald webhooks test` sends.
    public func ping() -> EventRecord {
        var w = JSONWriter(capacity: 80)
        w.object { o in o.string("webhook", webhook.id) }
        return EventRecord(type: EventType.ping.rawValue, createdAt: clock.now, app: "", data: w.string)
    }
}
