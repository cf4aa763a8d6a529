import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldOPPO

func oppoFixture(configureSimulator: (inout ChinaVendorSimulator.Configuration) -> Void = { _ in },
                 edit: (inout [String: JSONValue]) -> Void = { _ in }) async throws -> VendorFixture<OPPOTransport> {
    try await VendorFixture<OPPOTransport>(vendor: .oppo, configureSimulator: configureSimulator, section: { sim, ca in
        var m: [String: JSONValue] = ["appKey": .string(sim.configuration.credentials.appKey), "masterSecret": .string(sim.configuration.credentials.masterSecret),
                                      "endpoint": .string(sim.baseURL), "caFile": .string(ca), "channelId": "messages"]
        edit(&m)
        return m
    }, make: { members, context in
        let (c, errors) = readSection(.object(members), OPPOTransport.configuration(from:))
        guard let c, errors.isEmpty else { throw TestSetupError("oppo config: \(errors)") }
        return (try OPPOTransport(name: "oppo", configuration: c, context: context), { try c.render($0, context: $1) })
    })
}

@Suite("OPPO transport against its simulator", .serialized)
struct OPPOTransportTests {
    @Test func theSignIsHexSHA256OfKeyTimestampAndSecret() {
        // sha256("k" + "1700000000000" + "s")
        let expected = SHA256.hash(Array("k1700000000000s".utf8)).map { String(format: "%02x", $0) }.joined()
        #expect(OPPOVendor.sign(appKey: "k", timestamp: "1700000000000", masterSecret: "s") == expected)
    }

    @Test func oneDeviceIsUnicastAndManyAreOneBatchWithPerEntryErrors() async throws {
        let bad = vendorToken(2, prefix: "OPPO_CN_")
        let f = try await oppoFixture(configureSimulator: { $0.faults.invalidTokens = [bad] })
        var outcomes = try await f.send([vendorToken(1, prefix: "OPPO_CN_")], NotificationContent(title: "Hi", body: "one", category: "im"))
        guard case .delivered(let id?, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(f.simulator.received.last?.path == "/server/v1/message/notification/unicast" && f.simulator.received.last?.id == id)
        let n = try #require(f.simulator.received.last?.message)
        #expect(n["category"] == "IM" && n["notify_level"] == 16 && n["channel_id"] == "messages" && n["click_action_type"] == 0)
        let before = f.clock.now
        let expiration = Int64(before.timeIntervalSince1970) + 3600
        outcomes = try await f.send([vendorToken(3, prefix: "OPPO_CN_"), bad, vendorToken(4, prefix: "OPPO_CN_")],
                                    NotificationContent(title: "Sale", body: "today", expiration: expiration))
        #expect(outcomes[1] == .tokenInvalid(since: before, reason: "OPPO: 10000 invalid registration id"))
        #expect(isDelivered(outcomes[0]) && isDelivered(outcomes[2]))
        let last = try #require(f.simulator.received.last)
        #expect(last.path.hasSuffix("unicast_batch") && last.tokens.count == 2)
        #expect(last.message["category"] == "MARKETING" && last.message["notify_level"] == 1 && last.message["off_line_ttl"] == 3600)
        #expect(f.simulator.counters.accessTokensIssued == 1 && f.simulator.counters.sends == 2)
        await f.stop()
    }

    @Test func everyAnswerMapsAsTheTableSays() async throws {
        let f = try await oppoFixture()
        // 11: a new auth_token and one more send.
        f.simulator.updateFaults { $0.expiredAccessTokens = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        #expect(f.simulator.counters.accessTokensIssued == 2)
        f.simulator.updateFaults { $0.rateLimited = 1 }
        var outcomes = try await f.send([vendorToken(1)])
        guard case .retry(nil, let r) = outcomes[0], r.contains("-2") else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.serverErrors = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isRetry))
        f.simulator.updateFaults { $0.dailyQuota = 1 }
        outcomes = try await f.send([vendorToken(1)])
        guard case .deferred = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(f.transport.impairment?.contains("OPPO daily quota used up") == true)
        await f.stop()
    }

    @Test func aWrongMasterSecretPausesWithoutNamingIt() async throws {
        let f = try await oppoFixture(edit: { $0["masterSecret"] = "not-the-secret" })
        let outcomes = try await f.send([vendorToken(1)])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("16") else { Issue.record("\(outcomes)"); return }
        #expect(!reason.contains("not-the-secret") && f.simulator.counters.sends == 0)
        await f.stop()
    }

    @Test func theTokenIsRefreshedAnHourBeforeItsDayIsOver() async throws {
        let f = try await oppoFixture()
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        f.clock.advance(by: 23 * 3600 + 60)
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        #expect(await eventually(timeout: 10) { f.simulator.counters.accessTokensIssued == 2 })
        // The old token still worked meanwhile: no send was refused.
        #expect(f.simulator.counters.sends == 2)
        await f.stop()
    }
}

@Suite("OPPO rendering")
struct OPPORenderingTests {
    let context = RenderContext(notificationID: "n1", app: "a", topic: "a")
    let configuration = OPPOConfiguration(appKey: "k", masterSecret: Secret("s"))

    @Test func lengthsAreCheckedAtAcceptTime() throws {
        _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 50), body: "b"), context: context)
        #expect(throws: ContentProblem(field: "title", "OPPO takes at most 50 characters, found 51")) {
            _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 51), body: "b"), context: context)
        }
        #expect(throws: ContentProblem(field: "body", "OPPO takes at most 200 characters, found 201")) {
            _ = try configuration.render(NotificationContent(title: "t", body: String(repeating: "x", count: 201)), context: context)
        }
        #expect(throws: ContentProblem.self) {
            _ = try configuration.render(NotificationContent(title: "t", body: "b", overrides: ["oppo": ["notify_level": 3]]), context: context)
        }
    }
}
