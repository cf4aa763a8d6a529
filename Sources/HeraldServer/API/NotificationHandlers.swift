import Dispatch
import FoundationEssentials
import Glibc
import HeraldCore

/// `POST /v1/notifications` and `GET /v1/notifications/{id}`.
extension API {
    func sendNotification(_ request: HTTPRequest) async throws -> HTTPResponse {
        let notification: NotificationRequest
        let blocks = dependencies.snapshot().configuration.overrideBlocks
        if let common = NotificationBody.decodeCommon(request.body, blocks: blocks) {
            notification = common
        } else {
            let json = try parseBody(request)
            do { notification = try NotificationRequest.fromAPI(json, blocks: .known(blocks)) } catch { throw Self.issuesError(error.issues) }
        }
        return Self.receiptResponse(try await accept(notification))
    }

    /// Plans, bounds and durably enqueues a notification (the one accept path, shared by
    /// `/v1/notifications` and the front ends): the receipt comes back once it is committed.
    /// - Throws: ``APIError`` (400 for the request, 503 when the queue is full or backed up).
    func accept(_ notification: NotificationRequest) async throws -> EnqueueReceipt {
        let snapshot = dependencies.snapshot()
        let configuration = snapshot.configuration
        let server = configuration.server
        _ = try app(notification.app, field: "app", in: configuration)
        let accepted = now
        let since = accepted.addingTimeInterval(-server.idempotencyWindow)

        if let key = notification.idempotencyKey,
           let receipt = try await dependencies.queue.receipt(app: notification.app, idempotencyKey: key, since: since) {
            serverMetrics.replayed()
            return receipt
        }
        if dependencies.queue.waitingAccepts >= server.maxPendingAccepts {
            serverMetrics.refused("commit_backlog")
            throw APIError.unavailable("overloaded", "too many notifications are waiting to be written; retry after \(server.retryAfter) s",
                                       retryAfter: server.retryAfter)
        }

        let plan: DispatchPlan
        do {
            plan = try await snapshot.fanOut.plan(notification)
        } catch {
            switch error {
            case .invalidRequest(let field, let message): throw APIError.invalid(field, message)
            case .unknownApp: throw APIError.invalid("app", error.description)
            case .store(let message): throw APIError(status: 500, code: "store", message: message)
            case .storeUnavailable(let message): throw APIError.unavailable("store_unavailable", message, retryAfter: server.retryAfter)
            }
        }

        // Each route judged its own deliveries: refuse the request only when no device can take it.
        if plan.deliveries.isEmpty, let first = plan.refusals.first {
            throw APIError.invalid(first.problem.field, "no device of this notification can take it: "
                                   + plan.refusals.map(\.description).joined(separator: "; "))
        }

        var perTransport: [String: Int] = [:]
        for d in plan.deliveries { perTransport[d.transport, default: 0] += 1 }
        let depth = dependencies.queue.depth()
        for (transport, n) in perTransport.sorted(by: { $0.key < $1.key }) {
            let bound = server.maxQueued(for: transport)
            if (depth[transport]?.backlog ?? 0) + n > bound {
                serverMetrics.refused("queue_full")
                throw APIError.unavailable("queue_full", "transport \(transport) has \(depth[transport]?.backlog ?? 0) deliveries waiting (bound \(bound)); retry after \(server.retryAfter) s",
                                           retryAfter: server.retryAfter)
            }
        }

        let queued = QueuedNotification(plan: plan, idempotencyKey: notification.idempotencyKey, createdAt: accepted)
        // The last point where a shutdown may still refuse: past it the notification is being
        // committed, and the answer (202) says so however long the commit takes.
        if Task.isCancelled { throw APIError.shuttingDown }
        var receipt = try await dependencies.queue.enqueue(queued, idempotencySince: since)
        if !receipt.replayed { receipt.refused = plan.reports }
        if receipt.replayed {
            serverMetrics.replayed()
        } else {
            serverMetrics.accepted(app: notification.app)
            serverMetrics.acceptedDeliveries(receipt.deliveries)
            for r in plan.reports {
                deliveryMetrics.finished(transport: r.transport ?? "none", state: r.outcome, reason: r.reason)
            }
            if !perTransport.isEmpty { dependencies.wake(Set(perTransport.keys)) }
            if plan.skippedOverLimit > 0 {
                apiLogger.notice("devices over the per-user limit were skipped",
                                 ["app": plan.app.id, "notification": receipt.id, "skipped": String(plan.skippedOverLimit)])
            }
        }
        return receipt
    }

