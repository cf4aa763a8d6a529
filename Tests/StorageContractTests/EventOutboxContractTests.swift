import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The event outbox (issue 38) on every driver that keeps one: events written in the
/// transaction of the change they report, read in order, leased per webhook, pruned.
struct EventOutboxContractTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func notification(tokens: [String], key: String? = "order-1") -> QueuedNotification {
        QueuedNotification(id: UUID().uuidString.lowercased(), app: "app", topic: "com.example.app",
                           content: NotificationContent(alert: .text("hi")), idempotencyKey: key, createdAt: t0,
                           deliveries: tokens.map { PlannedDelivery(token: $0, user: "alice", transport: "t", messageID: UUIDSource.random()) })
    }

    func data(_ e: EventRecord) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(e.data.utf8)) as? [String: Any])
    }

    @Test(arguments: Backend.allCases)
    func finalStatesAndParkedAreEventsInOrder(_ backend: Backend) async throws {
        try await withStorage(backend) { storage, _ in
            let outbox = try #require(storage.events)
            let n = notification(tokens: ["aa01", "aa02", "aa03"])
            _ = try await storage.queue.enqueue(n, idempotencySince: .distantPast)
            let claimed = try await storage.queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(60))
            #expect(claimed.count == 3)
            let byToken = Dictionary(uniqueKeysWithValues: claimed.map { ($0.delivery.token, $0.delivery) })
            try await storage.queue.complete([.finished(byToken["aa01"]!, .delivered, reason: nil, receipt: "apns-1"),
                                              .finished(byToken["aa02"]!, .invalidToken, reason: "Unregistered"),
                                              .parked(byToken["aa03"]!, until: t0.addingTimeInterval(3600), reason: "in the inbox")],
                                             now: t0.addingTimeInterval(1))
            // A retry reports nothing; a stale completion (old attempt) reports nothing.
            let events = try await outbox.events(after: 0, limit: 100)
            #expect(events.map(\.type) == ["delivery.delivered", "delivery.invalid_token", "delivery.parked"])
            #expect(events.map(\.sequence) == events.map(\.sequence).sorted())
            #expect(Set(events.map(\.id)).count == 3)
            #expect(events.allSatisfy { $0.app == "app" && $0.createdAt == t0.addingTimeInterval(1) })
            let delivered = try data(events[0])
            #expect(delivered["notification"] as? String == n.id)
            #expect(delivered["delivery"] as? String == byToken["aa01"]!.messageID.lowercasedString)
            #expect(delivered["device"] as? String == "aa01")
            #expect(delivered["user"] as? String == "alice")
            #expect(delivered["route"] as? String == "t")
            #expect(delivered["attempts"] as? Int == 1)
            #expect(delivered["receipt"] as? String == "apns-1")
            #expect(delivered["idempotency_key"] as? String == "order-1")
            #expect(try data(events[1])["reason"] as? String == "Unregistered")
            // Reading after a sequence gives the rest, in order.
            #expect(try await outbox.events(after: events[0].sequence, limit: 100).map(\.id) == events.dropFirst().map(\.id))
            // A completion whose attempt no longer matches writes nothing, and so reports nothing.
            try await storage.queue.complete([.finished(byToken["aa01"]!, .failed, reason: "late")], now: t0.addingTimeInterval(2))
            #expect(try await outbox.events(after: 0, limit: 100).count == 3)
        }
    }

    @Test(arguments: Backend.allCases)
    func devicesRetiredAndRemovedAreEvents(_ backend: Backend) async throws {
        try await withStorage(backend) { storage, _ in
            let outbox = try #require(storage.events)
            for token in ["bb01", "bb02"] {
                _ = try await storage.tokens.register(DeviceRegistration(app: "app", token: token, user: "bob", transport: "t"), at: t0)
            }
            #expect(try await storage.tokens.invalidate(app: "app", token: "bb01", at: t0.addingTimeInterval(5), reason: "Unregistered") == .invalidated)
            // Already invalid: no second event.
            #expect(try await storage.tokens.invalidate(app: "app", token: "bb01", at: t0.addingTimeInterval(6), reason: "Unregistered") == .alreadyInvalid)
            #expect(try await storage.tokens.unregister(app: "app", token: "bb02"))
            #expect(try await !storage.tokens.unregister(app: "app", token: "bb02"))
            let events = try await outbox.events(after: 0, limit: 100)
            #expect(events.map(\.type) == ["device.retired", "device.removed"])
            let retired = try data(events[0])
            #expect(retired["device"] as? String == "bb01")
            #expect(retired["reason"] as? String == "Unregistered")
            #expect(retired["retired_at"] as? String == EventRecord.timestamp(t0.addingTimeInterval(5)))
            let removed = try data(events[1])
            #expect(removed["device"] as? String == "bb02")
            #expect(removed["user"] as? String == "bob")
        }
    }

    @Test(arguments: Backend.allCases)
    func oneNodeHoldsAWebhookAndOnlyItMovesTheCursor(_ backend: Backend) async throws {
        try await withStorage(backend) { storage, _ in
            let outbox = try #require(storage.events)
            try await outbox.append([EventRecord.transport("t", paused: true, reason: "setup failure", now: t0)])
            // A new webhook starts after the last event.
            let a = try await outbox.leaseWebhook("hook", node: "a", now: t0, until: t0.addingTimeInterval(30))
            #expect(a == 1)
            #expect(try await outbox.leaseWebhook("hook", node: "b", now: t0.addingTimeInterval(10), until: t0.addingTimeInterval(40)) == nil)
            try await outbox.append([EventRecord.transport("t", paused: false, reason: "recovered", now: t0)])
            #expect(try await !outbox.acknowledge(webhook: "hook", node: "b", through: 2))
            #expect(try await outbox.acknowledge(webhook: "hook", node: "a", through: 2))
            #expect(try await outbox.webhookCursor("hook") == 2)
            // The cursor never goes back.
            #expect(try await outbox.acknowledge(webhook: "hook", node: "a", through: 1))
            #expect(try await outbox.webhookCursor("hook") == 2)
            // Past the lease, b takes it over, with the cursor a left.
            #expect(try await outbox.leaseWebhook("hook", node: "b", now: t0.addingTimeInterval(31), until: t0.addingTimeInterval(61)) == 2)
            #expect(try await !outbox.acknowledge(webhook: "hook", node: "a", through: 3))
            // Given up, it is free at once.
            try await outbox.releaseWebhook("hook", node: "b")
            #expect(try await outbox.leaseWebhook("hook", node: "a", now: t0.addingTimeInterval(32), until: t0.addingTimeInterval(62)) == 2)
        }
    }

    @Test(arguments: Backend.allCases)
    func pruneDropsOldEventsAndSequencesAreNotReused(_ backend: Backend) async throws {
        try await withStorage(backend) { storage, _ in
            let outbox = try #require(storage.events)
            try await outbox.append([EventRecord.transport("t", paused: true, reason: "a", now: t0),
                                     EventRecord.transport("t", paused: false, reason: "b", now: t0.addingTimeInterval(100))])
            #expect(try await outbox.events(after: 0, limit: 10).map(\.sequence) == [1, 2])
            #expect(try await outbox.pruneEvents(createdBefore: t0.addingTimeInterval(200)) == 2)
            try await outbox.append([EventRecord.transport("t", paused: true, reason: "c", now: t0.addingTimeInterval(300))])
            let left = try await outbox.events(after: 0, limit: 10)
            #expect(left.map(\.sequence) == [3])
            #expect(try await outbox.pruneEvents(createdBefore: t0.addingTimeInterval(200)) == 0)
        }
    }
}
