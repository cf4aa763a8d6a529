import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldEvents
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing

/// Delivery events out of a running daemon (issue 38): the real `apns-http2` transport against
/// the HTTP/2 APNs simulator (410 for one device), a webhook to a receiver that verifies every
/// signature, and the `GET /v1/events` feed over the same outbox.
@Suite(.serialized, .stopsDaemons) struct WebhookDaemonTests {
    static let secret = Secret("whsec_daemon_test")
    static let app = TestDaemon.app
    static let live = TestDaemon.token(0x71), dead = TestDaemon.token(0x72)

    static var registry: TransportRegistry {
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(section: WebhooksConfiguration.self)
        registry.register(section: EventsConfiguration.self)
        return registry
    }
    static let environment = ["HOOK_SECRET": secret.value]

    static func config(apns: HTTP2SimulatorHarness, receiver: WebhookReceiver, events: String = "{}") -> String {
        let c = apns.certificates
        return """
            {
              "storage": {"path": "herald.db", "synchronous": "normal"},
              "apps": {"\(app)": {"routes": ["apns"]}},
              "transports": {
                "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                         "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"}
              },
              "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]},
                               {"id": "sender", "secret": "\(TestDaemon.sendOnlyKey)", "scopes": ["send"]}],
                      "listen": "127.0.0.1:0"},
              "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
              "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
              "webhooks": [{"id": "backend", "url": "http://127.0.0.1:\(receiver.port)/herald", "secrets": ["${HOOK_SECRET}"],
                            "events": ["delivery", "device"], "timeout": "5s"}],
              "events": \(events),
              "log": {"level": "debug"}
            }
            """
    }

    static func start(apns: HTTP2SimulatorHarness, receiver: WebhookReceiver, events: String = "{}") async throws -> TestDaemon {
        try await TestDaemon.start(plugins: config(apns: apns, receiver: receiver, events: events), registry: registry,
                                   environment: environment, prefix: "herald-webhooks")
    }

    @Test(.timeLimit(.minutes(2))) func aReloadPointsTheWebhookElsewhereAndLaterEventsGoThere() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let before = try WebhookReceiver(secrets: [Self.secret]), after = try WebhookReceiver(secrets: [Self.secret])
        let d = try await Self.start(apns: apns, receiver: before)
        try await d.register(user: "alice", token: Self.live)
        #expect(try await d.client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"alert":"one"}"#).status == 202)
        #expect(await eventually(timeout: 30) { before.events.count >= 1 })
        let next = try DaemonConfiguration.parse(Data(Self.config(apns: apns, receiver: after).utf8), baseDirectory: d.directory.path,
                                                 registry: Self.registry, environment: Self.environment)
        guard case .applied = await d.daemon.reload(next) else { Issue.record("the reload was refused"); return }
        #expect(try await d.client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"alert":"two"}"#).status == 202)
        #expect(await eventually(timeout: 30) { after.events.count >= 1 })
        // The new URL continues from the cursor: only the later event, and nothing more to the old one.
        #expect(after.events.count == 1 && before.events.count == 1)
        #expect(after.events.first?["id"]?.stringValue != before.events.first?["id"]?.stringValue)
        #expect(after.posts.allSatisfy { $0.verified == [true] })
        await before.stop()
        await after.stop()
    }

    @Test(.timeLimit(.minutes(2))) func deliveredInvalidTokenAndRetiredArriveSignedAndTheFeedWalksTheSameEvents() async throws {
        // After the registration (else Apple's timestamp rule keeps the device: registered again since).
        let retiredAt = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 5).rounded(.down))
        var faults = HTTP2Faults()
        faults.unregistered = [Self.dead: retiredAt]
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        let d = try await Self.start(apns: apns, receiver: receiver)
        try await d.register(user: "alice", token: Self.live)
        try await d.register(user: "bob", token: Self.dead)
        let sent = try await d.client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice","bob"],"alert":"hi","idempotency_key":"order-42"}"#)
        #expect(sent.status == 202)
        let id = try #require(sent.json?["id"]?.stringValue)
        #expect(await eventually(timeout: 30) { Set(receiver.events.compactMap { $0["type"]?.stringValue }).count >= 3 })
        let posts = receiver.posts
        #expect(posts.allSatisfy { $0.verified == [true] && $0.webhookID == "backend" && $0.path == "/herald" })
        let events = receiver.events
        #expect(Set(events.compactMap { $0["type"]?.stringValue }) == ["delivery.delivered", "delivery.invalid_token", "device.retired"])
        let delivered = try #require(events.first { $0["type"]?.stringValue == "delivery.delivered" })
        #expect(delivered["app"]?.stringValue == Self.app)
        #expect(delivered["data"]?["notification"]?.stringValue == id)
        #expect(delivered["data"]?["device"]?.stringValue == Self.live)
        #expect(delivered["data"]?["user"]?.stringValue == "alice")
        #expect(delivered["data"]?["route"]?.stringValue == "apns")
        #expect(delivered["data"]?["attempts"]?.intValue == 1)
        #expect(delivered["data"]?["idempotency_key"]?.stringValue == "order-42")
        #expect(delivered["data"]?["receipt"]?.stringValue?.isEmpty == false)
        let invalid = try #require(events.first { $0["type"]?.stringValue == "delivery.invalid_token" })
        #expect(invalid["data"]?["device"]?.stringValue == Self.dead)
        #expect(invalid["data"]?["reason"]?.stringValue?.contains("Unregistered") == true)
        let retired = try #require(events.first { $0["type"]?.stringValue == "device.retired" })
        #expect(retired["data"]?["device"]?.stringValue == Self.dead)
        #expect(retired["data"]?["retired_at"]?.stringValue == EventRecord.timestamp(retiredAt))

        // The feed: the same events, the same ids, in the same order; its cursor walks them one by one.
        let ids = events.compactMap { $0["id"]?.stringValue }
        let page = try await d.client.get("/v1/events")
        #expect(page.status == 200)
        #expect(page.json?["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ids)
        var walked: [String] = []
        var cursor = "0"
        for _ in 0..<10 {
            let r = try await d.client.get("/v1/events?after=\(cursor)&limit=1")
            guard let e = r.json?["events"]?.arrayValue, let next = r.json?["next"]?.stringValue, !e.isEmpty else { break }
            walked += e.compactMap { $0["id"]?.stringValue }
            cursor = next
        }
        #expect(walked == ids)
        let devices = try await d.client.get("/v1/events?types=device")
        #expect(devices.json?["events"]?.arrayValue?.compactMap { $0["type"]?.stringValue } == ["device.retired"])
        let bad = try await d.client.get("/v1/events?types=delivery.bounced")
        #expect(bad.status == 400)
        #expect(bad.errorField == "types")
        #expect(try await HTTPTestClient(port: d.port, key: TestDaemon.sendOnlyKey).get("/v1/events").status == 403)

        // Removed through the API: a device.removed event.
        let removed = try await d.client.request("DELETE", "/v1/devices/\(Self.live)?app=\(Self.app)")
        #expect(removed.status == 204)
        #expect(await eventually(timeout: 30) { receiver.events.contains { $0["type"]?.stringValue == "device.removed" } })
        #expect(receiver.events.last?["data"]?["device"]?.stringValue == Self.live)
        await receiver.stop()
    }

    @Test(.timeLimit(.minutes(2))) func aReceiverThatFallsBehindMakesReadyzDegradedUntilItCatchesUp() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let up = Locked(false)
        let receiver = try WebhookReceiver(secrets: [Self.secret]) { _ in HTTPResponse(status: up.withLock { $0 } ? 200 : 503) }
        let d = try await Self.start(apns: apns, receiver: receiver, events: #"{"degradedAfter": "1s"}"#)
        // Ready once the transports have started (the daemon answers before they have).
        #expect(await eventually(timeout: 10) { (try? await d.client.get("/readyz").json?["status"]?.stringValue) == "ready" })
        let ready = try await d.client.get("/readyz")
        #expect(ready.json?["status"]?.stringValue == "ready")
        #expect(ready.json?["webhooks"]?["backend"]?.stringValue == "ok")
        try await d.register(user: "alice", token: Self.live)
        #expect(try await d.client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"alert":"hi"}"#).status == 202)
        #expect(await eventually(timeout: 30) {
            let r = try? await d.client.get("/readyz")
            return r?.json?["status"]?.stringValue == "degraded" && r?.json?["webhooks"]?["backend"]?.stringValue?.hasPrefix("degraded: oldest event waiting") == true
        })
        #expect(try await d.client.get("/readyz").status == 200)
        up.withLock { $0 = true }
        #expect(await eventually(timeout: 30) { (try? await d.client.get("/readyz"))?.json?["status"]?.stringValue == "ready" })
        #expect(receiver.events.contains { $0["type"]?.stringValue == "delivery.delivered" })
        await receiver.stop()
    }
}

