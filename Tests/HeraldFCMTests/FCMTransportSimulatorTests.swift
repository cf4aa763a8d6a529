import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldFCM

/// The fcm transport against `herald simulate fcm` in-process (real TLS, HTTP/2, OAuth).
final class FCMTransportFixture: @unchecked Sendable {
    let simulator: FCMSimulator
    let certificates: TestCertificates
    let clock: TestClock
    let metrics = MetricsRegistry()
    let credentialsJSON: String
    private(set) var transport: FCMTransport!
    private var nextID: Int64 = 0

    init(configureSimulator: (inout FCMSimulator.Configuration) -> Void = { _ in },
         section: (inout [String: JSONValue]) -> Void = { _ in }) async throws {
        certificates = try TestCertificates.shared()
        clock = TestClock(start: Date())
        var c = FCMSimulator.Configuration(tls: .init(certificateFile: certificates.serverCertificate, keyFile: certificates.serverKey))
        c.clock = clock
        configureSimulator(&c)
        simulator = try FCMSimulator(configuration: c)
        try simulator.start()
        credentialsJSON = try simulator.makeServiceAccount(key: TestKeys.rsa).json
        var members: [String: JSONValue] = ["credentialsFile": .string(credentialsJSON), "endpoint": .string(simulator.baseURL),
                                            "caFile": .string(certificates.caFile), "timeout": 5]
        section(&members)
        let (configuration, errors, _) = readFCMConfig(.object(members))
        guard let configuration, errors.isEmpty else { throw TestSetupError("config: \(errors)") }
        transport = try FCMTransport(name: "fcm", configuration: configuration,
                                     context: TransportContext(logger: .disabled, clock: clock, metrics: metrics))
        try await transport.start()
    }

    func stop() async {
        await transport.shutdown()
        simulator.stop()
    }

    /// A delivery to `token`, rendered as the delivery engine renders it.
    func delivery(_ token: String, _ content: NotificationContent = NotificationContent(title: "Hi", body: "there")) throws -> Delivery {
        nextID += 1
        var d = Delivery(id: nextID, notificationID: "n\(nextID)", app: "com.example.app", topic: "com.example.app", token: token,
                         user: nil, transport: "fcm", content: content)
        d.payload = try transport.configuration.render(content, context: d.renderContext)
        return d
    }

    func send(_ tokens: [String]) async throws -> [DeliveryOutcome] {
        await transport.deliver(try tokens.map { try delivery($0) })
    }
}

@Suite("FCM transport against the simulator", .serialized)
struct FCMTransportSimulatorTests {
    @Test func deliversWithTheMessageNameAsReceiptAndStringOnlyData() async throws {
        let f = try await FCMTransportFixture()
        let token = registrationToken()
        let d = try f.delivery(token, NotificationContent(title: "Hi", body: "there", data: ["n": 12, "s": "x"], priority: .high))
        let outcomes = await f.transport.deliver([d])
        await f.stop()
        guard case .delivered(let receipt?, _) = outcomes.first else { Issue.record("\(outcomes)"); return }
        let received = try #require(f.simulator.received.first)
        #expect(receipt == received.name && receipt.hasPrefix("projects/herald-sim/messages/0:"))
        #expect(received.token == token)
        #expect(received.data == ["n": "12", "s": "x", "herald_id": d.notificationID])
        #expect(received.message["android"]?["priority"] == "high")
        #expect(f.simulator.counters.accessTokensIssued == 1)
    }

    /// Every error row of the answers table, from the simulator's faults.
    @Test func everyAnswerMapsAsTheTableSays() async throws {
        let unregistered = registrationToken(2), invalid = registrationToken(3), mismatch = registrationToken(4), ok = registrationToken(5)
        let f = try await FCMTransportFixture(configureSimulator: { c in
            c.faults.unregisteredTokens = [unregistered]
            c.faults.invalidTokens = [invalid]
            c.faults.senderMismatchTokens = [mismatch]
        })
        let before = f.clock.now
        var outcomes = try await f.send([unregistered, invalid, mismatch, mismatch, ok])
        #expect(outcomes[0] == .tokenInvalid(since: before, reason: "UNREGISTERED"))
        guard case .tokenInvalid(before?, let r) = outcomes[1], r.contains("registration token") else { Issue.record("\(outcomes[1])"); return }
        guard case .rejected(let m) = outcomes[2], m.hasPrefix("SENDER_ID_MISMATCH") else { Issue.record("\(outcomes[2])"); return }
        #expect(f.metrics.value("herald_fcm_sender_id_mismatch_total", labels: [("transport", "fcm")]) == 2)
        guard case .delivered = outcomes[4] else { Issue.record("\(outcomes[4])"); return }

        f.simulator.updateFaults { $0.quotaExceeded = 1; $0.quotaRetryAfter = 30 }
        outcomes = try await f.send([ok])
        guard case .retry(30, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.quotaExceeded = 1; $0.quotaRetryAfter = nil }
        outcomes = try await f.send([ok])
        guard case .retry(60, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.internalErrors = 1; $0.unavailable = 1; $0.serverErrorRetryAfter = 7 }
        outcomes = try await f.send([ok, ok])
        #expect(outcomes.allSatisfy { if case .retry(7, _) = $0 { return true } else { return false } }, "\(outcomes)")
        f.simulator.updateFaults { $0.thirdPartyAuthErrorTokens = [ok] }
        outcomes = try await f.send([ok])
        guard case .setupFailure(let t) = outcomes[0], t.contains("THIRD_PARTY_AUTH_ERROR") else { Issue.record("\(outcomes)"); return }
        await f.stop()
    }

