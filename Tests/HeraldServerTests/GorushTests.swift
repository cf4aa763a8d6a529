import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldFCM
import HeraldGorush
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing

/// A daemon in this process whose `gorush` listener (port 0) takes gorush's requests:
/// platform 1 through the real apns-http2 transport to the in-process APNs simulator,
/// platform 2 through the real fcm transport to the in-process FCM simulator (real TLS,
/// HTTP/2 and OAuth on both).
struct GorushFixture {
    static let app = "com.example.app"
    let apns: HTTP2SimulatorHarness
    let fcm: FCMSimulator
    let test: TestDaemon
    let gorushPort: Int

    /// A registration token of realistic shape, unique to `tag`.
    static func androidToken(_ tag: String) -> String { FCMDaemonTests.androidToken(0).replacingOccurrences(of: "a0b", with: tag) }

    /// The gorush client (no key unless given).
    func gorush(key: String? = nil) -> HTTPTestClient { HTTPTestClient(port: gorushPort, key: key) }

    static func config(_ apns: HTTP2SimulatorHarness, fcm: FCMSimulator, credentials: String, gorush: String, server: String = "") -> String {
        let c = apns.certificates
        return """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": ["droid", "apns"]}, "org.example.ios": {"topic": "org.example.ios", "routes": ["apns"]}},
          "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                                  "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"},
                         "droid": {"type": "fcm", "credentialsFile": "\(credentials)", "endpoint": "\(fcm.baseURL)", "caFile": "\(c.caFile)"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]},
                                                    {"id": "sender", "secret": "\(TestDaemon.sendOnlyKey)", "scopes": ["send"]},
                                                    {"id": "devices", "secret": "devices-only-0123456789", "scopes": ["devices"]}]},
          "delivery": {"initialBackoff": "100ms", "maxBackoff": "200ms", "maxAttempts": 5, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"\(server)},
          "log": {"level": "debug"},
          "gorush": \(gorush)
        }
        """
    }

    static var registry: TransportRegistry {
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(FCMTransport.self)
        registry.register(section: GorushConfiguration.self)
        return registry
    }

    static func start(gorush: String = #"{"listen": "127.0.0.1:0", "app": "com.example.app"}"#, server: String = "",
                      faults: HTTP2Faults = HTTP2Faults(), fcmFaults: FCMFaults = FCMFaults()) async throws -> GorushFixture {
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        let fcm: FCMSimulator
        do {
            fcm = try FCMDaemonTests.fcmSimulator { $0.faults = fcmFaults }.0
        } catch {
            apns.stop()
            throw error
        }
        do {
            let directory = try TemporaryDirectory(prefix: "herald-gorush")
            try fcm.writeServiceAccount(to: directory.file("sa.json"), key: TestKeys.rsa)
            let configuration = try DaemonConfiguration.parse(Data(config(apns, fcm: fcm, credentials: directory.file("sa.json"), gorush: gorush, server: server).utf8),
                                                              baseDirectory: directory.path, registry: registry, environment: [:])
            let logs = RecordingLogHandler()
            let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                                options: Daemon.Options(random: { 0.5 }, environment: [:], frontEnds: [GorushGateway.self]))
            let port: Int
            do { port = try await daemon.start() } catch {
                directory.remove()
                throw error
            }
            let test = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
            StopsDaemons.current?.withLock { $0.append(test) }
            guard let gorushPort = daemon.port(of: GorushGateway.name), gorushPort > 0 else { throw TestSetupError("the gorush listener did not start") }
            return GorushFixture(apns: apns, fcm: fcm, test: test, gorushPort: gorushPort)
        } catch {
            apns.stop()
            fcm.stop()
            throw error
        }
    }

    func stop() async {
        await test.stop()
        apns.stop()
        fcm.stop()
    }

    /// What the APNs simulator accepted for `token`.
    func received(_ token: String) -> [ReceivedNotification] { apns.simulator.received.filter { $0.deviceToken == token } }
    /// What the FCM simulator accepted for `token`.
    func sent(_ token: String) -> [FCMReceivedMessage] { fcm.received.filter { $0.token == token } }
}

@Suite(.serialized, .stopsDaemons) struct GorushTests {
    static let iosToken = "11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"

