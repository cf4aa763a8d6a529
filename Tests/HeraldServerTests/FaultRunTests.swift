import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// The short version of `make soak`: the built `herald serve` pushes a few thousand deliveries
/// through the apns-http2 transport to the HTTP/2 simulator answering 500, 503 and 429, sending
/// GOAWAYs and adding latency, with a SIGHUP reload half-way; every delivery is answered 200
/// exactly once and ends `delivered`.
@Suite(.serialized) struct FaultRunTests {
    static let key = "fault-run-key-0123456789"
    static let users = 40, devicesPerUser = 3, notifications = 2000
    static let errors500 = 100, errors503 = 100, throttled = 100, goAwayAfter = 500

    /// The daemon's configuration; `maxBackoff` is what the reload changes. The transport
    /// deadline (30 s) stays far above the simulator's latency, so no batch is given up on.
    static func config(endpoint: String, certificates c: TestCertificates, maxBackoff: String) -> String {
        """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"com.example.app": {"routes": ["apns"]}},
          "transports": {
            "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(endpoint)", "caFile": "\(c.caFile)",
                     "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)", "connections": 2}
          },
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
          "delivery": {"maxAttempts": 20, "initialBackoff": "20ms", "maxBackoff": "\(maxBackoff)", "batchSize": 200},
          "server": {"transportDeadline": "30s", "batchLinger": 0},
          "log": {"level": "notice"}
        }
        """
    }

    @Test(.timeLimit(.minutes(2))) func everyDeliveryIsAnswered200ExactlyOnceThroughFaultsAndAReload() async throws {
        var faults = HTTP2Faults()
        faults.internalServerErrors = Self.errors500
        faults.serviceUnavailable = Self.errors503
        faults.throttledRequests = Self.throttled
        faults.goAwayAfterStreams = Self.goAwayAfter
        faults.latency = 0.01
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fault-run")
        defer { dir.remove() }
        let path = try dir.write("config.json", Self.config(endpoint: apns.baseURL, certificates: apns.certificates, maxBackoff: "200ms"))
        let child = try ChildProcess.herald(["serve", "--config", path], environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        defer { child.terminate() }
        guard let port = await child.listeningPort(timeout: 60) else {
            Issue.record("herald serve did not start: \(child.stderr)")
            return
        }
        let client = HTTPTestClient(port: port, key: Self.key)
        for u in 0..<Self.users {
            for k in 0..<Self.devicesPerUser {
                let token = TestDaemon.token(u * 16 + k + 1)
                let r = try await client.post("/v1/devices", #"{"app":"com.example.app","user":"u\#(u)","token":"\#(token)"}"#)
                #expect(r.status == 201)
            }
        }

        // Four senders; the reload lands when half of the notifications are accepted.
        let accepted = Locked<[String]>([])
        let reloaded = Locked(false)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<4 {
                group.addTask {
                    for n in stride(from: lane, to: Self.notifications, by: 4) {
                        let r = try await client.post("/v1/notifications", #"{"app":"com.example.app","users":["u\#(n % Self.users)"],"alert":"n\#(n)"}"#)
                        #expect(r.status == 202, "\(r.text)")
                        if let id = r.json?["id"]?.stringValue { accepted.withLock { $0.append(id) } }
                        let reload: Bool = accepted.withLock { $0.count } >= Self.notifications / 2 && reloaded.withLock { r in
                            defer { r = true }
                            return !r
                        }
                        if reload {
                            _ = try dir.write("config.json", Self.config(endpoint: apns.baseURL, certificates: apns.certificates, maxBackoff: "300ms"))
                            child.signal(SIGHUP)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let ids = accepted.withLock { $0 }
        #expect(ids.count == Self.notifications)
        #expect(await eventually(timeout: 30) { child.stderr.contains("msg=\"configuration reloaded\"") }, "\(child.stderr)")
        let expected = ids.count * Self.devicesPerUser

        // Drained: the queue is empty and nothing is with the transport.
        let drained = await eventually(timeout: 60) {
            let m = (try? await client.get("/metrics").text) ?? ""
            return m.contains(#"herald_queue_depth{transport="apns"} 0"#) && m.contains(#"herald_deliveries_in_flight{transport="apns"} 0"#)
        }
        #expect(drained, "the queue did not drain: \(apns.simulator.counters.summary)")

        // The simulator answered 200 once per delivery: as many records as deliveries, no apns-id twice.
        let received = apns.simulator.received
        var answers: [String: Int] = [:]
        for r in received { answers[r.apnsID, default: 0] += 1 }
        #expect(received.count == expected, "\(apns.simulator.counters.summary)")
        #expect(answers.filter { $0.value > 1 }.isEmpty, "answered 200 twice: \(answers.filter { $0.value > 1 }.prefix(5))")

        // Every delivery the API knows ended delivered, with an apns-id the simulator accepted.
        var states: [String: Int] = [:]
        var known = Set<String>()
        for id in ids {
            let status = try await client.get("/v1/notifications/\(id)")
            for d in status.json?["deliveries"]?.arrayValue ?? [] {
                states[d["state"]?.stringValue ?? "?", default: 0] += 1
                if let apnsID = d["apns_id"]?.stringValue { known.insert(apnsID) }
            }
        }
        #expect(states == ["delivered": expected], "\(states)")
        #expect(known == Set(answers.keys))

        // The faults did happen.
        let counters = apns.simulator.counters
        #expect(counters.rejected["InternalServerError"] == Self.errors500, "\(counters.summary)")
        #expect(counters.rejected["ServiceUnavailable"] == Self.errors503, "\(counters.summary)")
        #expect(counters.rejected["TooManyRequests"] == Self.throttled, "\(counters.summary)")
        #expect(counters.goAways >= 1, "\(counters.summary)")

        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
    }
}