    @Test func a401IsRetriedExactlyOnceWithAFreshToken() async throws {
        let f = try await FCMTransportFixture()
        let token = registrationToken()
        _ = try await f.send([token])  // a token is in hand
        f.simulator.updateFaults { $0.unauthenticatedSends = 1 }
        var outcomes = try await f.send([token])
        guard case .delivered = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(f.simulator.counters.accessTokensIssued == 2)
        #expect(f.simulator.counters.errors["UNAUTHENTICATED"] == 1)
        #expect(f.simulator.counters.sends == 3)
        // Two 401s in a row: the transport pauses (setup failure), and sends no third time.
        f.simulator.updateFaults { $0.unauthenticatedSends = 2 }
        outcomes = try await f.send([token])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("401") else { Issue.record("\(outcomes)"); return }
        #expect(f.simulator.counters.sends == 5)
        await f.stop()
    }

    /// The simulator and the transport share a test clock: the token expires between two sends
    /// and is refreshed before the second, which succeeds.
    @Test func anAccessTokenExpiringMidRunIsRefreshedWithNoFailedSend() async throws {
        let f = try await FCMTransportFixture(configureSimulator: { $0.accessTokenLifetime = 600 })
        let token = registrationToken()
        for step in 0..<6 {
            let outcomes = try await f.send([token, token])
            #expect(outcomes.allSatisfy { if case .delivered = $0 { return true } else { return false } }, "step \(step): \(outcomes)")
            f.clock.advance(by: 250)
        }
        #expect(f.simulator.counters.errors["UNAUTHENTICATED"] == nil)
        // A refresh before expiry runs in the background while the send goes on with the current
        // token: the last one may still be on its way to the simulator when the loop ends.
        #expect(await eventually(timeout: 10) { f.simulator.counters.accessTokensIssued >= 3 })
        await f.stop()
    }

    @Test func invalidGrantPausesAndAFixResumes() async throws {
        let f = try await FCMTransportFixture(configureSimulator: { $0.faults.invalidGrant = true })
        var outcomes = try await f.send([registrationToken()])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("invalid_grant") else { Issue.record("\(outcomes)"); return }
        #expect(!reason.contains("PRIVATE KEY") && f.simulator.counters.sends == 0)
        f.simulator.updateFaults { $0.invalidGrant = false }
        outcomes = try await f.send([registrationToken()])
        guard case .delivered = outcomes[0] else { Issue.record("\(outcomes)"); return }
        await f.stop()
    }

    @Test func validateOnlyIsCheckedNotDelivered() async throws {
        let f = try await FCMTransportFixture(section: { $0["validateOnly"] = true })
        let outcomes = try await f.send([registrationToken()])
        guard case .delivered(let receipt, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(receipt?.hasSuffix("/messages/fake_message_id") == true)
        #expect(f.simulator.received.first?.validateOnly == true)
        await f.stop()
    }

    @Test func theSimulatorTakesWhatTheLimitLets() async throws {
        let f = try await FCMTransportFixture()
        let probe = try f.delivery(registrationToken(), NotificationContent(data: ["k": ""]))
        let fill = 4096 - probe.payload.body.count
        let d = try f.delivery(registrationToken(), NotificationContent(data: ["k": .string(String(repeating: "x", count: fill))]))
        #expect(d.payload.body.count == 4096)
        let outcomes = await f.transport.deliver([d])
        guard case .delivered = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(f.simulator.received.first?.bytes == 4096)
        #expect(throws: ContentProblem.self) {
            _ = try f.delivery(registrationToken(), NotificationContent(data: ["k": .string(String(repeating: "x", count: fill + 1))]))
        }
        await f.stop()
    }
}
