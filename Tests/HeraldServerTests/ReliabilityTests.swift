import Foundation
import HeraldAPNs
import HeraldCore
import HeraldServer
import HeraldSimulator
import HeraldSQLite
import HeraldTestKit
import Testing

/// Send nothing twice, lose nothing: a peer slower than the transport deadline, credentials the
/// peer refuses (and rotated on disk), and a shutdown that lands in the middle of a commit.
@Suite(.serialized, .stopsDaemons) struct ReliabilityTests {
    static let key = "reliability-key-0123456789"

    static func config(endpoint: String, certificates c: TestCertificates, keyFile: String, server: String,
                       timeout: String = "10s") -> String {
        """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"com.example.app": {"routes": ["apns"]}, "org.other.app": {"routes": ["dry"]}},
          "transports": {
            "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(endpoint)", "caFile": "\(c.caFile)",
                     "keyFile": "\(keyFile)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)", "timeout": "\(timeout)"},
            "dry": {"type": "log", "path": "dry.jsonl"}
          },
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
          "delivery": {"initialBackoff": "100ms", "jitter": 0},
          "server": {\(server)},
          "log": {"level": "info"}
        }
        """
    }

    /// The states of every delivery of `ids`, counted.
    static func states(_ client: HTTPTestClient, _ ids: [String]) async throws -> [String: Int] {
        var states: [String: Int] = [:]
        for id in ids {
            for d in try await client.get("/v1/notifications/\(id)").json?["deliveries"]?.arrayValue ?? [] {
                states[d["state"]?.stringValue ?? "?", default: 0] += 1
            }
        }
        return states
    }

