import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldCrypto
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import HeraldWebPush
import Testing

/// `DELETE /v1/devices/{token}` takes any route's address, not only hex: a Web Push device is
/// removed by its subscription (as the API returns it, percent-encoded in the path), and an
/// APNs device still by its hex token in any spelling the route normalises.
@Suite(.serialized, .stopsDaemons) struct DeviceRemovalTests {
    static let app = "com.example.web"

    /// Percent-encodes everything but unreserved characters, as a client puts a token in a path.
    static func pathSegment(_ token: String) -> String {
        token.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"))!
    }

    @Test func aWebPushDeviceIsRemovedByItsSubscriptionAndAnAPNsDeviceByItsHexToken() async throws {
        let certs = try TestCertificates.shared()
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        var simConfig = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "removal")
        simConfig.ports = [0]
        let sim = try WebPushSimulator(configuration: simConfig)
        try sim.start()
        defer { sim.stop(); apns.stop() }
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(WebPushTransport.self)
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"\(Self.app)": {"routes": ["apns", "web"]}},
             "transports": {
               "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                        "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"},
               "web": {"type": "webpush", "vapidKey": "\(Base64URL.encode(try P256PrivateKey.generate().rawRepresentation))",
                       "subject": "mailto:push@example.com", "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs.caFile)"}},
             "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}], "listen": "127.0.0.1:0"},
             "server": {"batchLinger": 0, "maintenanceInterval": "1h"}}
            """
        let port = try await TestDaemon.start(plugins: config, registry: registry, prefix: "herald-device-removal").port
        let c = HTTPTestClient(port: port, key: TestDaemon.key)
        do {
            for i in 0..<2 {
                let r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","subscription":\#(sim.subscriptionJSON(i))}"#)
                #expect(r.status == 201 && r.json?["transport"]?.stringValue == "web", "\(r.text)")
            }
            let hex = String(repeating: "ab", count: 32)
            var r = try await c.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(hex)"}"#)
            #expect(r.status == 201 && r.json?["transport"]?.stringValue == "apns", "\(r.text)")

            func tokens() async throws -> [String: String] {
                let list = try await c.get("/v1/users/alice/devices?app=\(Self.app)")
                var out: [String: String] = [:]
                for d in list.json?["devices"]?.arrayValue ?? [] {
                    if let t = d["token"]?.stringValue, let tr = d["transport"]?.stringValue { out[t] = tr }
                }
                return out
            }
            let before = try await tokens()
            #expect(before.count == 3, "\(before)")
            let webTokens = before.filter { $0.value == "web" }.keys.sorted()
            #expect(webTokens.count == 2 && webTokens.allSatisfy { $0.hasPrefix("{\"endpoint\":\"https://127.0.0.1") }, "\(webTokens)")

            // The first subscription by its token exactly as the API returned it.
            r = try await c.delete("/v1/devices/\(Self.pathSegment(webTokens[0]))?app=\(Self.app)")
            #expect(r.status == 204, "\(r.text)")
            // The second by the page's own spelling of it (keys in another order, spaces): the route normalises it.
            let other = try #require(webTokens.count == 2 ? webTokens[1] : nil)
            let s = try WebPushSubscription(stored: other, allowList: EndpointAllowList(["127.0.0.1"]))
            let spelled = #"{ "keys": {"p256dh": "\#(Base64URL.encode(s.p256dh))", "auth": "\#(Base64URL.encode(s.auth))"}, "endpoint": "\#(s.endpoint)" }"#
            #expect(spelled != other)
            r = try await c.delete("/v1/devices/\(Self.pathSegment(spelled))?app=\(Self.app)")
            #expect(r.status == 204, "\(r.text)")
            // Gone: deleting again is 404, naming no full subscription.
            r = try await c.delete("/v1/devices/\(Self.pathSegment(webTokens[0]))?app=\(Self.app)")
            #expect(r.status == 404 && !r.text.contains(s.endpoint), "\(r.text)")

            // The APNs device by its hex token in upper case.
            r = try await c.delete("/v1/devices/\(hex.uppercased())?app=\(Self.app)")
            #expect(r.status == 204, "\(r.text)")
            #expect(try await tokens().isEmpty)
            // An address no route takes and no device has.
            r = try await c.delete("/v1/devices/not-a-device?app=\(Self.app)")
            #expect(r.status == 404, "\(r.text)")
        } catch {
            Issue.record(error)
        }
    }
}
