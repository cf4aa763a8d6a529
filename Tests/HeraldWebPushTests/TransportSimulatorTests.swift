import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
@testable import HeraldWebPush
import Testing

/// The transport against the Web Push simulator over real TLS and HTTP/2: what Herald sends
/// decrypts, every answer becomes its outcome, the 401/403 rule, the VAPID JWT cache, and a slow
/// push service that does not hold up another.
@Suite(.serialized) struct TransportSimulatorTests {
    struct Setup {
        var simulator: WebPushSimulator
        var transport: WebPushTransport
        var configuration: WebPushConfiguration
    }

    func simulator(seed: String, latency: Double = 0, faults: WebPushServiceRules.Faults = .init(),
                   clock: any WallClock = SystemClock()) throws -> WebPushSimulator {
        let certs = try TestCertificates.shared()
        var c = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: seed)
        c.latency = latency
        c.faults = faults
        let sim = try WebPushSimulator(configuration: c, clock: clock)
        try sim.start()
        return sim
    }

    func transport(key: P256PrivateKey? = nil, clock: any WallClock = SystemClock(), extra: String = "") throws -> (WebPushTransport, WebPushConfiguration) {
        let certs = try TestCertificates.shared()
        let k = try key ?? P256PrivateKey.generate()
        let (c, errors, _) = readConfiguration(#"""
            {"type": "webpush", "vapidKey": "\#(Base64URL.encode(k.rawRepresentation))", "subject": "mailto:push@example.com",
             "allowedEndpoints": ["127.0.0.1"], "caFile": "\#(certs.caFile)", "timeout": "20s"\#(extra)}
            """#)
        let configuration = try #require(c, "\(errors)")
        let t = try WebPushTransport(name: "web", configuration: configuration,
                                     context: TransportContext(logger: .disabled, clock: clock))
        return (t, configuration)
    }

    func delivery(_ id: Int64, _ subscription: String, _ configuration: WebPushConfiguration,
                  content: NotificationContent = NotificationContent(title: "Hi", body: "there", collapseKey: "news", priority: .high),
                  accepted: Date = Date()) throws -> Delivery {
        let token = try configuration.address(.token(subscription), attributes: DeviceAttributes()).token
        var d = Delivery(id: id, notificationID: "n-\(id)", app: "com.example.web", topic: "com.example.web", token: token, user: "alice",
                         transport: "web", content: content)
        d.payload = try configuration.render(content, context: d.renderContext)
        d.acceptedAt = accepted
        return d
    }

    @Test func whatHeraldSendsDecryptsWithTheSubscriptionsKeys() async throws {
        let sim = try simulator(seed: "decrypt")
        defer { sim.stop() }
        let (t, c) = try transport()
        let accepted = Date(timeIntervalSince1970: 1_767_225_600)
        let outcomes = await t.deliver([try delivery(1, sim.subscriptionJSON(0), c, accepted: accepted), try delivery(2, sim.subscriptionJSON(1), c)])
        await t.shutdown()
        guard case .delivered(let receipt?, _) = outcomes.first else { Issue.record("\(outcomes)"); return }
        #expect(receipt.hasPrefix(sim.origins[0] + "/message/0-"))
        #expect(outcomes.count == 2 && outcomes[1] == .delivered(receipt: outcomes[1].receipt, evidence: nil))
        let first = try #require(sim.rules.received.first { $0.subscription == 0 })
        let json = try #require(first.json)
        #expect(json["id"]?.stringValue == "n-1" && json["app"]?.stringValue == "com.example.web" && json["title"]?.stringValue == "Hi")
        #expect(json["created_at"]?.stringValue == "2026-01-01T00:00:00.000Z" && json["tag"]?.stringValue == "news")
        #expect(first.urgency == "high" && first.topic == "news" && first.ttl == 86_400)
        #expect(first.vapidAudience == sim.origins[0] && first.vapidSubject == "mailto:push@example.com" && first.vapidKey == c.publicClientKey)
    }

    @Test func everyAnswerBecomesItsOutcome() async throws {
        var f = WebPushServiceRules.Faults()
        f.gone = [1]; f.notFound = [2]; f.mismatchedKey = [3]
        let sim = try simulator(seed: "table", faults: f)
        defer { sim.stop() }
        let (t, c) = try transport()
        // 201 first, so the service is known to accept the key: the mismatched subscription is its own fault.
        let first = await t.deliver([try delivery(1, sim.subscriptionJSON(0), c)])
        #expect(first.first?.isDelivered == true, "\(first)")
        let out = await t.deliver([try delivery(2, sim.subscriptionJSON(1), c), try delivery(3, sim.subscriptionJSON(2), c),
                                   try delivery(4, sim.subscriptionJSON(3), c)])
        guard out.count == 3, case .tokenInvalid(nil, let gone) = out[0], case .tokenInvalid(nil, let notFound) = out[1],
              case .rejected(let mismatch) = out[2] else { Issue.record("\(out)"); await t.shutdown(); return }
        #expect(gone.hasPrefix("410") && notFound.hasPrefix("404") && mismatch.contains("VapidPkHashMismatch"))
        // 413: a body over 4096 bytes never leaves (the plaintext limit is checked at accept); a
        // delivery past it is rejected by the encryption here.
        var big = try delivery(5, sim.subscriptionJSON(0), c)
        big.payload.body = Array(#"{"id":"n-5","body":""#.utf8) + [UInt8](repeating: 0x61, count: 4000) + Array(#""}"#.utf8)
        guard case .rejected(let tooLong) = await t.deliver([big]).first else { Issue.record("too long"); await t.shutdown(); return }
        #expect(tooLong.contains("3993"))
        await t.shutdown()
    }

    @Test func retryAfterIsHonouredAndTheServiceBacksOff() async throws {
        var f = WebPushServiceRules.Faults()
        f.tooManyRequests = 1; f.serverErrors = 1; f.retryAfter = 9
        let sim = try simulator(seed: "backoff", faults: f)
        defer { sim.stop() }
        let clock = TestClock(start: Date())
        let (t, c) = try transport(clock: clock)
        guard case .retry(let after, let reason) = await t.deliver([try delivery(1, sim.subscriptionJSON(0), c)]).first else {
            Issue.record("429 retries"); await t.shutdown(); return
        }
        #expect(after == 9 && reason.hasPrefix("429"))
        // Backing off: not sent, not counted.
        guard case .deferred(let wait, let why) = await t.deliver([try delivery(2, sim.subscriptionJSON(0), c)]).first else {
            Issue.record("a backed-off service defers"); await t.shutdown(); return
        }
        #expect(wait != nil && wait! > 8 && why.contains("backing off after 429"))
        #expect(sim.rules.count(status: 429) == 1 && sim.rules.count(status: 503) == 0)
        clock.advance(by: 10)
        guard case .retry(let after503, _) = await t.deliver([try delivery(3, sim.subscriptionJSON(0), c)]).first else {
            Issue.record("503 retries"); await t.shutdown(); return
        }
        #expect(after503 == 9)
        clock.advance(by: 10)
        #expect(await t.deliver([try delivery(4, sim.subscriptionJSON(0), c)]).first?.isDelivered == true)
        await t.shutdown()
    }

    @Test func aKeyEveryServiceRefusesPausesThatServiceAndReadinessSaysWhy() async throws {
        var f = WebPushServiceRules.Faults()
        f.applicationServerKey = try P256PrivateKey.generate().publicKey  // the subscriptions were made with another key
        let refusing = try simulator(seed: "refusing", faults: f)
        let fine = try simulator(seed: "fine")
        defer { refusing.stop(); fine.stop() }
        let (t, c) = try transport(extra: #", "refusalsToPause": 2"#)
        let out = await t.deliver([try delivery(1, refusing.subscriptionJSON(0), c), try delivery(2, refusing.subscriptionJSON(1), c),
                                   try delivery(3, fine.subscriptionJSON(0), c)])
        guard case .retry = out[0], case .deferred(_, let paused) = out[1] else { Issue.record("\(out)"); await t.shutdown(); return }
        #expect(paused.contains("refused the VAPID JWT for every subscription tried (2)"))
        #expect(out[2].isDelivered, "the other service carries on: \(out[2])")
        let impairment = try #require(t.impairment)
        #expect(impairment.contains(refusing.origins[0]) && impairment.contains("VapidPkHashMismatch") && !impairment.contains(fine.origins[0]))
        // Paused: its deliveries wait, unsent.
        let before = refusing.rules.count(status: 403)
        guard case .deferred = await t.deliver([try delivery(4, refusing.subscriptionJSON(2), c)]).first else {
            Issue.record("a paused service defers"); await t.shutdown(); return
        }
        #expect(refusing.rules.count(status: 403) == before)
        await t.shutdown()
    }

    @Test func theVAPIDTokenIsCachedPerOriginAndRenewedBeforeItExpires() async throws {
        let clock = TestClock(start: Date())
        let sim = try simulator(seed: "vapid", clock: clock)
        defer { sim.stop() }
        let (t, c) = try transport(clock: clock)
        _ = await t.deliver([try delivery(1, sim.subscriptionJSON(0), c)])
        clock.advance(by: 3600)
        _ = await t.deliver([try delivery(2, sim.subscriptionJSON(1), c)])
        clock.advance(by: 12 * 3600 - 3600 - 3600 + 1)   // within the renewal margin (an hour) of exp
        _ = await t.deliver([try delivery(3, sim.subscriptionJSON(0), c)])
        await t.shutdown()
        let exps = sim.rules.received.sorted { $0.time < $1.time }.map(\.vapidExpiresAt)
        #expect(exps.count == 3 && exps[0] == exps[1] && exps[2] > exps[1], "\(exps)")
        #expect(t.signer.cachedOrigins == 1)
    }

    @Test func aSlowPushServiceDoesNotHoldUpAnother() async throws {
        let slow = try simulator(seed: "slow", latency: 6)
        let fast = try simulator(seed: "fast")
        defer { slow.stop(); fast.stop() }
        let (t, c) = try transport()
        let first = [try delivery(1, slow.subscriptionJSON(0), c), try delivery(2, fast.subscriptionJSON(0), c)]
        let firstDone = Locked<Date?>(nil)
        let batchA = Task {
            let outcomes = await t.deliver(first)
            firstDone.withLock { $0 = Date() }
            return outcomes
        }
        // Once the slow service has the first batch's message and the fast one has answered its
        // part (only the slow service is busy), a second batch for both services: the fast one is
        // sent and answered, the slow one deferred, while the first batch still waits.
        #expect(await eventually(timeout: 30) { slow.rules.received.count == 1 && t.busyServices.count == 1 })
        #expect(t.busyServices.allSatisfy { (try? slow.subscriptionJSON(0).contains($0)) == true }, "\(t.busyServices)")
        let second = await t.deliver([try delivery(3, slow.subscriptionJSON(1), c), try delivery(4, fast.subscriptionJSON(1), c)])
        let secondDone = Date()
        let stillOut = firstDone.withLock { $0 } == nil
        let a = await batchA.value
        #expect(second[1].isDelivered, "\(second)")
        if case .deferred(_, let why) = second[0] { #expect(why.contains("still answering an earlier batch")) } else { Issue.record("\(second)") }
        #expect(stillOut, "the second batch ended only after the slow service answered the first")
        #expect(a.allSatisfy { $0.isDelivered }, "\(a)")
        #expect((firstDone.withLock { $0 } ?? .distantPast) > secondDone)
        await t.shutdown()
    }
}

extension DeliveryOutcome {
    var isDelivered: Bool { if case .delivered = self { return true } else { return false } }
    var receipt: String? { if case .delivered(let r, _) = self { return r } else { return nil } }
}
