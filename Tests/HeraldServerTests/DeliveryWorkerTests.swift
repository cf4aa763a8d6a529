import Foundation
import HeraldAPNs
import HeraldCore
import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// Workers driven by a test clock: retries, invalidation, expiry, deadlines, recovery.
@Suite(.serialized, .stopsDaemons) struct DeliveryWorkerTests {
    func send(_ d: TestDaemon, _ body: String) async throws -> String {
        let r = try await d.client.post("/v1/notifications", body)
        #expect(r.status == 202, "\(r)")
        return r.json?["id"]?.stringValue ?? ""
    }

    func delivery(_ d: TestDaemon, _ id: String) async throws -> JSONValue? {
        try await d.client.get("/v1/notifications/\(id)").json?["deliveries"]?.arrayValue?.first
    }

    @Test func temporaryFailuresAreRetriedOnTheClock() async throws {
        let clock = TestClock()
        let transport = ScriptedTransport(name: "t", clock: clock) { d in
            d.attempt < 3 ? .retry(after: nil, reason: "ServiceUnavailable") : .delivered(receipt: nil)
        }
        let d = try await TestDaemon.start(clock: clock, transports: { _ in transport })
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let id = try await send(d, #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)

        #expect(await eventually { transport.attempts.count == 1 })
        #expect(await eventually { (try? await delivery(d, id)?["state"]) == "queued" })
        #expect(try await delivery(d, id)?["reason"] == "ServiceUnavailable")
        #expect(try await delivery(d, id)?["next_attempt_at"] != nil)
        // Backoff 1 s (jitter 0): nothing happens until the clock passes it.
        clock.advance(by: 0.5)
        try await Task.sleep(nanoseconds: 50_000_000)
        #expect(transport.attempts.count == 1)
        clock.advance(by: 0.6)
        #expect(await eventually { transport.attempts.count == 2 })
        // The second failure is recorded (its retry time read from the clock) before time moves on.
        #expect(await eventually {
            let row = try? await delivery(d, id)
            return row?["attempts"] == 2 && row?["state"] == "queued"
        })
        clock.advance(by: 2.1)
        #expect(await eventually { (try? await delivery(d, id)?["state"]) == "delivered" })
        #expect(try await delivery(d, id)?["attempts"] == 3)
        let metrics = try await d.client.get("/metrics").text
        #expect(metrics.contains(#"herald_retries_total{transport="t"} 2"#))
        #expect(metrics.contains(#"herald_deliveries_total{transport="t",outcome="delivered",reason=""} 1"#))
        // Every attempt used the same apns-id.
        #expect(Set(transport.attempts.map(\.delivery.messageID)).count == 1)
    }

    @Test func deadTokensAreInvalidatedWithTheTimestampRule() async throws {
        let clock = TestClock()
        let since = clock.now.addingTimeInterval(-60)
        let transport = ScriptedTransport(name: "t", clock: clock) { _ in .tokenInvalid(since: since, reason: "Unregistered") }
        let d = try await TestDaemon.start(clock: clock, transports: { _ in transport })
        // Registered (at the clock's now) after Apple's timestamp: the store keeps the device.
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let id = try await send(d, #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)
        #expect(await eventually { (try? await delivery(d, id)?["state"]) == "invalid_token" })
        #expect(try await delivery(d, id)?["reason"] == "Unregistered")
        let metrics = try await d.client.get("/metrics").text
        #expect(metrics.contains(#"herald_token_invalidations_total{app="com.example.app",result="keptReRegistered"} 1"#))
        let devices = try await d.client.get("/v1/users/alice/devices?app=com.example.app").json?["devices"]?.arrayValue
        #expect(devices?.first?["invalidated_at"] == .null)
    }

    @Test func invalidatedTokenIsMarkedInTheStore() async throws {
        let transport = ScriptedTransport(name: "t", clock: SystemClock()) { _ in .tokenInvalid(since: nil, reason: "BadDeviceToken") }
        let d = try await TestDaemon.start(transports: { _ in transport })
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let id = try await send(d, #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)
        #expect(await eventually { (try? await delivery(d, id)?["state"]) == "invalid_token" })
        let devices = try await d.client.get("/v1/users/alice/devices?app=com.example.app").json?["devices"]?.arrayValue
        #expect(devices?.first?["invalidation_reason"] == "BadDeviceToken")
        #expect(devices?.first?["invalidated_at"] != .null)
        // The next notification skips the dead device.
        let next = try await d.client.post("/v1/notifications", #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)
        #expect(next.json?["deliveries"] == 0)
    }

    @Test func expiredNotificationsAreMarkedExpiredNotSent() async throws {
        let clock = TestClock()
        let transport = ScriptedTransport(name: "t", clock: clock) { _ in .retry(after: 30, reason: "TooManyRequests") }
        let d = try await TestDaemon.start(clock: clock, transports: { _ in transport })
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let expiration = Int(clock.now.timeIntervalSince1970) + 10
        let id = try await send(d, #"{"app":"com.example.app","users":["alice"],"alert":"x","apns":{"expiration":\#(expiration)}}"#)
        // The retry (30 s asked) would come after the expiration: expired at once.
        #expect(await eventually { (try? await delivery(d, id)?["state"]) == "expired" })
        #expect(transport.attempts.count == 1)

        // Already expired when claimed: never sent.
        let past = Int(clock.now.timeIntervalSince1970) - 1
        let id2 = try await send(d, #"{"app":"com.example.app","users":["alice"],"alert":"y","apns":{"expiration":\#(past)}}"#)
        #expect(await eventually { (try? await delivery(d, id2)?["state"]) == "expired" })
        #expect(try await delivery(d, id2)?["reason"] == "expired before sending")
        #expect(transport.attempts.count == 1)
    }

    @Test func aSlowBatchStaysClaimedPastItsDeadlineAndIsSentOnce() async throws {
        let clock = TestClock()
        let stuck = GatedTransport(name: "slow")
        let fine = ScriptedTransport(name: "fast", clock: clock)
        let config = TestDaemon.configJSON(server: #""transportDeadline": "5s", "lease": "60s""#,
                                           transports: #"{"slow": {"type": "test"}, "fast": {"type": "test"}}"#,
                                           routes: #"["slow", "fast"]"#)
        let d = try await TestDaemon.start(config: config, clock: clock, transports: { $0 == "slow" ? stuck as any Transport : fine })
        try await d.client.post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))","transport":"slow"}"#)
        try await d.client.post("/v1/devices", #"{"app":"com.example.app","user":"b","token":"\#(TestDaemon.token(2))","transport":"fast"}"#)
        let slowID = try await send(d, #"{"app":"com.example.app","users":["a"],"alert":"x"}"#)
        let fastID = try await send(d, #"{"app":"com.example.app","users":["b"],"alert":"x"}"#)
        // The other transport goes on.
        #expect(await eventually { (try? await delivery(d, fastID)?["state"]) == "delivered" })
        #expect(await eventually { stuck.deliveries.count == 1 })
        #expect(try await delivery(d, slowID)?["state"] == "sent")
        // Past the deadline the batch is reported slow and its lease renewed, not queued again.
        clock.advance(by: 5.1)
        #expect(await eventually { d.logs.text.contains("held a batch past server.transportDeadline") })
        let metrics = try await d.client.get("/metrics").text
        #expect(metrics.contains(#"herald_transport_slow_batches_total{transport="slow"} 1"#))
        // Past the claim's lease (60 s from the claim) but within the renewed one (60 s from the
        // deadline), housekeeping leaves it alone.
        clock.advance(by: 55)
        await d.daemon.maintenanceOnce()
        #expect(try await delivery(d, slowID)?["state"] == "sent")
        // The late answer is recorded, and the transport saw the delivery once.
        stuck.open()
        #expect(await eventually { (try? await delivery(d, slowID)?["state"]) == "delivered" })
        #expect(stuck.deliveries.count == 1)
        #expect(try await delivery(d, slowID)?["attempts"] == 1)
    }

    @Test func aPausedTransportProbesOneDeliveryOnItsIntervalAndResumes() async throws {
        let clock = TestClock()
        let fixed = Locked(false)
        let transport = ScriptedTransport(name: "t", clock: clock) { d in
            fixed.withLock { $0 } ? .delivered(receipt: nil) : .setupFailure(reason: "InvalidProviderToken: check keyId")
        }
        let config = TestDaemon.configJSON(server: #""probeInterval": "60s""#)
        let d = try await TestDaemon.start(config: config, clock: clock, transports: { _ in transport })
        for n in 1...3 { try await d.register(user: "u\(n)", token: TestDaemon.token(n)) }
        let id = try await send(d, #"{"app":"com.example.app","users":["u1","u2","u3"],"alert":"x"}"#)
        #expect(await eventually { (try? await d.client.get("/readyz").json?["transports"]?["t"]?.stringValue) == "paused: InvalidProviderToken: check keyId" })
        let states = try await d.client.get("/v1/notifications/\(id)").json?["deliveries"]?.arrayValue ?? []
        #expect(states.allSatisfy { $0["state"] == "queued" && $0["attempts"] == 0 }, "\(states)")
        let sent = transport.attempts.count
        // Nothing more goes out until the probe is due; then exactly one delivery.
        clock.advance(by: 30)
        try await Task.sleep(nanoseconds: 50_000_000)
        #expect(transport.attempts.count == sent)
        clock.advance(by: 31)
        #expect(await eventually { transport.attempts.count == sent + 1 })
        #expect(try await d.client.get("/readyz").json?["status"] == "degraded")
        // Fixed on the peer's side: the next probe succeeds and the rest follows at once. The next
        // probe is due 60 s after the failed one is recorded, which may come just after the
        // transport counted it: move the clock on until that probe has run.
        fixed.withLock { $0 = true }
        var final: JSONValue = .null
        for _ in 0..<10 {
            clock.advance(by: 61)
            final = try await d.waitUntilFinal(id, timeout: 1)
            if final["summary"]?["delivered"] == 3 { break }
        }
        #expect(final["summary"]?["delivered"] == 3)
        #expect(try await d.client.get("/readyz").json?["transports"]?["t"] == "started")
        #expect(transport.attempts.count == sent + 1 + 3)
    }

    @Test func aBrokenAppDoesNotHoldUpAnotherOnTheSameTransport() async throws {
        // Everything for com.example.app fails (say its topic was revoked); org.other.app is fine.
        let clock = TestClock()
        let transport = ScriptedTransport(name: "t", clock: clock) { d in
            d.app == TestDaemon.app ? .retry(after: nil, reason: "ServiceUnavailable") : .delivered(receipt: nil)
        }
        let d = try await TestDaemon.start(clock: clock, transports: { _ in transport })
        for n in 1...20 { try await d.register(user: "u\(n)", token: TestDaemon.token(n)) }
        try await d.register(user: "other", token: TestDaemon.token(99), app: "org.other.app")
        let users = (1...20).map { "\"u\($0)\"" }.joined(separator: ",")
        var broken: [String] = []
        for _ in 0..<10 { broken.append(try await send(d, #"{"app":"com.example.app","users":[\#(users)],"alert":"x"}"#)) }
        let healthy = try await send(d, #"{"app":"org.other.app","users":["other"],"alert":"x"}"#)

        // The healthy app's notification is delivered on the first pass, without the clock moving.
        #expect(await eventually { (try? await delivery(d, healthy)?["state"]) == "delivered" })
        #expect(await eventually { transport.attempts.count == 201 })
        // Their outcomes are recorded once the transport's batches return.
        for id in broken { #expect(await eventually { (try? await delivery(d, id)?["state"]) == "queued" }) }
        #expect(transport.attempts.filter { $0.delivery.app == TestDaemon.app }.allSatisfy { $0.delivery.attempt == 1 })
    }

    @Test func shutdownWithABatchStillAtTheTransportIsNotCleanAndTheDeliverySurvivesARestart() async throws {
        let gate = GatedTransport(name: "t")
        let directory = try TemporaryDirectory(prefix: "herald-restart")
        defer { directory.remove() }
        let first = try await TestDaemon.start(config: TestDaemon.configJSON(server: #""shutdownDeadline": "200ms""#),
                                               transports: { _ in gate }, directory: directory)
        try await first.register(user: "alice", token: TestDaemon.token(1))
        let id = try await send(first, #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)
        #expect(await eventually { gate.deliveries.count == 1 })
        let clean = await first.daemon.shutdown()
        #expect(!clean)  // the batch was still with the transport
        await #expect(throws: (any Error).self) { try await first.client.get("/healthz") }

        // Restart: the interrupted delivery is sent again (the test transport keeps no ledger).
        let again = ScriptedTransport(name: "t", clock: SystemClock())
        let second = try await TestDaemon.start(config: TestDaemon.configJSON(), transports: { _ in again }, directory: directory)
        #expect(await eventually { (try? await delivery(second, id)?["state"]) == "delivered" })
        #expect(again.attempts.first?.delivery.attempt == 2)
        #expect(second.logs.text.contains("settled deliveries interrupted by a restart"))
        gate.open()
    }

    @Test func aLedgerConfirmsInterruptedDeliveriesInsteadOfResending() async throws {
        let gate = GatedTransport(name: "t")
        let directory = try TemporaryDirectory(prefix: "herald-ledger")
        defer { directory.remove() }
        let first = try await TestDaemon.start(config: TestDaemon.configJSON(server: #""shutdownDeadline": "100ms""#),
                                               transports: { _ in gate }, directory: directory)
        try await first.register(user: "alice", token: TestDaemon.token(1))
        try await first.register(user: "alice", token: TestDaemon.token(2))
        let id = try await send(first, #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#)
        #expect(await eventually { gate.deliveries.count == 2 })
        await first.daemon.shutdown()

        // The transport "wrote" the first of the two before the crash; its ledger says so.
        let written = gate.deliveries.first { $0.token == TestDaemon.token(1) }!.messageID.uuidString.lowercased()
        let ledger = LedgerTransport(name: "t", accepted: [written])
        let second = try await TestDaemon.start(config: TestDaemon.configJSON(), transports: { _ in ledger }, directory: directory)
        let final = try await second.waitUntilFinal(id)
        #expect(final["summary"]?["delivered"] == 2)
        #expect(ledger.sent.map(\.token) == [TestDaemon.token(2)])
        #expect(ledger.asked.count == 2)
        #expect(second.logs.text.contains("confirmed=1"))
        gate.open()
    }

    @Test func oneDaemonPerDatabase() async throws {
        let d = try await TestDaemon.start()
        let other = Daemon(configuration: try TestDaemon.parse(TestDaemon.configJSON(), directory: d.directory),
                           registry: TestDaemon.registry, storage: .embedded, logSink: RecordingLogHandler())
        await #expect(throws: DaemonError.self) { try await other.start() }
    }
}