    static func receiptResponse(_ receipt: EnqueueReceipt) -> HTTPResponse {
        HTTPResponse.json(202, headers: receipt.replayed ? [("Idempotent-Replayed", "true")] : []) { o in
            o.string("id", receipt.id)
            o.int("deliveries", receipt.deliveries)
            if !receipt.refused.isEmpty {
                o.array("refused") { w in
                    for (i, r) in receipt.refused.enumerated() {
                        if i > 0 { w.raw(UInt8(ascii: ",")) }
                        w.object { e in
                            e.string("token", r.token)
                            if let u = r.user { e.string("user", u) } else { e.null("user") }
                            if let t = r.transport { e.string("route", t) } else { e.null("route") }
                            e.string("state", r.outcome.rawValue)
                            e.string("reason", r.reason)
                        }
                    }
                }
            }
        }
    }

    func notificationStatus(_ id: String) async throws -> HTTPResponse {
        let transports = dependencies.snapshot().configuration.transports
        guard let status = try await dependencies.queue.status(notificationID: id) else {
            throw APIError.notFound("no notification \"\(id)\" (once every delivery is final, a notification is deleted when it is "
                                    + "older than server.retention and server.idempotencyWindow)")
        }
        return HTTPResponse.json(200) { o in
            o.string("id", status.id)
            o.string("app", status.app)
            o.string("created_at", status.createdAt.iso8601)
            o.string("idempotency_key", status.idempotencyKey)
            var counts: [String: Int] = [:]
            for d in status.deliveries { counts[d.state.rawValue, default: 0] += 1 }
            o.object("summary") { s in
                for state in DeliveryState.allCases { if let n = counts[state.rawValue] { s.int(state.rawValue, n) } }
            }
            o.array("deliveries") { w in
                for (i, d) in status.deliveries.enumerated() {
                    if i > 0 { w.raw(UInt8(ascii: ",")) }
                    w.object { e in
                        e.int64("id", d.id)
                        e.string("token", d.token)
                        if let u = d.user { e.string("user", u) } else { e.null("user") }
                        if let t = d.transport { e.string("transport", t) } else { e.null("transport") }
                        e.string("state", d.state.rawValue)
                        e.int("attempts", d.attempts)
                        if let r = Self.awaitingAckReason(d, app: status.app, notification: status.id, streams: dependencies.streams) ?? d.lastReason {
                            e.string("reason", r)
                        } else { e.null("reason") }
                        e.string("message_id", d.messageID)
                        if let r = d.receipt { e.string("receipt", r) }
                        // Deprecated: APNs deliveries keep the field they always had (the `apns-id` APNs confirmed).
                        if let t = d.transport, transports[t]?.reads("apns") == true { e.string("apns_id", d.receipt ?? d.messageID) }
                        e.string("updated_at", d.updatedAt.iso8601)
                        if d.state == .queued, let next = d.nextAttemptAt { e.string("next_attempt_at", next.iso8601) }
                        e.array("history") { h in
                            for (j, attempt) in d.history.enumerated() {
                                if j > 0 { h.raw(UInt8(ascii: ",")) }
                                h.object { attempt.write(into: &$0) }
                            }
                        }
                    }
                }
            }
        }
    }
}
