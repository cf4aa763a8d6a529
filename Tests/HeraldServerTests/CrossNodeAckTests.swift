import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing

/// Acks and presence across two `herald serve` processes on one PostgreSQL: the device's
/// acknowledging stream is open on node B, its notifications are accepted by node A, and it
/// acknowledges to B (the node holding its stream).
@Suite(.serialized) struct CrossNodeAckTests {
    static let app = CrossNodeStreamTests.app

    static func config(url: String) -> String {
        CrossNodeStreamTests.config(url: url, policy: "local-first")
            .replacingOccurrences(of: #""clientSecret": "\#(CrossNodeStreamTests.secret)"}"#,
                                  with: #""clientSecret": "\#(CrossNodeStreamTests.secret)", "ackTimeout": "4s"}"#)
    }

    static func routes(_ node: MultiNodeTests.Node, _ id: String) async -> [String] {
        let status = try? await node.client.get("/v1/notifications/\(id)")
        return (status?.json?["deliveries"]?.arrayValue ?? []).map {
            "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-") \($0["reason"]?.stringValue ?? "-")"
        }
    }

    @Test(.timeLimit(.minutes(2))) func anAckToTheStreamsNodeDeliversWhatTheOtherNodeAcceptedAndNoAckSendsItByPushOnce() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let configuration = Self.config(url: url)
        #expect(configuration.contains(#""ackTimeout": "4s""#))
        let nodes = try await MultiNodeTests.startNodes(2, url: url, configuration: configuration)
        do {
            try await Self.run(nodes[0], nodes[1])
        } catch {
            await MultiNodeTests.stop(nodes)
            throw error
        }
        await MultiNodeTests.stop(nodes)
    }

    static func run(_ a: MultiNodeTests.Node, _ b: MultiNodeTests.Node) async throws {
        let device = TestDaemon.token(1)
        let token = CrossNodeStreamTests.clientToken(user: "alice", device: device)
        #expect(try await a.client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(device)"}"#).status == 201)
        let stream = try await StreamClient(port: b.client.port, query: "app=\(Self.app)&ack=1", token: token)
        #expect(stream.status == 200)
        #expect(await eventually(timeout: 20) { await CrossNodeStreamTests.metric(a, "herald_presence_remote_devices") == 1 })

        // Accepted on A, written on B, acknowledged to B: delivered, as A's status API says.
        let first = try await CrossNodeStreamTests.send(a, "acked")
        let event = try #require(try await stream.next())
        #expect(event.json?["id"]?.stringValue == first)
        let ack = try await HTTPTestClient(port: b.client.port, key: token).post("/v1/stream/ack?app=\(Self.app)", #"{"id":\#(event.id ?? 0)}"#)
        #expect(ack.status == 204)
        let acknowledged = ["live delivered acknowledged by the device as event \(event.id ?? 0)"]
        _ = await eventually(timeout: 20) { await Self.routes(a, first) == acknowledged }
        #expect(await Self.routes(a, first) == acknowledged)
        #expect((a.ledger() + b.ledger()).isEmpty)

        // Not acknowledged: past ackTimeout it goes by push, once, and A stops planning the stream.
        let second = try await CrossNodeStreamTests.send(a, "not acked")
        #expect(try await stream.next()?.json?["id"]?.stringValue == second)
        _ = await eventually(timeout: 20) { await Self.routes(a, second).first?.hasPrefix("push delivered") == true }
        #expect(await Self.routes(a, second).map { $0.prefix(14) } == ["push delivered"])
        #expect(await eventually(timeout: 20) { await CrossNodeStreamTests.metric(a, "herald_presence_remote_devices") == 0 })
        let third = try await CrossNodeStreamTests.send(a, "planned for push")
        _ = await eventually(timeout: 20) { await Self.routes(a, third).first?.hasPrefix("push delivered") == true }
        #expect(await Self.routes(a, third).map { $0.prefix(14) } == ["push delivered"])
        #expect((a.ledger() + b.ledger()).count == 2, "each unacknowledged notification pushed once")
    }
}
