import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldCrypto
import HeraldFCM
import HeraldGorush
import HeraldLocalTransport
import HeraldMatrix
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import HeraldWebPush
import Testing

/// One app with iOS, Android, web and local routes, against the three simulators, and a user
/// with one device of each platform: every content shape, through every front end and under
/// every foreground policy, ends each device in the state its own platform gives it.
struct CrossPlatformFixture {
    static let app = "com.example.app"
    static let iosToken = "11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"
    static let androidToken = FCMDaemonTests.androidToken(7)
    static let iosAppID = "im.vector.app.ios.prod"
    static let androidAppID = "im.vector.app.android"
    static let webAppID = "im.vector.app.web"

    let apns: HTTP2SimulatorHarness
    let fcm: FCMSimulator
    let webpush: WebPushSimulator
    let test: TestDaemon
    let gorushPort: Int
    let matrixPort: Int
    /// The stored tokens of alice's devices, by platform.
    var devices: [String: String] = [:]

    var client: HTTPTestClient { test.client }

    static func start(policy: String) async throws -> CrossPlatformFixture {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        let certs = apns.certificates
        let fcm = try FCMSimulator(configuration: FCMSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)))
        let webpush = try WebPushSimulator(configuration: WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate,
                                                                                                  keyFile: certs.serverKey), seed: "cross"))
        do {
            try fcm.start()
            try webpush.start()
            let directory = try TemporaryDirectory(prefix: "herald-cross")
            try fcm.writeServiceAccount(to: directory.file("sa.json"), key: TestKeys.rsa)
            let vapid = Base64URL.encode(try P256PrivateKey.generate().rawRepresentation)
            let config = """
                {
                  "storage": {"path": "herald.db", "synchronous": "normal"},
                  "apps": {"\(app)": {"routes": ["apns", "android", "web", "live"], "foreground": "\(policy)", "presenceGrace": 0,
                                      "clientSecret": "cross-secret-0123456789abcdef-0123456789"}},
                  "transports": {
                    "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                             "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"},
                    "android": {"type": "fcm", "credentialsFile": "\(directory.file("sa.json"))", "endpoint": "\(fcm.baseURL)", "caFile": "\(certs.caFile)"},
                    "web": {"type": "webpush", "vapidKey": "\(vapid)", "subject": "mailto:push@example.com", "allowedEndpoints": ["127.0.0.1"],
                            "caFile": "\(certs.caFile)"},
                    "live": {"type": "local"}},
                  "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]}]},
                  "delivery": {"initialBackoff": "100ms", "maxBackoff": "200ms", "maxAttempts": 5, "jitter": 0},
                  "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
                  "log": {"level": "debug"},
                  "gorush": {"listen": "127.0.0.1:0", "app": "\(app)"},
                  "matrix": {"listen": "127.0.0.1:0",
                             "apps": {"\(iosAppID)": {"app": "\(app)"}, "\(androidAppID)": {"app": "\(app)", "platform": "android"},
                                      "\(webAppID)": {"app": "\(app)", "platform": "web"}}}
                }
                """
            var registry = TransportRegistry()
            registry.register(APNsHTTP2Transport.self)
            registry.register(FCMTransport.self)
            registry.register(WebPushTransport.self)
            registry.register(LocalTransport.self)
            registry.register(section: GorushConfiguration.self)
            registry.register(section: MatrixConfiguration.self)
            let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: directory.path, registry: registry, environment: [:])
            let logs = RecordingLogHandler()
            let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                                options: Daemon.Options(random: { 0.5 }, environment: [:], frontEnds: [GorushGateway.self, MatrixGateway.self]))
            let port = try await daemon.start()
            let test = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
            StopsDaemons.current?.withLock { $0.append(test) }
            guard let gorushPort = daemon.port(of: GorushGateway.name), let matrixPort = daemon.matrixPort else {
                throw TestSetupError("the gorush or Matrix listener did not start")
            }
            var f = CrossPlatformFixture(apns: apns, fcm: fcm, webpush: webpush, test: test, gorushPort: gorushPort, matrixPort: matrixPort)
            for (platform, body) in [("ios", #""token": "\#(iosToken)""#), ("android", #""platform": "android", "token": "\#(androidToken)""#),
                                     ("web", #""subscription": \#(webpush.subscriptionJSON(0))"#)] {
                let r = try await test.client.post("/v1/devices", #"{"app": "\#(app)", "user": "alice", \#(body)}"#)
                guard r.status == 201, let token = r.json?["token"]?.stringValue else { throw TestSetupError("registering \(platform): \(r.text)") }
                f.devices[platform] = token
            }
            return f
        } catch {
            apns.stop()
            fcm.stop()
            webpush.stop()
            throw error
        }
    }

    func stop() async {
        await test.stop()
        apns.stop()
        fcm.stop()
        webpush.stop()
    }

    /// The status of notification `id` once no delivery is waiting to be sent (queued or sent).
    func settled(_ id: String) async throws -> JSONValue {
        let deadline = Date().addingTimeInterval(15)
        var last: JSONValue? = nil
        while Date() < deadline {
            last = try await client.get("/v1/notifications/\(id)").json
            let states = last?["deliveries"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
            if !states.isEmpty, !states.contains("queued"), !states.contains("sent") { return last! }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw TestSetupError("notification \(id) did not settle: \(last?.jsonString ?? "nothing")")
    }

    /// Each of alice's devices' state in a settled status, by platform (`none` when absent).
    func states(_ status: JSONValue) -> [String: String] {
        var out: [String: String] = [:]
        for (platform, token) in devices {
            let mine = status["deliveries"]?.arrayValue?.filter { $0["token"]?.stringValue == token } ?? []
            out[platform] = mine.map { "\($0["state"]?.stringValue ?? "?")@\($0["transport"]?.stringValue ?? "-")" }.sorted().joined(separator: ",")
            if mine.isEmpty { out[platform] = "none" }
        }
        return out
    }
}

@Suite(.serialized, .stopsDaemons) struct CrossPlatformTests {
    /// A content shape and what each platform makes of it, with no stream open. `expect` gives
    /// each platform's state on its push route; `local` is what the local route does when a
    /// push route cannot take it (`nil`: the local route cannot either).
    struct Shape: Sendable {
        var name: String
        var body: String
        /// Per platform: `delivered` or `rejected` on its push route.
        var push: [String: String]
        /// Whether the local route (the inbox) takes the content.
        var localTakes: Bool
    }

    static let big = String(repeating: "x", count: 4000)
    static let shapes: [Shape] = [
        Shape(name: "alert", body: #""title": "Hi", "body": "there""#,
              push: ["ios": "delivered", "android": "delivered", "web": "delivered"], localTakes: true),
        Shape(name: "data only", body: #""data": {"k": "v"}"#,
              push: ["ios": "delivered", "android": "delivered", "web": "delivered"], localTakes: true),
        Shape(name: "background", body: #""content_available": true"#,
              push: ["ios": "delivered", "android": "delivered", "web": "rejected"], localTakes: true),
        Shape(name: "fcm-only block", body: #""fcm": {"notification": {"title": "only Android"}}"#,
              push: ["ios": "rejected", "android": "delivered", "web": "rejected"], localTakes: false),
        Shape(name: "apns-only block", body: #""apns": {"content_available": true}"#,
              push: ["ios": "delivered", "android": "rejected", "web": "rejected"], localTakes: false),
        // 4,000 bytes of text: inside APNs' 4096 and FCM's 4096, past Web Push's 3993 of plaintext.
        Shape(name: "too large for Web Push", body: #""body": "\#(big)""#,
              push: ["ios": "delivered", "android": "delivered", "web": "rejected"], localTakes: true),
        // 3,200 bytes of data: FCM carries data values as strings, so its quotes are escaped past 4096.
        Shape(name: "too large for FCM", body: #""data": {"list": [\#(Array(repeating: #""a""#, count: 800).joined(separator: ","))]}"#,
              push: ["ios": "delivered", "android": "rejected", "web": "delivered"], localTakes: true),
    ]

    /// What a device of `platform` ends in under `policy` (no stream open).
    static func expected(_ shape: Shape, platform: String, policy: String) -> String {
        let push = shape.push[platform]!
        let route = ["ios": "apns", "android": "android", "web": "web"][platform]!
        switch policy {
        case "push-only":
            return "\(push)@\(route)"
        case "local-only":
            return shape.localTakes ? "parked@live" : "rejected@live"
        default:
            // local-first and local-and-push with no stream: the push route, and the inbox when it cannot take it.
            if push == "delivered" { return "delivered@\(route)" }
            return shape.localTakes ? "parked@live" : "rejected@\(route)"
        }
    }

    static let policies = ["push-only", "local-first", "local-and-push", "local-only"]

    @Test(.timeLimit(.minutes(3)), arguments: policies)
    func everyShapeThroughTheAPIEndsEachDeviceInItsPlatformsState(policy: String) async throws {
        let f = try await CrossPlatformFixture.start(policy: policy)
        do {
            for shape in Self.shapes {
                let r = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "users": ["alice"], \#(shape.body)}"#)
                let want = Dictionary(uniqueKeysWithValues: ["ios", "android", "web"].map { ($0, Self.expected(shape, platform: $0, policy: policy)) })
                if want.values.allSatisfy({ $0.hasPrefix("rejected") }) {
                    // Nothing accepted: a 400 naming every route's reason.
                    #expect(r.status == 400, "\(shape.name): \(r.text)")
                    continue
                }
                #expect(r.status == 202, "\(shape.name): \(r.text)")
                let refused = r.json?["refused"]?.arrayValue ?? []
                #expect(refused.count == want.values.filter { $0.hasPrefix("rejected") }.count, "\(shape.name): \(r.text)")
                for entry in refused {
                    #expect(entry["state"]?.stringValue == "rejected" && entry["reason"]?.stringValue?.hasPrefix("route ") == true,
                            "\(shape.name): \(entry.jsonString)")
                }
                let id = try #require(r.json?["id"]?.stringValue)
                let got = f.states(try await f.settled(id))
                #expect(got == want, "\(policy) / \(shape.name)")
            }

            // What each platform received for data only: a background push on APNs, a data
            // message on FCM, the JSON with no title on Web Push.
            if policy != "local-only" {
                let dataOnly = f.apns.simulator.received.filter { $0.deviceToken == CrossPlatformFixture.iosToken
                    && $0.payloadJSON?["k"]?.stringValue == "v" }
                #expect(dataOnly.count == 1)
                #expect(dataOnly.first?.pushType == .background && dataOnly.first?.priority == 5, "\(String(describing: dataOnly.first?.headers))")
                #expect(dataOnly.first?.payloadJSON?["aps"]?["content-available"]?.intValue == 1, "\(dataOnly.first?.payloadString ?? "")")
                let fcmData = f.fcm.received.filter { $0.data["k"] == "v" }
                #expect(fcmData.count == 1 && fcmData.first?.message["notification"] == nil, "\(fcmData.map(\.message.jsonString))")
                let webData = f.webpush.rules.received.compactMap(\.json).filter { $0["data"]?["k"]?.stringValue == "v" }
                #expect(webData.count == 1 && webData.first?["title"] == nil, "\(webData.map(\.jsonString))")
            }

            // Content no platform can send, and a header-breaking collapse key: a 400 naming the field.
            var r = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "users": ["alice"]}"#)
            #expect(r.status == 400 && r.errorField == "body", "\(r.text)")
            r = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "users": ["alice"], "title": "x", "collapse_key": "a\r\nx-evil: 1"}"#)
            #expect(r.status == 400 && r.errorField == "collapse_key", "\(r.text)")
            #expect(!f.apns.simulator.received.contains { $0.header("x-evil") != nil })
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// local-first with the iPhone's app open: its stream carries what it can show, its push
    /// route what only APNs can (an `apns`-only block), and neither what only FCM can.
    @Test(.timeLimit(.minutes(2))) func aConnectedDeviceGetsItsPushRouteForWhatItsStreamCannotShow() async throws {
        let f = try await CrossPlatformFixture.start(policy: "local-first")
        do {
            let ios = try #require(f.devices["ios"])
            let now = Date()
            let token = ClientToken.sign(ClientTokenClaims(user: "alice", app: CrossPlatformFixture.app, device: ios, issuedAt: now,
                                                           expiresAt: now.addingTimeInterval(3600)),
                                         secret: Secret("cross-secret-0123456789abcdef-0123456789"))
            let stream = try await StreamClient(port: f.test.port, query: "app=\(CrossPlatformFixture.app)", token: token)
            #expect(stream.status == 200)
            #expect(await eventually(timeout: 10) { f.test.daemon.openStreams == 1 })
            func send(_ body: String) async throws -> [String: String] {
                let r = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "users": ["alice"], \#(body)}"#)
                #expect(r.status == 202, "\(r.text)")
                return f.states(try await f.settled(try #require(r.json?["id"]?.stringValue)))
            }
            #expect(try await send(#""title": "on screen""#)["ios"] == "delivered@live")
            #expect(try await stream.next()?.json?["alert"]?["title"]?.stringValue == "on screen")
            #expect(try await send(#""apns": {"content_available": true}"#)["ios"] == "delivered@apns")
            #expect(try await send(#""fcm": {"notification": {"title": "Android only"}}"#)["ios"] == "rejected@live")
            #expect(f.apns.simulator.received.count == 1, "only the apns-only block went to APNs")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// Raw tokens follow the same rule: each token's route judges its own content.
    @Test(.timeLimit(.minutes(2))) func rawTokensAreJudgedByTheirOwnRoute() async throws {
        let f = try await CrossPlatformFixture.start(policy: "push-only")
        do {
            let ios = "22bb01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7", android = FCMDaemonTests.androidToken(9)
            let r = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "tokens": ["\#(ios)", "\#(android)"], "fcm": {"notification": {"title": "x"}}}"#)
            #expect(r.status == 202 && r.json?["deliveries"]?.intValue == 2, "one per device, the refused one included: \(r.text)")
            let refused = r.json?["refused"]?.arrayValue ?? []
            #expect(refused.count == 1 && refused.first?["token"]?.stringValue == ios && refused.first?["route"]?.stringValue == "apns", "\(r.text)")
            #expect(refused.first?["reason"]?.stringValue?.contains("nothing for APNs to send") == true)
            #expect(await eventually(timeout: 10) { f.fcm.received.contains { $0.token == android } })
            // Only the APNs token: nothing can be accepted, so a 400 naming the route's reason.
            let only = try await f.client.post("/v1/notifications", #"{"app": "\#(CrossPlatformFixture.app)", "tokens": ["\#(ios)"], "fcm": {"notification": {"title": "x"}}}"#)
            #expect(only.status == 400 && only.errorField == "body" && only.text.contains("route apns (apns-http2)"), "\(only.text)")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// gorush's iOS and Android notifications and a raw token: each through its platform's route
    /// only; an Android-only or iOS-only content never refused for the other platform.
    @Test(.timeLimit(.minutes(2))) func gorushRoutesEachPlatformAsRegistrationDoes() async throws {
        let f = try await CrossPlatformFixture.start(policy: "push-only")
        do {
            let gorush = HTTPTestClient(port: f.gorushPort, key: nil)
            let r = try await gorush.post("/api/push", """
                {"notifications": [{"tokens": ["\(CrossPlatformFixture.iosToken)"], "platform": 1, "title": "Hello iOS", "message": "hi"},
                                   {"tokens": ["\(CrossPlatformFixture.androidToken)"], "platform": 2, "data": {"k": "android"}},
                                   {"tokens": ["\(CrossPlatformFixture.iosToken)"], "platform": 1, "data": {"k": "ios"}}]}
                """)
            #expect(r.status == 200, "\(r.text)")
            #expect(await eventually(timeout: 10) { f.apns.simulator.received.count == 2 && f.fcm.received.count == 1 })
            let background = f.apns.simulator.received.first { $0.payloadJSON?["k"]?.stringValue == "ios" }
            #expect(background?.pushType == .background, "\(String(describing: background?.headers))")
            #expect(f.fcm.received.first?.data["k"] == "android" && f.fcm.received.first?.message["notification"] == nil)
            // A collapse id that would add a header: refused naming the field, nothing sent.
            let bad = try await gorush.post("/api/push", #"{"notifications": [{"tokens": ["\#(CrossPlatformFixture.iosToken)"], "platform": 1, "message": "x", "collapse_id": "a\r\nx-evil: 1"}]}"#)
            #expect(bad.status == 400 && bad.text.contains("notifications[0]") && bad.text.contains("collapse_id"), "\(bad.text)")
            #expect(!f.apns.simulator.received.contains { $0.header("x-evil") != nil })
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// The Matrix gateway: an iOS pushkey under an app_id mapped with no platform to this
    /// multi-platform app, an Android pushkey under the same app_id (it takes the first route that
    /// takes it, as registration does), and the Android and web mappings of the shipped config.
    @Test(.timeLimit(.minutes(2))) func matrixPushkeysTakeTheRouteThatTakesThem() async throws {
        let f = try await CrossPlatformFixture.start(policy: "local-first")
        do {
            let other = FCMDaemonTests.androidToken(8)
            typealias M = MatrixGatewayFixture
            func notify(_ body: String) async throws -> HTTPTestClient.Response {
                try await HTTPTestClient(port: f.matrixPort, key: nil).post(M.notifyPath, body)
            }
            var r = try await notify(M.body(eventID: "$ios", pushkey: "11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef8",
                                            appID: CrossPlatformFixture.iosAppID))
            #expect(r.status == 200 && r.json?["rejected"]?.arrayValue == [], "\(r.text)")
            r = try await notify(M.body(eventID: "$any", pushkey: other, appID: CrossPlatformFixture.iosAppID))
            #expect(r.status == 200 && r.json?["rejected"]?.arrayValue == [], "no platform on the mapping: the FCM route takes it \(r.text)")
            r = try await notify(M.body(eventID: "$android", pushkey: CrossPlatformFixture.androidToken + "x", appID: CrossPlatformFixture.androidAppID))
            #expect(r.status == 200 && r.json?["rejected"]?.arrayValue == [], "\(r.text)")
            let sub = try JSONValue.parse(f.webpush.subscriptionJSON(1))
            let endpoint = try #require(sub["endpoint"]?.stringValue), p256dh = try #require(sub["keys"]?["p256dh"]?.stringValue)
            let auth = try #require(sub["keys"]?["auth"]?.stringValue)
            r = try await notify(M.body(eventID: "$web", pushkey: p256dh, appID: CrossPlatformFixture.webAppID,
                                        data: #"{"endpoint": "\#(endpoint)", "auth": "\#(auth)"}"#))
            #expect(r.status == 200 && r.json?["rejected"]?.arrayValue == [], "\(r.text)")
            #expect(await eventually(timeout: 10) {
                f.apns.simulator.received.contains { $0.payloadJSON?["event_id"]?.stringValue == "$ios" }
                    && f.fcm.received.contains { $0.data["event_id"] == "$any" && $0.token == other }
                    && f.fcm.received.contains { $0.data["event_id"] == "$android" }
                    && f.webpush.rules.received.contains { $0.subscription == 1 }
            }, "APNs \(f.apns.simulator.received.count), FCM \(f.fcm.received.map(\.data)), web \(f.webpush.rules.received.count)")
            let metrics = try await f.client.get("/metrics").text
            #expect(!metrics.contains(#"outcome="too_large""#) && !metrics.contains(#"outcome="refused_by_route""#), "\(metrics)")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }
}
