import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldCrypto
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import HeraldWebPush
import Testing

/// Web Push through the daemon: the public key for pages, subscriptions registered with an API
/// key and with a page's client token, an app with iOS and web devices getting one delivery each
/// (APNs and Web Push simulators), and what the service worker receives, decrypted.
@Suite(.serialized, .stopsDaemons) struct WebPushDaemonTests {
    static let app = "com.example.web"
    static let secret = "webpush-client-secret-0123456789abcdef"

    @Test func subscriptionsRegisterByKeyAndClientTokenAndAnAppWithIOSAndWebGetsOneDeliveryEach() async throws {
        let certs = try TestCertificates.shared()
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        var simConfig = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "daemon")
        simConfig.ports = [0]
        let sim = try WebPushSimulator(configuration: simConfig)
        try sim.start()
        defer { sim.stop(); apns.stop() }
        let vapid = try P256PrivateKey.generate()
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(WebPushTransport.self)
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"\(Self.app)": {"routes": ["apns", "web"], "clientSecret": "\(Self.secret)"}},
             "transports": {
               "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                        "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"},
               "web": {"type": "webpush", "vapidKey": "${VAPID_KEY}", "subject": "mailto:push@example.com",
                       "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs.caFile)"}},
             "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}], "listen": "127.0.0.1:0"},
             "server": {"batchLinger": 0, "maintenanceInterval": "1h"}}
            """
        let port = try await TestDaemon.start(plugins: config, registry: registry, environment: ["VAPID_KEY": Base64URL.encode(vapid.rawRepresentation)], prefix: "herald-webpush-daemon").port
        let c = HTTPTestClient(port: port, key: TestDaemon.key)
        do {
            // The page's applicationServerKey, without a key.
            var r = try await HTTPTestClient(port: port).get("/v1/webpush/\(Self.app)/public-key")
            #expect(r.status == 200 && r.json?["public_key"]?.stringValue == vapid.publicKey.base64URL && r.json?["route"]?.stringValue == "web", "\(r.text)")
            #expect(try await HTTPTestClient(port: port).get("/v1/fcm/\(Self.app)/public-key").status == 404)

            // A subscription by API key; a bad one is refused naming its field.
            r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","subscription":\#(sim.subscriptionJSON(0))}"#)
            #expect(r.status == 201 && r.json?["transport"]?.stringValue == "web", "\(r.text)")
            let plain = sim.subscriptionJSON(2).replacingOccurrences(of: "https://", with: "http://")
            r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","platform":"web","subscription":\#(plain)}"#)
            #expect(r.status == 400 && r.errorField == "subscription.endpoint" && r.text.contains("https"), "\(r.text)")

            // A subscription by the page's client token (no API key), for the token's user.
            let token = LocalDeliveryTests.token(user: "alice", device: "00aa00aa00aa00aa", app: Self.app, secret: Self.secret)
            r = try await HTTPTestClient(port: port).post("/v1/stream/subscription?app=\(Self.app)&access_token=\(token)",
                                                          #"{"subscription":\#(sim.subscriptionJSON(1))}"#)
            #expect(r.status == 201 && r.json?["user"]?.stringValue == "alice" && r.json?["transport"]?.stringValue == "web", "\(r.text)")
            r = try await HTTPTestClient(port: port).post("/v1/stream/subscription?app=\(Self.app)&access_token=forged",
                                                          #"{"subscription":\#(sim.subscriptionJSON(3))}"#)
            #expect(r.status == 401, "\(r.text)")

            // An iOS device beside them.
            let hex = String(repeating: "ab", count: 32)
            r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(hex)"}"#)
            #expect(r.status == 201 && r.json?["transport"]?.stringValue == "apns", "\(r.text)")

            r = try await c.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"title":"Hi","body":"web and phone","webpush":{"icon":"/i.png"}}"#)
            #expect(r.status == 202 && r.json?["deliveries"]?.intValue == 3, "\(r.text)")
            let id = try #require(r.json?["id"]?.stringValue)
            #expect(await eventually(timeout: 30) { sim.rules.received.count == 2 && apns.simulator.received.count == 1 })
            let messages = sim.rules.received.compactMap(\.json)
            #expect(Set(sim.rules.received.map(\.subscription)) == [0, 1])
            #expect(messages.allSatisfy { $0["id"]?.stringValue == id && $0["title"]?.stringValue == "Hi" && $0["icon"]?.stringValue == "/i.png" })
            #expect(await eventually(timeout: 30) {
                let s = try? await c.get("/v1/notifications/\(id)")
                return s?.json?["summary"]?["delivered"]?.intValue == 3
            })
            #expect(sim.rules.count(status: 201) == 2 && apns.simulator.received.count == 1, "one delivery each")
            let ready = try await HTTPTestClient(port: port).get("/readyz")
            #expect(ready.json?["status"]?.stringValue == "ready" && ready.json?["transports"]?["web"]?.stringValue == "started", "\(ready.text)")
        } catch {
            Issue.record(error)
        }
    }

    @Test func aPushServiceThatRefusesTheKeyForEverySubscriptionMakesReadinessDegradedAndSaysWhy() async throws {
        let certs = try TestCertificates.shared()
        var simConfig = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "refuse")
        simConfig.faults.applicationServerKey = try P256PrivateKey.generate().publicKey  // made with another key
        let sim = try WebPushSimulator(configuration: simConfig)
        try sim.start()
        defer { sim.stop() }
        var registry = TransportRegistry()
        registry.register(WebPushTransport.self)
        let key = Base64URL.encode(try P256PrivateKey.generate().rawRepresentation)
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"\(Self.app)": {"routes": ["web"]}},
             "transports": {"web": {"type": "webpush", "vapidKey": "\(key)", "subject": "mailto:push@example.com", "refusalsToPause": 2,
                                    "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs.caFile)"}},
             "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}], "listen": "127.0.0.1:0"},
             "server": {"batchLinger": 0, "maintenanceInterval": "1h"}}
            """
        let port = try await TestDaemon.start(plugins: config, registry: registry, prefix: "herald-webpush-refused").port
        let c = HTTPTestClient(port: port, key: TestDaemon.key)
        do {
            for i in 0..<2 {
                let r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"bob","subscription":\#(sim.subscriptionJSON(i))}"#)
                #expect(r.status == 201, "\(r.text)")
            }
            let r = try await c.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["bob"],"body":"x"}"#)
            #expect(r.status == 202, "\(r.text)")
            let id = try #require(r.json?["id"]?.stringValue)
            #expect(await eventually(timeout: 30) {
                (try? await HTTPTestClient(port: port).get("/readyz").json?["transports"]?["web"]?.stringValue)?.hasPrefix("degraded: push service \(sim.origins[0])") == true
            })
            let ready = try await HTTPTestClient(port: port).get("/readyz")
            #expect(ready.status == 200 && ready.json?["status"]?.stringValue == "degraded", "\(ready.text)")
            #expect(ready.json?["transports"]?["web"]?.stringValue?.contains("VapidPkHashMismatch") == true, "\(ready.text)")
            // Nothing failed or was rejected: the deliveries wait (queued once the refused attempt's
            // completion is written, which may come just after the transport reported the impairment).
            var seen: [Set<String>] = []
            let waited = await eventually(timeout: 10) {
                guard let status = try? await c.get("/v1/notifications/\(id)") else { return false }
                let states = Set((status.json?["deliveries"]?.arrayValue ?? []).compactMap { $0["state"]?.stringValue })
                seen.append(states)
                return states == ["queued"]
            }
            #expect(waited, "\(seen)")
            #expect(seen.allSatisfy { $0.isSubset(of: ["queued", "sent"]) }, "\(seen)")
        } catch {
            Issue.record(error)
        }
    }
}
