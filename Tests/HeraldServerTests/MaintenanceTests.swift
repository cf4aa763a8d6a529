import Foundation
import HeraldAPNs
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// The daemon's housekeeping (``Daemon/maintenanceOnce()``) driven by a test clock: expired
/// leases go back to the queue; finished notifications go after the retention, which is at
/// least the idempotency window; unfinished ones stay.
@Suite(.serialized, .stopsDaemons) struct MaintenanceTests {
    /// A notification for one device of a transport that has no worker here.
    func orphan(_ id: String, transport: String, at time: Date) -> QueuedNotification {
        QueuedNotification(id: id, app: TestDaemon.app, topic: TestDaemon.app, content: NotificationContent(alert: .text(id)),
                           idempotencyKey: nil, createdAt: time,
                           deliveries: [PlannedDelivery(token: TestDaemon.token(9), user: "bob", transport: transport,
                                                        messageID: UUID())])
    }

    func status(_ d: TestDaemon, _ id: String) async throws -> HTTPTestClient.Response {
        try await d.client.get("/v1/notifications/\(id)")
    }

    func logged(_ d: TestDaemon, _ message: String, count: String) -> Bool {
        d.logs.records.contains { $0.message == message && $0.metadata["count"] == count }
    }

    @Test func prunesFinishedRowsPastRetentionKeepsUnfinishedAndReclaimsLeases() async throws {
        let clock = TestClock()
        let config = TestDaemon.configJSON(server: #""retention": "1h", "idempotencyWindow": "3h", "lease": "5m""#)
            .replacingOccurrences(of: #""maintenanceInterval": "1h""#, with: #""maintenanceInterval": "30d""#)
        let d = try await TestDaemon.start(config: config, clock: clock, transports: { ScriptedTransport(name: $0, clock: clock) })
        let queue = try #require(d.daemon.queue)
        let t0 = clock.now

        // Finished: delivered through "t".
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let sent = try await d.client.post("/v1/notifications", #"{"app":"com.example.app","users":["alice"],"alert":"done"}"#)
        let finished = try #require(sent.json?["id"]?.stringValue)
        #expect(try await d.waitUntilFinal(finished)["summary"]?["delivered"] == 1)
        // Unfinished: one waiting for a transport no longer configured, one claimed by a worker
        // that never answered (its lease runs 5 minutes).
        _ = try await queue.enqueue(orphan("waiting", transport: "gone", at: t0), idempotencySince: t0)
        _ = try await queue.enqueue(orphan("leased", transport: "stuck", at: t0), idempotencySince: t0)
        #expect(try await queue.claim(transport: "stuck", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(300)).count == 1)

        // Two hours on: the lease has expired; the finished notification is past the retention
        // (1 h) but within the idempotency window (3 h), so it stays.
        clock.advance(by: 2 * 3600)
        await d.daemon.maintenanceOnce()
        #expect(logged(d, "deliveries whose lease expired went back to the queue", count: "1"))
        let reclaimed = try #require(try await queue.status(notificationID: "leased")?.deliveries.first)
        #expect(reclaimed.state == .queued)
        #expect(reclaimed.lastReason == "lease expired before the transport answered")
        #expect(queue.depth()["stuck"] == QueueDepth(queued: 1, inFlight: 0))
        #expect(try await status(d, finished).status == 200)
        #expect(!d.logs.records.contains { $0.message == "pruned finished deliveries" })

        // Past the window too: the finished notification goes, the unfinished ones stay.
        clock.advance(by: 3600 + 60)
        await d.daemon.maintenanceOnce()
        #expect(logged(d, "pruned finished deliveries", count: "1"))
        let gone = try await status(d, finished)
        #expect(gone.status == 404)
        #expect(gone.json?["error"]?["message"]?.stringValue?.contains("server.idempotencyWindow") == true)
        #expect(try await status(d, "waiting").json?["deliveries"]?.arrayValue?.first?["state"] == "queued")
        #expect(try await status(d, "leased").json?["deliveries"]?.arrayValue?.first?["state"] == "queued")
        #expect(d.logs.records.filter { $0.message == "deliveries whose lease expired went back to the queue" }.count == 1)
    }
}
