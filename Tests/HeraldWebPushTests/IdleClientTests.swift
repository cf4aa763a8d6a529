import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
@testable import HeraldWebPush
import Testing

/// A push service's client unused for `idleTimeout` is closed (its connection seen closed by the
/// simulator) and dropped, while a service used within it keeps its connection; the next
/// delivery to the dropped one opens a new connection. Driven by the test clock: no sleeping.
@Suite(.serialized) struct IdleClientTests {
    @Test func aPushServiceUnusedForIdleTimeoutHasItsConnectionClosedAndDropped() async throws {
        let certs = try TestCertificates.shared()
        let clock = TestClock(start: Date())
        func simulator(_ seed: String) throws -> WebPushSimulator {
            let sim = try WebPushSimulator(configuration: .init(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: seed),
                                           clock: clock)
            try sim.start()
            return sim
        }
        let a = try simulator("idle-a"), b = try simulator("idle-b")
        defer { a.stop(); b.stop() }
        let key = try P256PrivateKey.generate()
        let (c, errors, _) = readConfiguration(#"""
            {"type": "webpush", "vapidKey": "\#(Base64URL.encode(key.rawRepresentation))", "subject": "mailto:push@example.com",
             "allowedEndpoints": ["127.0.0.1"], "caFile": "\#(certs.caFile)", "idleTimeout": "300s"}
            """#)
        let configuration = try #require(c, "\(errors)")
        #expect(configuration.idleTimeout == 300 && configuration.engine == .nghttp2)
        let t = try WebPushTransport(name: "web", configuration: configuration, context: TransportContext(logger: .disabled, clock: clock))
        var id: Int64 = 0
        func send(_ sim: WebPushSimulator) async throws -> Bool {
            id += 1
            let token = try configuration.address(.token(sim.subscriptionJSON(0)), attributes: DeviceAttributes()).token
            let content = NotificationContent(title: "Hi", body: "there")
            var d = Delivery(id: id, notificationID: "n-\(id)", app: "com.example.web", topic: "com.example.web", token: token, user: "alice",
                             transport: "web", content: content)
            d.payload = try configuration.render(content, context: d.renderContext)
            d.acceptedAt = clock.now
            return await t.deliver([d]).first?.isDelivered == true
        }

        #expect(try await send(a))
        clock.advance(by: 200)
        #expect(try await send(b))
        #expect(t.openClients == 2 && a.connections[0].open == 1 && b.connections[0].open == 1, "\(a.connections) \(b.connections)")
        // A unused for 400 s, B for 200 s: the next delivery closes A's client only.
        clock.advance(by: 200)
        #expect(try await send(b))
        #expect(t.openClients == 1)
        #expect(await eventually(timeout: 30) { a.connections[0].open == 0 }, "the simulator sees A's connection closed: \(a.connections)")
        #expect(a.connections[0].accepted == 1 && b.connections[0] == (accepted: 1, open: 1), "\(a.connections) \(b.connections)")
        // A again: a new client and a new connection.
        #expect(try await send(a))
        #expect(t.openClients == 2 && a.connections[0].accepted == 2 && a.connections[0].open == 1, "\(a.connections)")
        await t.shutdown()
    }

    @Test func idleTimeoutAndEngineAreRead() throws {
        let (_, key) = try newVAPIDKey()
        let (c, errors, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "\#(key)", "subject": "mailto:push@example.com", "engine": "curl", "idleTimeout": "2m"}"#)
        #expect(c?.engine == .curl && c?.idleTimeout == 120, "\(errors)")
        let (bad, badErrors, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "\#(key)", "subject": "mailto:push@example.com", "engine": "h3", "idleTimeout": "0s"}"#)
        #expect(bad == nil || badErrors.count >= 1)
        #expect(badErrors.contains { $0.path == "transports.web.engine" } && badErrors.contains { $0.path == "transports.web.idleTimeout" }, "\(badErrors)")
    }
}
