import FoundationEssentials
import Glibc
import HeraldCore

/// The daemon's webhook senders: one task per configured webhook, owned here, started with the
/// daemon, replaced on a reload (SIGHUP) and stopped on shutdown. Deliveries never wait for them.
public final class WebhookService: Sendable {
    private struct Running: Sendable {
        var sender: WebhookSender
        var task: Task<Void, Never>
    }

    private let outbox: any EventOutbox
    private let node: String
    private let clock: any WallClock
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let backoff: WebhookSender.Backoff
    private let running = Locked<[String: Running]>([:])

    /// - Parameter node: this daemon's name in the webhooks' leases (unique per process).
    public init(outbox: any EventOutbox, node: String, clock: any WallClock, logger: Logger, metrics: MetricsRegistry,
                backoff: WebhookSender.Backoff = WebhookSender.Backoff()) {
        self.outbox = outbox
        self.node = node
        self.clock = clock
        self.logger = logger.labeled("webhooks")
        self.metrics = metrics
        self.backoff = backoff
    }

    /// Starts a sender per webhook of `webhooks` not running yet with the same settings, and
    /// stops the others (a reload passes the new list). A webhook that cannot start is logged
    /// (its events wait in the outbox).
    public func update(_ webhooks: [WebhooksConfiguration.Webhook]) async {
        let wanted = Dictionary(uniqueKeysWithValues: webhooks.map { ($0.id, $0) })
        let stale = running.withLock { r -> [Running] in
            let gone = r.filter { wanted[$0.key] != $0.value.sender.webhook }
            for key in gone.keys { r[key] = nil }
            return Array(gone.values)
        }
        for s in stale {
            s.task.cancel()
            await s.task.value
            await s.sender.stop()
        }
        for w in webhooks where running.withLock({ $0[w.id] == nil }) {
            do {
                // The cursor of a new webhook is placed now (after the last event), before this returns.
                let now = clock.now
                _ = try await outbox.leaseWebhook(w.id, node: node, now: now, until: now.addingTimeInterval(30))
                let sender = try WebhookSender(webhook: w, outbox: outbox, node: node, clock: clock, logger: logger, metrics: metrics, backoff: backoff)
                try sender.start()
                let task = Task { await sender.run() }
                running.withLock { $0[w.id] = Running(sender: sender, task: task) }
                logger.info("webhook started", ["webhook": w.id, "url": w.url.description])
            } catch {
                logger.error("webhook cannot start; its events wait in the outbox", ["webhook": w.id, "error": "\(error)"])
            }
        }
    }

    /// The age of each running webhook's oldest waiting event.
    public var oldestPendingAges: [String: TimeInterval] {
        running.withLock { $0.mapValues { $0.sender.oldestPendingAge } }
    }

    /// Stops every sender and gives their leases up.
    public func stop() async {
        await update([])
    }
}