    static func registerAndSend(_ client: HTTPTestClient, devices: Int, notifications: Int) async throws -> [String] {
        for k in 1...devices {
            let r = try await client.post("/v1/devices", #"{"app":"com.example.app","user":"alice","token":"\#(TestDaemon.token(k))"}"#)
            #expect(r.status == 201)
        }
        var ids: [String] = []
        for n in 0..<notifications {
            let r = try await client.post("/v1/notifications", #"{"app":"com.example.app","users":["alice"],"alert":"n\#(n)"}"#)
            #expect(r.status == 202, "\(r.text)")
            ids.append(r.json?["id"]?.stringValue ?? "")
        }
        return ids
    }

    /// APNs answers after 1.5 s; the transport deadline is 300 ms and the lease 1 s. The batch
    /// stays with the transport (its lease renewed) and each notification reaches APNs once.
    @Test(.timeLimit(.minutes(1))) func aPeerSlowerThanTheDeadlineGetsEachNotificationOnce() async throws {
        var faults = HTTP2Faults()
        faults.latency = 1.5
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-slow-peer")
        defer { dir.remove() }
        let server = #""transportDeadline": "300ms", "lease": "1s", "maintenanceInterval": "100ms", "batchLinger": 0"#
        let path = try dir.write("config.json", Self.config(endpoint: apns.baseURL, certificates: apns.certificates,
                                                            keyFile: apns.certificates.authKey, server: server))
        let child = try ChildProcess.herald(["serve", "--config", path], environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        defer { child.terminate() }
        guard let port = await child.listeningPort(timeout: 60) else {
            Issue.record("herald serve did not start: \(child.stderr)")
            return
        }
        let client = HTTPTestClient(port: port, key: Self.key)
        let ids = try await Self.registerAndSend(client, devices: 5, notifications: 2)
        let done = await eventually(timeout: 20) { (try? await Self.states(client, ids)) == ["delivered": 10] }
        let states = try await Self.states(client, ids)
        #expect(done, "\(states) \(apns.simulator.counters.summary)")
        var answers: [String: Int] = [:]
        for r in apns.simulator.received { answers[r.apnsID, default: 0] += 1 }
        #expect(apns.simulator.received.count == 10, "\(apns.simulator.counters.summary)")
        #expect(answers.values.allSatisfy { $0 == 1 }, "sent twice: \(answers.filter { $0.value > 1 })")
        #expect(child.stderr.contains("held a batch past server.transportDeadline"))
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    /// A key APNs refuses pauses the transport: nothing fails, other transports go on, /readyz
    /// and /metrics say why. The right key written over the same file (the config text does not
    /// change) and a SIGHUP resume it, and every delivery reaches APNs once.
    @Test(.timeLimit(.minutes(1))) func refusedCredentialsPauseTheTransportAndARotatedKeyResumesIt() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-paused")
        defer { dir.remove() }
        let keyFile = dir.file("AuthKey.p8")
        let made = try await Run.program("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                                                        "-out", keyFile])
        #expect(made.status == 0, "openssl could not make a key: \(made.stderr)")
        let server = #""probeInterval": "1h", "batchLinger": 0"#
        let path = try dir.write("config.json", Self.config(endpoint: apns.baseURL, certificates: apns.certificates,
                                                            keyFile: keyFile, server: server))
        let child = try ChildProcess.herald(["serve", "--config", path], environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        defer { child.terminate() }
        guard let port = await child.listeningPort(timeout: 60) else {
            Issue.record("herald serve did not start: \(child.stderr)")
            return
        }
        let client = HTTPTestClient(port: port, key: Self.key)
        let ids = try await Self.registerAndSend(client, devices: 3, notifications: 4)
        #expect(try await client.post("/v1/devices", #"{"app":"org.other.app","user":"bob","token":"\#(TestDaemon.token(99))"}"#).status == 201)
        let other = try await client.post("/v1/notifications", #"{"app":"org.other.app","users":["bob"],"alert":"b"}"#)
        let otherID = other.json?["id"]?.stringValue ?? ""

        #expect(await eventually(timeout: 20) {
            (try? await client.get("/readyz").json?["transports"]?["apns"]?.stringValue)?.hasPrefix("paused: InvalidProviderToken") == true
        }, "\(child.stderr)")
        let ready = try await client.get("/readyz")
        #expect(ready.status == 200)
        #expect(ready.json?["status"] == "degraded")
        let metrics = try await client.get("/metrics").text
        #expect(metrics.contains(#"herald_transport_paused{transport="apns",reason="InvalidProviderToken"} 1"#))
        #expect(!metrics.contains(#"outcome="failed""#))
        #expect(child.stderr.contains("transport paused"))
        // Nothing failed: every delivery waits in the queue; the other app's transport delivered.
        // (batches already with the transport when it paused come back as they are answered)
        #expect(await eventually { (try? await Self.states(client, ids)) == ["queued": 12] })
        #expect(await eventually { (try? await Self.states(client, [otherID])) == ["delivered": 1] })
        #expect(apns.simulator.received.isEmpty)

        // The right key over the same file, then SIGHUP.
        try FileManager.default.removeItem(atPath: keyFile)
        try FileManager.default.copyItem(atPath: apns.certificates.authKey, toPath: keyFile)
        child.signal(SIGHUP)
        let resumed = await eventually(timeout: 20) { (try? await Self.states(client, ids)) == ["delivered": 12] }
        let states = try await Self.states(client, ids)
        #expect(resumed, "\(states) \(child.stderr)")
        var answers: [String: Int] = [:]
        for r in apns.simulator.received { answers[r.apnsID, default: 0] += 1 }
        #expect(apns.simulator.received.count == 12)
        #expect(answers.values.allSatisfy { $0 == 1 })
        // The refused attempts did not count.
        let first = try await client.get("/v1/notifications/\(ids[0])").json?["deliveries"]?.arrayValue ?? []
        #expect(first.allSatisfy { $0["attempts"] == 1 }, "\(first)")
        #expect(try await client.get("/readyz").json?["status"] == "ready")
        #expect(try await client.get("/metrics").text.contains(#"herald_transport_paused{transport="apns",reason="InvalidProviderToken"} 0"#))
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    /// A notification whose commit is under way when the shutdown deadline passes is answered
    /// 202 once committed, not 503 (a client retrying a 503 would create a duplicate).
    @Test(.timeLimit(.minutes(1))) func aCommitThatOutlastsTheShutdownDeadlineIsAnswered202() async throws {
        let config = """
        {
          "storage": {"path": "herald.db", "synchronous": "normal", "busyTimeout": "20s"},
          "apps": {"\(TestDaemon.app)": {"routes": ["t"]}},
          "transports": {"t": {"type": "test"}},
          "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}],
                  "listen": "127.0.0.1:0"},
          "server": {"shutdownDeadline": "200ms", "batchLinger": 0, "maintenanceInterval": "1h"}
        }
        """
        let d = try await TestDaemon.start(config: config)
        let holder = try SQLiteDatabase(path: d.database, synchronous: "NORMAL", busyTimeout: 5)
        try holder.execute("BEGIN IMMEDIATE", operation: "hold the write lock")
        let post = Task { try await d.client.post("/v1/notifications", #"{"app":"\#(TestDaemon.app)","tokens":["\#(TestDaemon.token(1))"],"alert":"x"}"#) }
        // The request is with its handler, whose commit waits for the lock (the fan-out before it
        // reads the store, which the lock does not block, in microseconds).
        #expect(await eventually { (try? await d.client.get("/metrics").text)?.contains("herald_http_requests_in_flight 1") == true })
        try await Task.sleep(nanoseconds: 300_000_000)
        let stopping = Task { await d.daemon.shutdown() }
        // Well past the shutdown deadline, then let the commit through.
        try await Task.sleep(nanoseconds: 800_000_000)
        try holder.execute("COMMIT", operation: "release the write lock")
        let response = try await post.value
        await stopping.value
        #expect(response.status == 202, "\(response.text)")
        let id = response.json?["id"]?.stringValue ?? "?"
        let stored = try holder.withStatement("SELECT count(*) FROM notifications WHERE id = ?") { s in
            s.bind(1, id)
            _ = try s.step()
            return s.int64(0)
        }
        #expect(stored == 1)
    }
}