    @Test(.timeLimit(.minutes(2))) func eachPlatformGoesThroughItsRouteAndThe200ComesAfterTheCommit() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        let android = GorushFixture.androidToken("g1x"), second = GorushFixture.androidToken("g2x")
        // gorush's TestSenMultipleNotifications, with a real Android token: 3 targets. The app's
        // first route is the Android one, which takes hex tokens too: the platform decides.
        let r = try await f.gorush().post("/api/push", """
            {"notifications": [{"tokens": ["\(Self.iosToken)"], "platform": 1, "title": "Hello iOS", "message": "Welcome iOS", "badge": 2,
                                "collapse_id": "score", "push_type": "alert"},
                               {"tokens": ["\(android)", "\(second)"], "platform": 2, "title": "Hello", "message": "Welcome Android",
                                "priority": "high", "notification": {"icon": "myicon", "color": "#112244", "channel_id": "news"}}]}
            """)
        #expect(r.status == 200 && r.text == #"{"success":"ok","counts":3,"logs":[]}"#, "\(r)")
        #expect(r.headers["content-type"] == "application/json")
        // Committed before the answer: the accept path counts a notification once its commit returned.
        let metrics = try await f.test.client.get("/metrics")
        #expect(metrics.text.contains("herald_deliveries_accepted_total 3") && metrics.text.contains(#"herald_notifications_accepted_total{app="com.example.app"} 2"#),
                "\(metrics.text.split(separator: "\n").filter { $0.contains("accepted") })")

        #expect(await eventually(timeout: 20) { f.received(Self.iosToken).count == 1 })
        let ios = try #require(f.received(Self.iosToken).first)
        #expect(ios.topic == GorushFixture.app && ios.pushType == .alert && ios.collapseID == "score")
        #expect(ios.payloadJSON?["aps"]?["alert"]?["title"] == "Hello iOS" && ios.payloadJSON?["aps"]?["alert"]?["body"] == "Welcome iOS")
        #expect(ios.payloadJSON?["aps"]?["badge"] == 2)
        #expect(await eventually(timeout: 20) { f.sent(android).count == 1 && f.sent(second).count == 1 })
        let message = try #require(f.sent(android).first).message
        #expect(message["notification"]?["title"] == "Hello" && message["notification"]?["body"] == "Welcome Android", "\(message)")
        #expect(message["android"]?["priority"] == "high", "\(message)")
        #expect(message["android"]?["notification"]?["icon"] == "myicon" && message["android"]?["notification"]?["color"] == "#112244"
                && message["android"]?["notification"]?["channel_id"] == "news", "\(message)")
        // The iOS token never went to the Android route, nor an Android one to APNs.
        #expect(f.sent(Self.iosToken).isEmpty && f.received(android).isEmpty)
        await f.stop()
    }

    @Test(.timeLimit(.minutes(2))) func refusalsAnswerAsGorushDoesAndStoreNothing() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        let c = f.gorush()
        var r = try await c.post("/api/push", "", contentType: nil)
        #expect(r.status == 400 && r.text == #"{"code":400,"message":"Missing notifications field."}"#, "\(r)")
        r = try await c.post("/api/push", #"{"notifications": []}"#)
        #expect(r.status == 400 && r.text == #"{"code":400,"message":"Notifications field is empty."}"#, "\(r)")
        r = try await c.post("/api/push", #"{"notifications": [{"tokens": ["a"], "platform": 2, "message": "x", "mutable_content": 1}]}"#)
        #expect(r.status == 400 && r.json?["code"] == 400 && r.json?["message"]?.stringValue?.hasPrefix("notifications[0].mutable_content") == true, "\(r)")
        // Too big for the Android route: the second notification is refused before the first is stored.
        let big = String(repeating: "x", count: 5000)
        r = try await c.post("/api/push", """
            {"notifications": [{"tokens": ["\(Self.iosToken)"], "platform": 1, "message": "first"},
                               {"tokens": ["\(GorushFixture.androidToken("big"))"], "platform": 2, "message": "\(big)"}]}
            """)
        #expect(r.status == 400 && r.json?["message"]?.stringValue?.hasPrefix("notifications[1].payload: route droid (fcm)") == true, "\(r)")
        r = try await c.get("/api/push")
        #expect(r.status == 405 && r.headers["allow"] == "POST", "\(r)")
        r = try await c.get("/v1/notifications")
        #expect(r.status == 404 && r.json?["code"] == 404, "\(r)")
        // Nothing of the refused requests was stored or sent.
        let metrics = try await f.test.client.get("/metrics")
        #expect(!metrics.text.contains(#"herald_notifications_accepted_total{app="com.example.app"}"#), "\(metrics.text.split(separator: "\n").filter { $0.contains("accepted") })")
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(f.received(Self.iosToken).isEmpty)
        await f.stop()
    }

    @Test(.timeLimit(.minutes(2))) func statAppAndHealthzAnswerAsGorushDoes() async throws {
        let dead = GorushFixture.androidToken("dxd")
        var faults = FCMFaults()
        faults.unregisteredTokens = [dead]
        let f = try await GorushFixture.start(fcmFaults: faults)
        defer { f.apns.stop() }
        let c = f.gorush()
        var r = try await c.get("/healthz")
        #expect(r.status == 200 && r.body.isEmpty, "\(r)")
        r = try await c.request("HEAD", "/healthz")
        #expect(r.status == 200, "\(r)")
        r = try await c.post("/api/push", """
            {"notifications": [{"tokens": ["\(Self.iosToken)"], "platform": 1, "message": "one"},
                               {"tokens": ["\(GorushFixture.androidToken("lvl"))", "\(dead)"], "platform": 2, "message": "two"}]}
            """)
        #expect(r.status == 200 && r.json?["counts"] == 3, "\(r)")
        var stat: JSONValue? = nil
        #expect(await eventually(timeout: 20) {
            stat = try? await c.get("/api/stat/app").json
            return stat?["ios"]?["push_success"] == 1 && stat?["android"]?["push_success"] == 1 && stat?["android"]?["push_error"] == 1
        }, "\(String(describing: stat))")
        #expect(stat?["total_count"] == 3 && stat?["submitted_tasks"] == 2 && stat?["success_tasks"] == 2 && stat?["failure_tasks"] == 0)
        #expect(stat?["ios"]?["push_error"] == 0 && stat?["huawei"] == ["push_success": 0, "push_error": 0])
        #expect(stat?["version"]?.stringValue != nil && stat?["busy_workers"] == 0)
        await f.stop()
    }

    @Test(.timeLimit(.minutes(2))) func withAPIKeysTheSendScopeIsNeededAndAPlatformWithoutARouteIsRefused() async throws {
        let f = try await GorushFixture.start(gorush: #"{"listen": "127.0.0.1:0", "app": "org.example.ios", "auth": "apiKey"}"#)
        defer { f.apns.stop() }
        var r = try await f.gorush().post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 1, "message": "x"}]}"#)
        #expect(r.status == 401 && r.json?["code"] == 401 && r.headers["www-authenticate"] != nil, "\(r)")
        r = try await f.gorush(key: "devices-only-0123456789").post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 1, "message": "x"}]}"#)
        #expect(r.status == 403 && r.json?["code"] == 403, "\(r)")
        r = try await f.gorush().get("/api/stat/app")
        #expect(r.status == 401, "\(r)")
        r = try await f.gorush().get("/healthz")
        #expect(r.status == 200, "\(r)")
        r = try await f.gorush(key: TestDaemon.sendOnlyKey).post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 2, "message": "x"}]}"#)
        #expect(r.status == 400 && r.json?["message"]?.stringValue?.hasPrefix("notifications[0].platform: app org.example.ios has no android route") == true, "\(r)")
        r = try await f.gorush(key: TestDaemon.sendOnlyKey).post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 1, "topic": "org.example.ios", "message": "x"}]}"#)
        #expect(r.status == 200 && r.json?["counts"] == 1, "\(r)")
        #expect(await eventually(timeout: 20) { f.received(Self.iosToken).contains { $0.topic == "org.example.ios" } })
        await f.stop()
    }

    @Test func anAPIKeyListenerOffLoopbackNeedsKeys() async throws {
        let directory = try TemporaryDirectory(prefix: "herald-gorush-refusal")
        defer { directory.remove() }
        let fcm = try FCMDaemonTests.fcmSimulator().0
        defer { fcm.stop() }
        try fcm.writeServiceAccount(to: directory.file("sa.json"), key: TestKeys.rsa)
        let config = """
            {"storage": {"path": "herald.db"}, "apps": {"a": {"routes": ["droid"]}},
             "transports": {"droid": {"type": "fcm", "credentialsFile": "sa.json", "endpoint": "\(fcm.baseURL)"}},
             "api": {"listen": "127.0.0.1:0"}, "gorush": {"listen": "0.0.0.0:0", "app": "a"}}
            """
        let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: directory.path, registry: GorushFixture.registry, environment: [:])
        let daemon = Daemon(configuration: configuration, registry: GorushFixture.registry, storage: .embedded, logSink: RecordingLogHandler(),
                            options: Daemon.Options(environment: [:], frontEnds: [GorushGateway.self]))
        do {
            _ = try await daemon.start()
            Issue.record("the daemon started with an open gorush listener on 0.0.0.0")
            await daemon.shutdown()
        } catch {
            #expect(error.message.contains("gorush.auth") && error.message.contains("api.keys"), "\(error)")
        }
    }

    @Test(.timeLimit(.minutes(2))) func aRetriedNotifIDIsNotSentTwice() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        let token = GorushFixture.androidToken("rty")
        let body = #"{"notifications": [{"tokens": ["\#(token)"], "platform": 2, "message": "once", "notif_id": "order-\#(token)"}]}"#
        for _ in 0..<2 {
            let r = try await f.gorush().post("/api/push", body)
            #expect(r.status == 200 && r.json?["counts"] == 1, "\(r)")
        }
        #expect(await eventually(timeout: 20) { f.sent(token).count == 1 })
        // The second request was answered from the idempotency key: one notification, one delivery.
        let metrics = try await f.test.client.get("/metrics")
        #expect(metrics.text.contains(#"herald_notifications_accepted_total{app="com.example.app"} 1"#),
                "\(metrics.text.split(separator: "\n").filter { $0.contains("accepted") })")
        #expect(f.sent(token).count == 1)
        await f.stop()
    }
    @Test(.timeLimit(.minutes(2))) func a503PartWaySaysWhatWasStoredAndThatIsSent() async throws {
        // APNs holds each request 3 s, so the first notification's delivery is still in flight
        // (the route's backlog at its bound of 1) when the second is accepted.
        var faults = HTTP2Faults()
        faults.latency = 3
        let f = try await GorushFixture.start(server: #", "transports": {"apns": {"maxQueued": 1}}"#, faults: faults)
        defer { f.apns.stop() }
        let second = "22bb01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"
        let r = try await f.gorush().post("/api/push", """
            {"notifications": [{"tokens": ["\(Self.iosToken)"], "platform": 1, "message": "first"},
                               {"tokens": ["\(second)"], "platform": 1, "message": "second"}]}
            """)
        #expect(r.status == 503 && r.json?["code"] == 503 && r.headers["retry-after"] != nil, "\(r)")
        let message = r.json?["message"]?.stringValue ?? ""
        #expect(message.hasPrefix("notifications[1]: transport apns has 1 deliveries waiting (bound 1)"), "\(message)")
        #expect(message.hasSuffix("(notifications[0…0] were stored and are sent; send only the others again)"), "\(message)")
        #expect(await eventually(timeout: 20) { f.received(Self.iosToken).count == 1 })
        let stat = try await f.gorush().get("/api/stat/app").json
        #expect(stat?["success_tasks"] == 1 && stat?["failure_tasks"] == 1 && stat?["total_count"] == 1, "\(String(describing: stat))")
        #expect(f.received(second).isEmpty)
        await f.stop()
    }

    @Test(.timeLimit(.minutes(2))) func aReloadAppliesTheAppAndAuthButNotTheListenAddress() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        func next(_ gorush: String) throws -> DaemonConfiguration {
            try DaemonConfiguration.parse(Data(GorushFixture.config(f.apns, fcm: f.fcm, credentials: f.test.directory.file("sa.json"), gorush: gorush).utf8), baseDirectory: f.test.directory.path,
                                          registry: GorushFixture.registry, environment: [:])
        }
        var outcome = await f.test.daemon.reload(try next(#"{"listen": "127.0.0.1:8088", "app": "com.example.app"}"#))
        guard case .refused(let reasons) = outcome else { Issue.record("a new gorush.listen was applied: \(outcome)"); return }
        #expect(reasons.contains { $0.hasPrefix("gorush.listen changed (127.0.0.1:0 → 127.0.0.1:8088)") }, "\(reasons)")
        outcome = await f.test.daemon.reload(try next(#"{"listen": "127.0.0.1:0", "app": "org.example.ios", "auth": "apiKey"}"#))
        #expect(outcome == .applied(added: [], changed: [], removed: []), "\(outcome)")
        var r = try await f.gorush().post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 1, "message": "x"}]}"#)
        #expect(r.status == 401, "\(r)")
        r = try await f.gorush(key: TestDaemon.sendOnlyKey).post("/api/push", #"{"notifications": [{"tokens": ["\#(Self.iosToken)"], "platform": 1, "message": "x"}]}"#)
        #expect(r.status == 200, "\(r)")
        #expect(await eventually(timeout: 20) { f.received(Self.iosToken).contains { $0.topic == "org.example.ios" } })
        await f.stop()
    }
}
