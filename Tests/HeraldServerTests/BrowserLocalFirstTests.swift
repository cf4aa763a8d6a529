import Foundation
import HeraldCore
import HeraldCrypto
import HeraldLocalTransport
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import HeraldWebPush
import Testing

/// `local-first` for browsers: a page registers its push subscription with its client token
/// (`POST /v1/stream/subscription`), which links the subscription to the page's stream device
/// (the token's installation id). The real local transport beside the real `webpush` transport
/// against the Web Push simulator (which decrypts what it receives): an open tab gets the stream
/// only; a closed one the Web Push; a dead subscription's notification waits in the inbox for
/// the tab and is replayed with `Last-Event-ID`; a tab that does not acknowledge within
/// `ackTimeout` gets the Web Push, and the event stays in the inbox for replay.
///
/// Headless Chromium cannot reach a browser push service here (`PushManager.subscribe` needs
/// one), so the push half uses the simulator's own subscriptions, as a browser makes them.
@Suite(.serialized, .stopsDaemons) struct BrowserLocalFirstTests {
    static let app = "com.example.web"
    static let secret = "browser-local-first-secret-0123456789abcdef"

    /// Heartbeats every minute: within a test only the hang-up watcher finds a closed tab.
    static func start(sim: WebPushSimulator, certs: TestCertificates, demo: Bool = false) async throws -> TestDaemon {
        var registry = TransportRegistry()
        registry.register(WebPushTransport.self)
        registry.register(LocalTransport.self)
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"\(app)": {"routes": ["live", "web"], "foreground": "local-first", "clientSecret": "\(secret)",
                                 "ackTimeout": "1s", "inbox": {"ttl": 3600, "maxPerUser": 1000}}},
             "transports": {"live": {"type": "local"},
                            "web": {"type": "webpush", "vapidKey": "${VAPID_KEY}", "subject": "mailto:push@example.com",
                                    "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs.caFile)"}},
             "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}],
                     "listen": "127.0.0.1:0", "demo": \(demo), "streams": {"heartbeat": 60}},
             "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
             "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
             "log": {"level": "debug"}}
            """
        let vapid = try P256PrivateKey.generate()
        return try await TestDaemon.start(plugins: config, registry: registry,
                                          environment: ["VAPID_KEY": Base64URL.encode(vapid.rawRepresentation)], prefix: "herald-browser")
    }

    static func simulator(gone: Set<Int> = []) throws -> WebPushSimulator {
        let certs = try TestCertificates.shared()
        var config = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "browser")
        config.ports = [0]
        config.faults.gone = gone
        let sim = try WebPushSimulator(configuration: config)
        try sim.start()
        return sim
    }

    static func token(user: String, device: String) -> String {
        LocalDeliveryTests.token(user: user, device: device, app: app, secret: secret)
    }

    /// The page's own registration of simulator subscription `index`, with its client token.
    static func subscribe(_ d: TestDaemon, _ sim: WebPushSimulator, _ index: Int, user: String, device: String) async throws {
        let r = try await HTTPTestClient(port: d.port).post("/v1/stream/subscription?app=\(app)&access_token=\(token(user: user, device: device))",
                                                              #"{"subscription":\#(sim.subscriptionJSON(index))}"#)
        #expect(r.status == 201 && r.json?["transport"]?.stringValue == "web", "\(r.text)")
        #expect(r.json?["stream_device"]?.stringValue == device, "the subscription does not name its stream device: \(r.text)")
    }

    static func open(_ d: TestDaemon, user: String, device: String, ack: Bool = false, lastEventID: Int64? = nil) async throws -> StreamClient {
        let stream = try await StreamClient(port: d.port, query: "app=\(app)" + (ack ? "&ack=1" : ""), token: token(user: user, device: device),
                                            lastEventID: lastEventID)
        #expect(stream.status == 200, "\(stream.head)")
        return stream
    }

    static func send(_ d: TestDaemon, to user: String, _ body: String) async throws -> String {
        let r = try await d.client.post("/v1/notifications", #"{"app":"\#(app)","users":["\#(user)"],"title":"Herald","body":"\#(body)"}"#)
        #expect(r.status == 202 && r.json?["deliveries"]?.intValue == 1, "one delivery for the browser: \(r.text)")
        return r.json?["id"]?.stringValue ?? ""
    }

    static func presence(_ d: TestDaemon, user: String) -> Set<String> { d.daemon.presence(app: app, user: user) }

    /// The Web Push messages the simulator accepted for `subscription`, decrypted.
    static func pushes(_ sim: WebPushSimulator, _ subscription: Int) -> [JSONValue] {
        sim.rules.received.filter { $0.subscription == subscription }.compactMap(\.json)
    }

    @Test(.timeLimit(.minutes(1))) func anOpenTabGetsItsStreamOnlyAClosedOneTheWebPushAndADeadSubscriptionsNotificationIsReplayed() async throws {
        let certs = try TestCertificates.shared()
        let sim = try Self.simulator(gone: [1])
        defer { sim.stop() }
        let d = try await Self.start(sim: sim, certs: certs)
        let tab = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
        try await Self.subscribe(d, sim, 0, user: "alice", device: tab)

        // Open: the stream only, one delivery (the installation id is not planned a second time).
        var stream = try await Self.open(d, user: "alice", device: tab)
        #expect(await eventually(timeout: 10) { Self.presence(d, user: "alice") == [tab] })
        let first = try await Self.send(d, to: "alice", "tab open")
        let event = try #require(try await stream.next())
        #expect(event.json?["id"]?.stringValue == first && event.id == 1, "\(event)")
        #expect(await ForegroundTruthTests.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])
        let status = try await d.client.get("/v1/notifications/\(first)")
        #expect(status.json?["deliveries"]?.arrayValue?.first?["token"]?.stringValue != tab, "the delivery is the subscription's: \(status.text)")

        // Closed: the hang-up watcher sees it; the next notification is a Web Push, decrypted by the simulator.
        stream.raw.close()
        #expect(await eventually(timeout: 10) { Self.presence(d, user: "alice").isEmpty })
        let second = try await Self.send(d, to: "alice", "tab closed")
        #expect(await eventually(timeout: 20) { Self.pushes(sim, 0).count == 1 })
        let push = try #require(Self.pushes(sim, 0).first)
        #expect(push["id"]?.stringValue == second && push["title"]?.stringValue == "Herald" && push["body"]?.stringValue == "tab closed", "\(push)")
        #expect(push["app"]?.stringValue == Self.app && push["created_at"]?.stringValue != nil, "\(push)")
        #expect(await ForegroundTruthTests.routes(d, second, becoming: ["web delivered"]) == ["web delivered"])

        // Open again (Last-Event-ID 1): as for phones, what the Web Push delivered is not replayed; the stream goes on.
        stream = try await Self.open(d, user: "alice", device: tab, lastEventID: 1)
        #expect(await eventually(timeout: 10) { Self.presence(d, user: "alice") == [tab] })
        let third = try await Self.send(d, to: "alice", "tab open again")
        let next = try #require(try await stream.next())
        #expect(next.json?["id"]?.stringValue == third && next.id == 2, "\(next)")
        #expect(Self.pushes(sim, 0).count == 1, "a Web Push for an open tab")

        // A dead subscription (the simulator answers 410) of a closed tab: retired, and the
        // notification waits in the inbox under the tab's installation id.
        let other = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"
        try await Self.subscribe(d, sim, 1, user: "bob", device: other)
        let missed = try await Self.send(d, to: "bob", "for later")
        #expect(await ForegroundTruthTests.routes(d, missed, becoming: ["live parked"]) == ["live parked"])
        #expect(sim.rules.count(status: 410) == 1)
        let devices = try await d.client.get("/v1/users/bob/devices?app=\(Self.app)")
        #expect(devices.text.contains(#""invalidated_at":"#) && !devices.text.contains(#""invalidated_at":null"#),
                "the 410 retired the subscription: \(devices.text)")
        // The tab opens its stream: the parked notification is written to it (unparked by the stream device).
        var bob = try await Self.open(d, user: "bob", device: other)
        let delivered = try #require(try await bob.next())
        #expect(delivered.json?["id"]?.stringValue == missed, "\(delivered)")
        let seq = try #require(delivered.id)
        #expect(await ForegroundTruthTests.routes(d, missed, becoming: ["live delivered"]) == ["live delivered"])
        // And a reconnect from before it (Last-Event-ID) replays it from the inbox.
        bob.raw.close()
        #expect(await eventually(timeout: 10) { Self.presence(d, user: "bob").isEmpty })
        bob = try await Self.open(d, user: "bob", device: other, lastEventID: seq - 1)
        let replayed = try #require(try await bob.next())
        #expect(replayed.json?["id"]?.stringValue == missed && replayed.id == seq, "\(replayed)")
        bob.raw.close()
        stream.raw.close()
    }

    /// The history of a delivery's attempts (`history`), as `route outcome → next`.
    static func history(_ d: TestDaemon, _ id: String) async throws -> [JSONValue] {
        let status = try await d.client.get("/v1/notifications/\(id)")
        return status.json?["deliveries"]?.arrayValue?.first?["history"]?.arrayValue ?? []
    }

    @Test(.timeLimit(.minutes(1))) func aWebPush410ThatFallsBackToTheInboxKeepsThe410InTheDeliverysHistory() async throws {
        let certs = try TestCertificates.shared()
        let sim = try Self.simulator(gone: [3])
        defer { sim.stop() }
        let d = try await Self.start(sim: sim, certs: certs)
        let tab = "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
        try await Self.subscribe(d, sim, 3, user: "dora", device: tab)

        // A closed tab with a dead subscription: the Web Push answers 410, the subscription is
        // retired, and the notification falls back to the inbox.
        let id = try await Self.send(d, to: "dora", "for later")
        #expect(await ForegroundTruthTests.routes(d, id, becoming: ["live parked"]) == ["live parked"])
        #expect(sim.rules.count(status: 410) == 1)
        let status = try await d.client.get("/v1/notifications/\(id)")
        let delivery = try #require(status.json?["deliveries"]?.arrayValue?.first, "\(status.text)")
        // The current state and reason are as before; the 410 is in the history.
        #expect(delivery["transport"]?.stringValue == "live" && delivery["state"]?.stringValue == "parked", "\(status.text)")
        #expect(delivery["reason"]?.stringValue == "in the inbox until the device connects", "\(status.text)")
        var history = try await Self.history(d, id)
        #expect(history.count == 2, "\(status.text)")
        let gone = try #require(history.first)
        #expect(gone["route"]?.stringValue == "web" && gone["outcome"]?.stringValue == "token_invalid", "\(gone)")
        #expect(gone["answer"]?.stringValue?.hasPrefix("410 subscription gone") == true, "the platform's answer: \(gone)")
        #expect(gone["next"]?.stringValue == "retired device, fallback to live", "\(gone)")
        #expect(gone["at"]?.stringValue.flatMap(UpgradeTests.milliseconds) != nil, "the time of the answer: \(gone)")
        let parked = try #require(history.last)
        #expect(parked["route"]?.stringValue == "live" && parked["outcome"]?.stringValue == "not_connected"
                && parked["next"]?.stringValue == "parked", "\(parked)")

        // The tab opens its stream: the third attempt delivers it, after the first two.
        let stream = try await Self.open(d, user: "dora", device: tab)
        let event = try #require(try await stream.next())
        #expect(event.json?["id"]?.stringValue == id, "\(event)")
        #expect(await ForegroundTruthTests.routes(d, id, becoming: ["live delivered"]) == ["live delivered"])
        history = try await Self.history(d, id)
        #expect(history.map { "\($0["route"]?.stringValue ?? "") → \($0["next"]?.stringValue ?? "")" }
                == ["web → retired device, fallback to live", "live → parked", "live → delivered"], "\(history)")
        stream.raw.close()
    }

    @Test(.timeLimit(.minutes(1))) func aTabThatDoesNotAcknowledgeWithinTheAckTimeoutGetsTheWebPushAndTheEventIsReplayed() async throws {
        let certs = try TestCertificates.shared()
        let sim = try Self.simulator()
        defer { sim.stop() }
        let d = try await Self.start(sim: sim, certs: certs)
        let tab = "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"
        try await Self.subscribe(d, sim, 2, user: "carol", device: tab)
        var stream = try await Self.open(d, user: "carol", device: tab, ack: true)
        #expect(await eventually(timeout: 10) { Self.presence(d, user: "carol") == [tab] })

        // Acknowledged: delivered on the ack, no Web Push.
        let first = try await Self.send(d, to: "carol", "seen")
        let one = try #require(try await stream.next())
        #expect(one.json?["id"]?.stringValue == first, "\(one)")
        let ack = try await HTTPTestClient(port: d.port, key: Self.token(user: "carol", device: tab))
            .post("/v1/stream/ack?app=\(Self.app)", #"{"id":\#(one.id ?? 0)}"#)
        #expect(ack.status == 204, "\(ack.text)")
        #expect(await ForegroundTruthTests.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])

        // Read but not acknowledged: past the 1 s ackTimeout the subscription gets the Web Push once.
        let second = try await Self.send(d, to: "carol", "not acknowledged")
        let two = try #require(try await stream.next())
        #expect(two.json?["id"]?.stringValue == second, "\(two)")
        #expect(await eventually(timeout: 20) { Self.pushes(sim, 2).count == 1 })
        #expect(Self.pushes(sim, 2).first?["id"]?.stringValue == second)
        #expect(await ForegroundTruthTests.routes(d, second, becoming: ["web delivered"]) == ["web delivered"])
        #expect(Self.presence(d, user: "carol").isEmpty, "an unresponsive tab is not in the foreground")

        // Reopened with the last acknowledged id: the event the tab never acknowledged is replayed.
        stream.raw.close()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 0 })
        stream = try await Self.open(d, user: "carol", device: tab, ack: true, lastEventID: one.id)
        let replayed = try #require(try await stream.next())
        #expect(replayed.json?["id"]?.stringValue == second && replayed.id == two.id, "\(replayed)")
        #expect(Self.pushes(sim, 2).count == 1, "the Web Push went once")
        stream.raw.close()
    }
}
