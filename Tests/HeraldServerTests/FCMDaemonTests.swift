import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald serve` and `herald send` with an fcm route against `herald simulate fcm` in-process
/// (real TLS, HTTP/2 and OAuth), beside an apns-http2 route against the APNs simulator.
@Suite(.serialized) struct FCMDaemonTests {
    static let key = "fcm-daemon-key-0123456789"
    static let app = "com.example.app"

    /// A registration token of realistic shape.
    static func androidToken(_ n: Int) -> String {
        let head = "a\(n)b:APA91b"
        return head + String(String(repeating: "Rk7_-Zq", count: 24).prefix(152 - head.count))
    }

    static func fcmSimulator(_ configure: (inout FCMSimulator.Configuration) -> Void = { _ in }) throws -> (FCMSimulator, TestCertificates) {
        let certs = try TestCertificates.shared()
        var c = FCMSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey))
        configure(&c)
        let sim = try FCMSimulator(configuration: c)
        try sim.start()
        return (sim, certs)
    }

    static func config(fcm: FCMSimulator, credentials: String, certificates c: TestCertificates, apns: String? = nil,
                       fcmExtra: String = "") -> String {
        let apnsRoute = apns.map { #""apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\#($0)", "caFile": "\#(c.caFile)", "keyFile": "\#(c.authKey)", "keyId": "\#(c.authKeyID)", "teamId": "\#(c.teamID)"},"# } ?? ""
        return """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": [\(apns == nil ? "" : #""apns", "#)"android"]}},
          "transports": {
            \(apnsRoute)
            "android": {"type": "fcm", "credentialsFile": "\(credentials)", "endpoint": "\(fcm.baseURL)", "caFile": "\(c.caFile)", "timeout": "5s"\(fcmExtra)}
          },
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
          "delivery": {"initialBackoff": "100ms", "jitter": 0},
          "server": {"probeInterval": "1h", "batchLinger": 0},
          "log": {"level": "info"}
        }
        """
    }

    static func serve(_ dir: TemporaryDirectory, _ config: String) async throws -> (ChildProcess, HTTPTestClient) {
        let path = try dir.write("config.json", config)
        let child = try ChildProcess.herald(["serve", "--config", path], environment: ["HERALD_API_KEY": key], directory: dir.path)
        guard let port = await child.listeningPort(timeout: 60) else {
            child.terminate()
            throw TestSetupError("herald serve did not start: \(child.stderr)")
        }
        return (child, HTTPTestClient(port: port, key: key))
    }

    static func states(_ client: HTTPTestClient, _ ids: [String]) async throws -> [String: Int] {
        var states: [String: Int] = [:]
        for id in ids {
            for d in try await client.get("/v1/notifications/\(id)").json?["deliveries"]?.arrayValue ?? [] {
                states[d["state"]?.stringValue ?? "?", default: 0] += 1
            }
        }
        return states
    }

    @Test(.timeLimit(.minutes(2))) func anAppWithIOSAndAndroidDevicesGetsOneNotificationToEachThroughItsTwoRoutes() async throws {
        let (fcm, certs) = try Self.fcmSimulator()
        defer { fcm.stop() }
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fcm-two")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        let (child, client) = try await Self.serve(dir, Self.config(fcm: fcm, credentials: dir.file("sa.json"), certificates: certs, apns: apns.baseURL))
        defer { child.terminate() }
        let ios = String(repeating: "ab", count: 32), android = Self.androidToken(1)
        var r = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(ios)","platform":"ios","environment":"sandbox"}"#)
        #expect(r.status == 201, "\(r.text)")
        r = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(android)","platform":"android"}"#)
        #expect(r.status == 201 && r.json?["transport"]?.stringValue == "android", "\(r.text)")
        r = try await client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"title":"Hi","body":"there","data":{"n":12}}"#)
        #expect(r.status == 202, "\(r.text)")
        let id = try #require(r.json?["id"]?.stringValue)
        let done = await eventually(timeout: 30) { (try? await Self.states(client, [id])) == ["delivered": 2] }
        let nowdone = try await Self.states(client, [id])
        #expect(done, "\(nowdone) \(child.stderr)")
        #expect(apns.simulator.received.count == 1)
        let m = try #require(fcm.received.first)
        #expect(fcm.received.count == 1 && m.token == android)
        #expect(m.data == ["n": "12", "herald_id": id])
        #expect(m.message["notification"] == ["title": "Hi", "body": "there"])
        let deliveries = try await client.get("/v1/notifications/\(id)").json?["deliveries"]?.arrayValue ?? []
        let receipt = deliveries.first { $0["transport"]?.stringValue == "android" }?["receipt"]?.stringValue
        #expect(receipt == m.name)
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func deadTokensRetireTheLimitIsCheckedAtAcceptTimeAndTheStatusShowsEachAnswer() async throws {
        let dead = Self.androidToken(2), bad = Self.androidToken(3), other = Self.androidToken(4)
        let (fcm, certs) = try Self.fcmSimulator { c in
            c.faults.unregisteredTokens = [dead]
            c.faults.invalidTokens = [bad]
            c.faults.senderMismatchTokens = [other]
        }
        defer { fcm.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fcm-rows")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        let (child, client) = try await Self.serve(dir, Self.config(fcm: fcm, credentials: dir.file("sa.json"), certificates: certs))
        defer { child.terminate() }
        for (user, token) in [("dead", dead), ("bad", bad), ("other", other)] {
            let r = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"\#(user)","token":"\#(token)"}"#)
            #expect(r.status == 201, "\(r.text)")
        }
        var r = try await client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["dead","bad","other"],"body":"x"}"#)
        let id = try #require(r.json?["id"]?.stringValue)
        let settled = await eventually(timeout: 30) { (try? await Self.states(client, [id])) == ["invalid_token": 2, "rejected": 1] }
        let nowsettled = try await Self.states(client, [id])
        #expect(settled, "\(nowsettled) \(child.stderr)")
        for user in ["dead", "bad"] {
            let devices = try await client.get("/v1/users/\(user)/devices?app=\(Self.app)")
            #expect(devices.json?["devices"]?.arrayValue?.first?["invalidated_at"]?.stringValue != nil, "\(devices.text)")
        }
        let kept = try await client.get("/v1/users/other/devices?app=\(Self.app)")
        #expect(kept.json?["devices"]?.arrayValue?.first?["invalidated_at"] == .null, "\(kept.text)")
        #expect(try await client.get("/metrics").text.contains(#"herald_fcm_sender_id_mismatch_total{transport="android"} 1"#))

        // The 4096-byte limit, at the byte, before anything is queued.
        let live = Self.androidToken(5)
        _ = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"live","token":"\#(live)"}"#)
        func body(_ n: Int) -> String { #"{"app":"\#(Self.app)","users":["live"],"data":{"k":"\#(String(repeating: "x", count: n))"}}"# }
        // {"data":{"herald_id":"<36>","k":"…"}} is 4096 bytes with this many x's.
        let fill = 4096 - #"{"data":{"herald_id":"","k":""}}"#.utf8.count - 36
        r = try await client.post("/v1/notifications", body(fill + 1))
        #expect(r.status == 400 && r.text.contains("android") && r.text.contains("4096"), "\(r.text)")
        r = try await client.post("/v1/notifications", body(fill))
        #expect(r.status == 202, "\(r.text)")
        let fits = try #require(r.json?["id"]?.stringValue)
        #expect(await eventually(timeout: 30) { (try? await Self.states(client, [fits])) == ["delivered": 1] })
        #expect(fcm.received.last?.bytes == 4096)
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    /// An account Google does not know: the token endpoint answers invalid_grant and the
    /// transport pauses (nothing fails). A fixed file and SIGHUP resume it: each notification once.
    @Test(.timeLimit(.minutes(2))) func invalidGrantPausesAndAFixedFileWithSIGHUPResumesWithEverythingDeliveredOnce() async throws {
        let (fcm, certs) = try Self.fcmSimulator()
        defer { fcm.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fcm-paused")
        defer { dir.remove() }
        let file = dir.file("sa.json")
        try fcm.writeServiceAccount(to: file, register: false, key: TestKeys.rsa)
        let (child, client) = try await Self.serve(dir, Self.config(fcm: fcm, credentials: file, certificates: certs))
        defer { child.terminate() }
        for k in 1...3 { _ = try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(Self.androidToken(10 + k))"}"#) }
        var ids: [String] = []
        for n in 0..<4 {
            let r = try await client.post("/v1/notifications", #"{"app":"\#(Self.app)","users":["alice"],"body":"n\#(n)"}"#)
            #expect(r.status == 202)
            ids.append(r.json?["id"]?.stringValue ?? "")
        }
        #expect(await eventually(timeout: 30) {
            (try? await client.get("/readyz").json?["transports"]?["android"]?.stringValue)?.contains("invalid_grant") == true
        }, "\(child.stderr)")
        #expect(await eventually { (try? await Self.states(client, ids)) == ["queued": 12] })
        #expect(fcm.received.isEmpty && fcm.counters.sends == 0)
        #expect(!child.stderr.contains("PRIVATE KEY"))

        try fcm.writeServiceAccount(to: file, key: TestKeys.rsa)
        child.signal(SIGHUP)
        let resumed = await eventually(timeout: 30) { (try? await Self.states(client, ids)) == ["delivered": 12] }
        let nowresumed = try await Self.states(client, ids)
        #expect(resumed, "\(nowresumed) \(child.stderr)")
        var seen: [String: Int] = [:]
        for m in fcm.received { seen["\(m.token ?? "") \(m.data["herald_id"] ?? "")", default: 0] += 1 }
        #expect(fcm.received.count == 12 && seen.values.allSatisfy { $0 == 1 }, "\(seen)")
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func heraldSendDeliversAndDryRunHasFCMValidate() async throws {
        let (fcm, certs) = try Self.fcmSimulator()
        defer { fcm.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fcm-send")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        let config = try dir.write("config.json", Self.config(fcm: fcm, credentials: dir.file("sa.json"), certificates: certs))
        let token = Self.androidToken(20)
        var r = try await Run.herald(["send", "--config", config, "--app", Self.app, "--token", token, "--title", "Hi", "--body", "there"],
                               environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(fcm.received.count == 1 && fcm.received.first?.validateOnly == false)
        r = try await Run.herald(["send", "--config", config, "--app", Self.app, "--token", token, "--body", "check", "--dry-run"],
                           environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("FCM accepts"), "\(r.stdout)")
        #expect(fcm.received.count == 2 && fcm.received.last?.validateOnly == true)
        fcm.updateFaults { $0.unregisteredTokens = [token] }
        r = try await Run.herald(["send", "--config", config, "--app", Self.app, "--token", token, "--body", "check", "--dry-run"],
                           environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        #expect(r.status == 1 && r.stdout.contains("FCM refuses") && r.stdout.contains("UNREGISTERED"), "\(r.stdout) \(r.stderr)")
    }
}