/// A transport that pauses (its credentials refused) and works again: `transport.paused` and
/// `transport.resumed` in the outbox, read through the feed, beside the delivery's own event.
@Suite(.serialized, .stopsDaemons) struct TransportEventTests {
    @Test(.timeLimit(.minutes(1))) func aPauseAndItsResumptionAreEventsInTheFeed() async throws {
        let fixed = Locked(false)
        let transport = ScriptedTransport(name: "t", clock: SystemClock()) { _ in
            fixed.withLock { $0 } ? .delivered(receipt: nil) : .setupFailure(reason: "InvalidProviderToken: check keyId")
        }
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(server: #""probeInterval": "1s""#), transports: { _ in transport })
        try await d.register(user: "u1", token: TestDaemon.token(1))
        #expect(try await d.client.post("/v1/notifications", #"{"app":"com.example.app","users":["u1"],"alert":"x"}"#).status == 202)
        func types() async -> [String] {
            let r = try? await d.client.get("/v1/events?types=transport,delivery")
            return r?.json?["events"]?.arrayValue?.compactMap { $0["type"]?.stringValue } ?? []
        }
        #expect(await eventually(timeout: 20) { await types() == ["transport.paused"] })
        fixed.withLock { $0 = true }
        let resumed = await eventually(timeout: 20) { await types().count >= 3 }
        let seen = await types()
        // The probe's delivery is what shows the transport works again: its outcome comes first.
        #expect(resumed && seen == ["transport.paused", "delivery.delivered", "transport.resumed"], "\(seen)")
        let events = try await d.client.get("/v1/events?types=transport").json?["events"]?.arrayValue ?? []
        #expect(events.first?["app"]?.stringValue == "")
        #expect(events.first?["data"]?["transport"]?.stringValue == "t")
        #expect(events.first?["data"]?["reason"]?.stringValue == "InvalidProviderToken: check keyId")
        #expect(events.last?["data"]?["transport"]?.stringValue == "t")
    }
}
