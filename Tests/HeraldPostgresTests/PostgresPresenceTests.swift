import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldTestKit
import Testing

/// Presence across nodes on one PostgreSQL: a device's local deliveries are claimed by the node
/// its stream is open on; the other nodes see the device as connected.
struct PostgresPresenceTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)
    let shared = PostgresSharedQueueTests()

    /// A notification for `devices`, each with one delivery on the local transport `live`.
    func notification(_ id: String, devices: [String], app: String = "app") -> QueuedNotification {
        QueuedNotification(id: id, app: app, topic: app, content: NotificationContent(alert: .text("hi")), idempotencyKey: nil,
                           createdAt: t0, deliveries: devices.map {
                               PlannedDelivery(token: $0, user: "u", transport: "live", messageID: UUID())
                           })
    }

    func claimedTokens(_ node: OpenStorage) async throws -> [String] {
        try await node.queue.claim(transport: "live", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(60)).map(\.delivery.token).sorted()
    }

    @Test func aDevicesLocalDeliveriesAreClaimedOnlyByTheNodeItsStreamIsOn() async throws {
        try await shared.withNodes(2) { nodes, _ in
            let (a, b) = (nodes[0], nodes[1])
            b.presence.connected(app: "app", user: "u", device: "on-b", transport: "live")
            try await b.presence.published()
            // A sees it (the fan-out plans the local route for it) once B's NOTIFY arrived.
            #expect(await eventually(timeout: 10) { a.presence.remoteDevices(app: "app", users: ["u"]) == ["u": ["on-b"]] })
            #expect(b.presence.remoteDevices(app: "app", users: ["u"]).isEmpty, "a node's own streams are not remote")

            _ = try await a.queue.enqueue(notification("n1", devices: ["on-b", "nowhere"]), idempotencySince: t0)
            // A takes the device without a stream (it parks or falls back there), not B's device,
            // and does not wait for what is B's.
            #expect(try await claimedTokens(a) == ["nowhere"])
            #expect(try await a.queue.nextDue(transport: "live") == nil)
            #expect(try await b.queue.nextDue(transport: "live") != nil)
            #expect(try await claimedTokens(b) == ["on-b"])
        }
    }

    @Test func aClosedStreamOrADeadNodeLeavesTheDeviceToAnyNode() async throws {
        try await shared.withNodes(2) { nodes, url in
            let (a, b) = (nodes[0], nodes[1])
            let db = String(url.split(separator: "/").last!)
            b.presence.connected(app: "app", user: "u", device: "d1", transport: "live")
            b.presence.connected(app: "app", user: "u", device: "d2", transport: "live")
            try await b.presence.published()
            _ = try await a.queue.enqueue(notification("n1", devices: ["d1", "d2"]), idempotencySince: t0)
            #expect(try await claimedTokens(a).isEmpty)

            // d1's stream on B closes: A may take it.
            b.presence.disconnected(app: "app", device: "d1")
            try await b.presence.published()
            #expect(try await claimedTokens(a) == ["d1"])
            #expect(await eventually(timeout: 10) { a.presence.remoteDevices(app: "app", users: ["u"]) == ["u": ["d2"]] })

            // B stops renewing (as if killed): after the time to live its rows no longer count.
            _ = try await PostgresServer.shared().query(db, "UPDATE presence SET seen = now() - interval '20 seconds'")
            #expect(try await claimedTokens(a) == ["d2"])
        }
    }

    @Test func aDeviceWithStreamsOnTwoNodesIsClaimedByEither() async throws {
        try await shared.withNodes(2) { nodes, _ in
            let (a, b) = (nodes[0], nodes[1])
            for node in [a, b] {
                node.presence.connected(app: "app", user: "u", device: "tab", transport: "live")
                try await node.presence.published()
            }
            _ = try await a.queue.enqueue(notification("n1", devices: ["tab"]), idempotencySince: t0)
            #expect(try await claimedTokens(a) == ["tab"])
        }
    }

    @Test func anotherAppsStreamForTheSameDeviceIDDoesNotCount() async throws {
        try await shared.withNodes(2) { nodes, _ in
            let (a, b) = (nodes[0], nodes[1])
            b.presence.connected(app: "other.app", user: "u", device: "same-id", transport: "live")
            try await b.presence.published()
            _ = try await a.queue.enqueue(notification("n1", devices: ["same-id"]), idempotencySince: t0)
            #expect(try await claimedTokens(a) == ["same-id"])
        }
    }

    @Test func aNodeThatClosesTakesItsStreamsOutOfTheDirectory() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let db = String(url.split(separator: "/").last!)
        let node = try await PostgresStorageDriver().open(try shared.configuration(url: url), metrics: MetricsRegistry(), exclusive: true)
        node.presence.connected(app: "app", user: "u", device: "d1", transport: "live")
        try await node.presence.published()
        #expect(try await PostgresServer.shared().query(db, "SELECT count(*) FROM presence").trimmingCharacters(in: .whitespacesAndNewlines) == "1")
        await node.close()
        #expect(try await PostgresServer.shared().query(db, "SELECT count(*) FROM presence").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    @Test(.timeLimit(.minutes(2))) func streamsRecordedWhileTheDatabaseWasDownAreWrittenWhenItReturns() async throws {
        let server = try await PostgresServer.startPrivate()
        let url = try await server.createDatabase()
        let db = String(url.split(separator: "/").last!)
        let node = try await PostgresStorageDriver().open(try shared.configuration(url: url), metrics: MetricsRegistry(), exclusive: true)
        func rows() async -> String { ((try? await server.query(db, "SELECT string_agg(device, ',' ORDER BY device) FROM presence")) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines) }
        node.presence.connected(app: "app", user: "u", device: "d1", transport: "live")
        try await node.presence.published()
        #expect(await rows() == "d1")

        try await server.stop()
        node.presence.connected(app: "app", user: "u", device: "d2", transport: "live")
        node.presence.disconnected(app: "app", device: "d1")
        await #expect(throws: (any Error).self, "the database cannot take it now") { try await node.presence.published() }
        try await server.restart()
        // The presence thread reconnects and rewrites this node's rows: d2, and no longer d1.
        let rewritten = await eventually(timeout: 30) { await rows() == "d2" }
        let now = await rows()
        #expect(rewritten, "\(now)")
        try await node.presence.published()
        await node.close()
    }
}
