import Foundation
import HeraldCore
import HeraldEvents
import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// The webhook sender against a real HTTP receiver: order, retries, rotation, redirects, slow receivers, retention.
struct WebhookSenderTests {
    let secret = Secret("whsec_test")

    /// An outbox in a fresh SQLite file, `count` events in it, and a sender for `url`.
    func withSender(port: Int, path: String = "/hook", secrets: [Secret]? = nil, batch: Int = 100, timeout: TimeInterval = 5,
                    retention: TimeInterval = 3600, events: (SQLiteDeliveryQueue) async throws -> [EventRecord],
                    _ body: (WebhookSender, [EventRecord], MetricsRegistry) async throws -> Void) async throws {
        let dir = try TemporaryDirectory(prefix: "herald-webhooks")
        defer { dir.remove() }
        let queue = try SQLiteDeliveryQueue(path: dir.file("herald.db"), synchronous: .normal)
        let metrics = MetricsRegistry()
        let hook = WebhooksConfiguration.Webhook(id: "backend", url: try WebhookURL("http://127.0.0.1:\(port)\(path)"), secrets: secrets ?? [secret],
                                                 events: ["delivery", "transport"], batch: batch, timeout: timeout, retention: retention)
        let sender = try WebhookSender(webhook: hook, outbox: queue, node: "node-a", logger: .disabled, metrics: metrics,
                                       backoff: .init(initial: 0.05, maximum: 0.2), pollInterval: 0.02)
        // The webhook starts after the last event when first seen: take the lease before the events.
        _ = try await queue.leaseWebhook("backend", node: "node-a", now: Date(), until: Date().addingTimeInterval(30))
        let appended = try await events(queue)
        try sender.start()
        let task = Task { await sender.run() }
        do {
            try await body(sender, appended, metrics)
        } catch {
            task.cancel()
            await task.value
            await sender.stop()
            await queue.close()
            throw error
        }
        task.cancel()
        await task.value
        await sender.stop()
        await queue.close()
    }

    static func transportEvents(_ n: Int, at time: Date = Date()) -> [EventRecord] {
        (0..<n).map { EventRecord.transport("t\($0)", paused: $0 % 2 == 0, reason: "r\($0)", now: time) }
    }

    func appendStored(_ queue: SQLiteDeliveryQueue, _ events: [EventRecord]) async throws -> [EventRecord] {
        try await queue.append(events)
        return try await queue.events(after: 0, limit: 100_000).filter { e in events.contains { $0.id == e.id } }
    }

    @Test func everyEventArrivesSignedInOrderInBatches() async throws {
        let receiver = try WebhookReceiver(secrets: [secret])
        try await withSender(port: receiver.port, batch: 100, events: { try await appendStored($0, Self.transportEvents(250)) }) { sender, events, metrics in
            #expect(await eventually(timeout: 20) { receiver.posts.flatMap(\.ids).count >= 250 })
            let posts = receiver.posts
            #expect(posts.flatMap(\.ids) == events.map(\.id))
            #expect(posts.map(\.ids.count) == [100, 100, 50])
            #expect(posts.allSatisfy { $0.verified == [true] && $0.webhookID == "backend" && $0.contentType == "application/json" && $0.path == "/hook" })
            // Counted once the last 2xx is back (just after the receiver recorded the POST).
            #expect(await eventually(timeout: 20) { metrics.value("herald_webhook_events_sent_total", labels: [("webhook", "backend")]) == 250 })
        }
        await receiver.stop()
    }

    @Test func aReceiverAnswering503ThenGetsEveryEventInOrder() async throws {
        let receiver = try WebhookReceiver(secrets: [secret]) { n in
            n < 3 ? HTTPResponse(status: 503, headers: [("Retry-After", "0")]) : HTTPResponse(status: 204)
        }
        try await withSender(port: receiver.port, batch: 10, events: { try await appendStored($0, Self.transportEvents(25)) }) { sender, events, metrics in
            #expect(await eventually(timeout: 20) { receiver.posts.count >= 6 })
            let posts = receiver.posts
            // The first batch went four times (three 503s), then the rest, none lost, none reordered.
            #expect(posts.prefix(4).allSatisfy { $0.ids == Array(events.prefix(10).map(\.id)) })
            #expect(posts.dropFirst(3).flatMap(\.ids) == events.map(\.id))
            #expect(posts.allSatisfy { $0.verified == [true] })
            #expect(metrics.value("herald_webhook_failed_attempts_total", labels: [("webhook", "backend")]) == 3)
        }
        await receiver.stop()
    }

