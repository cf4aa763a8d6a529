import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// Two `herald serve` nodes on one PostgreSQL database with the same webhook: while both are up,
/// each event is sent once (one node holds the webhook's lease), in the order of the feed.
@Suite(.serialized) struct WebhookMultiNodeTests {
    static let secret = Secret("whsec_two_nodes")

    @Test(.timeLimit(.minutes(5))) func twoNodesSendEachEventOnceInFeedOrder() async throws {
        let server = try await PostgresServer.shared()
        let url = try await server.createDatabase()
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        let config = """
            {
              "storage": {"driver": "postgresql", "url": "\(url)", "pool": 4},
              "apps": {"com.example.app": {"routes": ["dry"]}},
              "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
              "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
              "server": {"batchLinger": 0},
              "webhooks": [{"id": "backend", "url": "http://127.0.0.1:\(receiver.port)/hook", "secret": "\(Self.secret.value)",
                            "events": ["delivery"], "batch": 20}],
              "log": {"level": "notice"}
            }
            """
        let nodes = try await MultiNodeTests.startNodes(2, url: url, configuration: config)
        do {
            try await MultiNodeTests.register(5, on: nodes[0])
            let accepted = try await MultiNodeTests.send(100, users: 5, lanes: 4, deadline: 120) { nodes[$0 % 2] }
            #expect(accepted == 100)
            let expected = accepted * 2
            #expect(await eventually(timeout: 120) { receiver.posts.flatMap(\.ids).count >= expected },
                    "received \(receiver.posts.flatMap(\.ids).count) of \(expected)")
            let received = receiver.posts.flatMap(\.ids)
            #expect(received.count == expected, "an event was sent twice")
            #expect(Set(received).count == received.count)
            #expect(receiver.posts.allSatisfy { $0.verified == [true] })
            // Both nodes' events, one sender: the receiver's order is the feed's.
            let feed = try await nodes[1].client.get("/v1/events?limit=1000")
            #expect(feed.json?["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == received)
        } catch {
            await MultiNodeTests.stop(nodes)
            await receiver.stop()
            throw error
        }
        await MultiNodeTests.stop(nodes)
        await receiver.stop()
    }
}
