import FoundationEssentials
import HeraldCore
import HeraldEvents

/// Housekeeping (lease reclaim, pruning) and the store check behind `/readyz`.
extension Daemon {
    /// Every `server.maintenanceInterval`: returns expired leases to the queue, prunes finished
    /// notifications older than both `server.retention` and `server.idempotencyWindow`.
    func maintain() async {
        while !Task.isCancelled {
            let interval = configuration.server.maintenanceInterval
            do { try await options.clock.sleep(for: interval) } catch { return }
            await maintenanceOnce()
        }
    }

    /// One round of housekeeping (public for tests driving a test clock).
    public func maintenanceOnce() async {
        guard let queue = running.withLock({ $0?.queue }) else { return }
        let c = configuration.server
        let now = options.clock.now
        do {
            let reclaimed = try await queue.reclaimExpiredLeases(now: now)
            if reclaimed > 0 {
                logger.warning("deliveries whose lease expired went back to the queue", ["count": String(reclaimed)])
                pool.wakeAll()
            }
            let cutoff = now.addingTimeInterval(-max(c.retention, c.idempotencyWindow))
            let pruned = try await queue.prune(createdBefore: cutoff)
            if pruned > 0 { logger.info("pruned finished deliveries", ["count": String(pruned), "before": cutoff.iso8601]) }
            if let events = running.withLock({ $0?.storage.events }) {
                // Kept for events.retention, and never before a webhook's own retention ends.
                let keep = configuration.webhooks.map(\.retention).reduce(configuration.events.retention, max)
                let gone = try await events.pruneEvents(createdBefore: now.addingTimeInterval(-keep))
                if gone > 0 { logger.info("pruned events past events.retention", ["count": String(gone)]) }
            }
            if let inbox = running.withLock({ $0?.storage.inbox }) {
                for (id, app) in configuration.apps where app.foreground != .pushOnly {
                    let gone = try await inbox.prune(app: id, createdBefore: now.addingTimeInterval(-app.inbox.ttl))
                    if gone > 0 { logger.info("pruned inbox entries past inbox.ttl", ["app": id, "count": String(gone)]) }
                    // The size bound of what waits for a device: the oldest parked beyond inbox.maxPerUser end expired.
                    if let local = configuration.localTransport(app: app) {
                        let dropped = try await queue.expireParked(transport: local, app: id, keepPerUser: app.inbox.maxPerUser, now: now)
                        if dropped > 0 { logger.info("expired parked deliveries beyond inbox.maxPerUser", ["app": id, "count": String(dropped)]) }
                    }
                }
            }
        } catch {
            logger.error("housekeeping failed", ["error": String(describing: error)])
        }
    }

    /// Whether the queue answers a query (for `/readyz`); logs when that changes.
    func storeAnswers(_ queue: any DeliveryQueue) async -> Bool {
        var problem: String?
        do { try await queue.ping() } catch { problem = String(describing: error) }
        let changed = storeHealthy.withLock { h in defer { h = problem == nil }; return h != (problem == nil) }
        if changed, let problem {
            logger.error("the store does not answer; /readyz reports not ready until it does", ["error": problem])
        } else if changed {
            logger.notice("the store answers again")
        }
        return problem == nil
    }
}