    @Test func duringARotationEitherSecretVerifies() async throws {
        let new = Secret("whsec_new"), old = Secret("whsec_old"), other = Secret("whsec_other")
        let receiver = try WebhookReceiver(secrets: [new, old, other])
        try await withSender(port: receiver.port, secrets: [new, old], events: { try await appendStored($0, Self.transportEvents(3)) }) { _, _, _ in
            #expect(await eventually(timeout: 20) { receiver.posts.count >= 1 })
            #expect(receiver.posts.first?.verified == [true, true, false])
        }
        await receiver.stop()
    }

    @Test func aRedirectIsNotFollowed() async throws {
        let receiver = try WebhookReceiver(secrets: [secret]) { n in
            n < 2 ? HTTPResponse(status: 302, headers: [("Location", "/elsewhere")]) : HTTPResponse(status: 200)
        }
        try await withSender(port: receiver.port, events: { try await appendStored($0, Self.transportEvents(2)) }) { _, events, metrics in
            #expect(await eventually(timeout: 20) { receiver.posts.count >= 3 })
            #expect(receiver.posts.allSatisfy { $0.path == "/hook" })
            #expect(receiver.posts.map(\.ids) == Array(repeating: events.map(\.id), count: 3))
            #expect(metrics.value("herald_webhook_failed_attempts_total", labels: [("webhook", "backend")]) == 2)
        }
        await receiver.stop()
    }

    @Test func aSlowReceiverCannotHoldTheSender() async throws {
        // The first POST is never answered while the test runs (its handler waits for the gate).
        let gate = Locked(false)
        let receiver = try WebhookReceiver(secrets: [secret]) { n in
            if n == 0 {
                for _ in 0..<600 where !gate.withLock({ $0 }) { try? await Task.sleep(nanoseconds: 50_000_000) }
            }
            return HTTPResponse(status: 200)
        }
        try await withSender(port: receiver.port, timeout: 0.5, events: { try await appendStored($0, Self.transportEvents(2)) }) { _, events, metrics in
            #expect(await eventually(timeout: 20) { receiver.posts.count >= 2 })
            // The attempt that got no answer timed out and the batch went again while the first still hung.
            #expect(!gate.withLock { $0 })
            #expect(metrics.value("herald_webhook_failed_attempts_total", labels: [("webhook", "backend")]) >= 1)
            #expect(receiver.posts[1].ids == events.map(\.id))
            #expect(await eventually(timeout: 20) { metrics.value("herald_webhook_events_sent_total", labels: [("webhook", "backend")]) == 2 })
        }
        gate.withLock { $0 = true }
        await receiver.stop()
    }

    @Test func eventsPastTheRetentionAreDroppedAndCounted() async throws {
        let receiver = try WebhookReceiver(secrets: [secret])
        let old = Self.transportEvents(3, at: Date().addingTimeInterval(-7200))
        let fresh = Self.transportEvents(2)
        try await withSender(port: receiver.port, retention: 3600, events: { try await appendStored($0, old + fresh) }) { _, events, metrics in
            #expect(await eventually(timeout: 20) { receiver.posts.flatMap(\.ids).count >= 2 })
            #expect(receiver.posts.flatMap(\.ids) == fresh.map(\.id))
            #expect(metrics.value("herald_webhook_events_dropped_total", labels: [("webhook", "backend")]) == 3)
        }
        await receiver.stop()
    }
}

/// `herald webhooks list`'s numbers.
struct WebhookBacklogTests {
    @Test func countsTheEventsAWebhookTakesAfterItsCursor() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-backlog")
        defer { dir.remove() }
        let queue = try SQLiteDeliveryQueue(path: dir.file("herald.db"), synchronous: .normal)
        let hook = WebhooksConfiguration.Webhook(id: "backend", url: try WebhookURL("http://127.0.0.1:9/"), secrets: [Secret("s")],
                                                 events: ["transport.paused"])
        #expect(try await WebhookBacklog.measure(hook, in: queue) == WebhookBacklog(cursor: nil, pending: 0, truncated: false, oldest: nil))
        let t0 = Date(timeIntervalSince1970: 1_767_225_600)
        try await queue.append([EventRecord.transport("a", paused: true, reason: "x", now: t0)])
        _ = try await queue.leaseWebhook("backend", node: "n", now: t0, until: t0.addingTimeInterval(30))
        try await queue.append([EventRecord.transport("a", paused: false, reason: "x", now: t0.addingTimeInterval(1)),
                                EventRecord.transport("b", paused: true, reason: "y", now: t0.addingTimeInterval(2)),
                                EventRecord.transport("c", paused: true, reason: "z", now: t0.addingTimeInterval(3))])
        let b = try await WebhookBacklog.measure(hook, in: queue)
        #expect(b == WebhookBacklog(cursor: 1, pending: 2, truncated: false, oldest: t0.addingTimeInterval(2)))
        await queue.close()
    }
}
