import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald serve` with a webpush route killed with SIGKILL while sends are in flight (the push
/// service answers after 300 ms), then started again on the same store: every accepted
/// notification reaches every subscription and decrypts there (the simulator decrypts each
/// message with the subscription's keys), none lost.
///
/// At least once: a message the push service accepted (201) just before the kill, whose
/// `delivered` had not reached the store, is sent again after the restart, so the simulator
/// may record it twice (this test counts distinct subscription–notification pairs and reports
/// the repeats); a page drops the repeat by the payload's `id`. No accepted notification is
/// received zero times.
@Suite(.serialized) struct WebPushCrashTests {
    static let app = "com.example.web"

    @Test(.timeLimit(.minutes(3))) func killNineUnderLoadLosesNothing() async throws {
        let certs = try TestCertificates.shared()
        var simConfig = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "kill")
        simConfig.latency = 0.3
        let sim = try WebPushSimulator(configuration: simConfig)
        try sim.start()
        defer { sim.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-webpush-kill")
        defer { dir.remove() }
        // Two streams at a time: the 60 sends take about 9 s, so the kill (after the fifth) lands
        // with most of them not yet sent and two in flight, every run.
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"\(Self.app)": {"routes": ["web"]}},
             "transports": {"web": {"type": "webpush", "vapidKey": "\(Base64URL.encode(try P256PrivateKey.generate().rawRepresentation))",
                                    "subject": "mailto:push@example.com", "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs.caFile)",
                                    "timeout": "5s", "maxConcurrentStreams": 2}},
             "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
             "delivery": {"initialBackoff": "100ms", "jitter": 0},
             "server": {"probeInterval": "1h", "batchLinger": 0},
             "log": {"level": "info"}}
            """
        let devices = 10, notifications = 6
        let run = try await KillNineRun.run(dir: dir, config: config, app: Self.app, notifications: notifications,
                                            deliveries: notifications * devices, killWhen: 5, received: { sim.rules.received.count }) { client in
            for k in 0..<devices {
                let r = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"u","subscription":\#(sim.subscriptionJSON(k))}"#)
                #expect(r.status == 201, "\(r.text)")
            }
        }
        let received = sim.rules.received
        var pairs = Set<String>()
        for m in received { pairs.insert("\(m.subscription) \(m.json?["id"]?.stringValue ?? "undecrypted")") }
        let expected = Set((0..<devices).flatMap { k in run.ids.map { "\(k) \($0)" } })
        #expect(pairs == expected, "lost: \(expected.subtracting(pairs).sorted()), unexpected: \(pairs.subtracting(expected).sorted())")
        #expect(received.count >= expected.count, "repeats after the restart (at least once): \(received.count - pairs.count)")
    }
}
