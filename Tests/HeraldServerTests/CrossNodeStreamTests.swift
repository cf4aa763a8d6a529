import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing

/// Two `herald serve` processes on one PostgreSQL: a device's stream is open on one node and its
/// notifications are accepted by the other; they reach the stream through the database
/// (the `presence` table and `LISTEN/NOTIFY`), not a node-to-node protocol.
@Suite(.serialized) struct CrossNodeStreamTests {
    static let app = "com.example.app"
    static let secret = "cross-node-secret-0123456789abcdef-0123"

    static func config(url: String, policy: String) -> String {
        """
        {
          "storage": {"driver": "postgresql", "url": "\(url)", "pool": 4},
          "apps": {"\(app)": {"routes": ["push", "live"], "foreground": "\(policy)", "clientSecret": "\(secret)"}},
          "transports": {"push": {"type": "log", "path": "deliveries.jsonl"}, "live": {"type": "local"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}],
                  "streams": {"heartbeat": 1}},
          "server": {"maintenanceInterval": "500ms"},
          "log": {"level": "info"}
        }
        """
    }

    static func clientToken(user: String, device: String) -> String {
        let now = Date()
        return ClientToken.sign(ClientTokenClaims(user: user, app: app, device: device, issuedAt: now, expiresAt: now.addingTimeInterval(3600)),
                                secret: Secret(secret))
    }

    /// The value of `metric` (summed over its label sets) on a node's `/metrics`.
    static func metric(_ node: MultiNodeTests.Node, _ metric: String) async -> Double {
        guard let text = try? await node.client.get("/metrics").text else { return -1 }
        return text.split(separator: "\n").filter { $0.hasPrefix(metric) }.compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
    }

    static func send(_ node: MultiNodeTests.Node, _ text: String) async throws -> String {
        let r = try await node.client.post("/v1/notifications", #"{"app":"\#(app)","users":["alice"],"alert":"\#(text)"}"#)
        #expect(r.status == 202, "\(r.text)")
        return r.json?["id"]?.stringValue ?? ""
    }

    static func withNodes(policy: String, _ body: (MultiNodeTests.Node, MultiNodeTests.Node) async throws -> Void) async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let nodes = try await MultiNodeTests.startNodes(2, url: url, configuration: config(url: url, policy: policy))
        do {
            try await body(nodes[0], nodes[1])
        } catch {
            await MultiNodeTests.stop(nodes)
            throw error
        }
        await MultiNodeTests.stop(nodes)
    }

    @Test(.timeLimit(.minutes(2))) func aStreamOnOneNodeGetsWhatTheOtherNodeAcceptedAndPushResumesWhenItCloses() async throws {
        try await Self.withNodes(policy: "local-first") { a, b in
            let device = TestDaemon.token(1)
            #expect(try await a.client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(device)"}"#).status == 201)
            var stream: StreamClient? = try await StreamClient(port: b.client.port, query: "app=\(Self.app)",
                                                               token: Self.clientToken(user: "alice", device: device))
            #expect(stream?.status == 200)
            // A plans the local route once it has read B's presence.
            #expect(await eventually(timeout: 20) { await Self.metric(a, "herald_presence_remote_devices") == 1 })

            var sent: [String] = []
            for i in 0..<20 { sent.append(try await Self.send(a, "n\(i)")) }
            let events = try await stream?.events(20) ?? []
            #expect(events.map { $0.json?["id"]?.stringValue ?? "" } == sent, "in order, each once, on B's stream")
            #expect(events.map { $0.id ?? 0 } == Array(1...20))
            let status = try await a.client.get("/v1/notifications/\(sent[0])")
            #expect((status.json?["deliveries"]?.arrayValue ?? []).map { $0["transport"]?.stringValue ?? "-" } == ["live"])
            // B's local transport wrote them all; nothing went to the push route.
            #expect(await Self.metric(b, #"herald_deliveries_total{transport="live",outcome="delivered""#) == 20)
            #expect(a.ledger().isEmpty && b.ledger().isEmpty)

            // The stream closes: A stops planning it, and the next notification goes by push.
            stream = nil
            #expect(await eventually(timeout: 20) { await Self.metric(a, "herald_presence_remote_devices") == 0 })
            let after = try await Self.send(a, "after")
            func routes() async -> [String] {
                let final = try? await a.client.get("/v1/notifications/\(after)")
                return (final?.json?["deliveries"]?.arrayValue ?? []).map { "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-")" }
            }
            let delivered = await eventually(timeout: 20) { await routes() == ["push delivered"] }
            let seen = await routes()
            #expect(delivered, "\(seen)")
            #expect((a.ledger() + b.ledger()).count == 1)
        }
    }

    @Test(.timeLimit(.minutes(2))) func localOnlyDeliveriesAcceptedOnOneNodeReachAStreamThatOpensOnTheOther() async throws {
        try await Self.withNodes(policy: "local-only") { a, b in
            let device = TestDaemon.token(1)
            #expect(try await a.client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(device)"}"#).status == 201)
            // Nobody connected: parked in the database.
            let first = try await Self.send(a, "while away")
            func state(_ id: String) async -> String? {
                let s = try? await a.client.get("/v1/notifications/\(id)")
                return (s?.json?["deliveries"]?.arrayValue ?? []).first?["state"]?.stringValue
            }
            #expect(await eventually(timeout: 20) { await state(first) == "parked" })
            // The device connects on B: the parked delivery comes out there, then what A accepts next.
            let stream = try await StreamClient(port: b.client.port, query: "app=\(Self.app)",
                                                token: Self.clientToken(user: "alice", device: device))
            #expect(stream.status == 200)
            #expect(await eventually(timeout: 20) { await state(first) == "delivered" })
            #expect(await eventually(timeout: 20) { await Self.metric(a, "herald_presence_remote_devices") == 1 })
            let second = try await Self.send(a, "while here")
            let events = try await stream.events(2)
            #expect(events.map { $0.json?["id"]?.stringValue ?? "" } == [first, second])
        }
    }
}
