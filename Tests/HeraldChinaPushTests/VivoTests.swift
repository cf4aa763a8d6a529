import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldVivo

func vivoFixture(configureSimulator: (inout ChinaVendorSimulator.Configuration) -> Void = { _ in },
                 edit: (inout [String: JSONValue]) -> Void = { _ in }) async throws -> VendorFixture<VivoTransport> {
    try await VendorFixture<VivoTransport>(vendor: .vivo, configureSimulator: configureSimulator, section: { sim, ca in
        let c = sim.configuration.credentials
        var m: [String: JSONValue] = ["appId": .string(c.appID), "appKey": .string(c.appKey), "appSecret": .string(c.appSecret),
                                      "endpoint": .string(sim.baseURL), "caFile": .string(ca)]
        edit(&m)
        return m
    }, make: { members, context in
        let (c, errors) = readSection(.object(members), VivoTransport.configuration(from:))
        guard let c, errors.isEmpty else { throw TestSetupError("vivo config: \(errors)") }
        return (try VivoTransport(name: "vivo", configuration: c, context: context), { try c.render($0, context: $1) })
    })
}

@Suite("vivo transport against its simulator", .serialized)
struct VivoTransportTests {
    @Test func theSignIsLowerCaseHexMD5() {
        // MD5("") is d41d8cd98f00b204e9800998ecf8427e; MD5("abc") is 900150983cd24fb0d6963f7d28e17f72 (RFC 1321).
        #expect(MD5.hex([UInt8]()) == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(VivoVendor.sign(appID: "a", appKey: "b", timestamp: "", appSecret: "c") == "900150983cd24fb0d6963f7d28e17f72")
    }

    @Test func oneDeviceIsSendAndManyAreSavedThenPushedWithInvalidUsers() async throws {
        let bad = vendorToken(2, prefix: "v")
        let f = try await vivoFixture(configureSimulator: { $0.faults.invalidTokens = [bad] })
        var outcomes = try await f.send([vendorToken(1, prefix: "v")], NotificationContent(title: "你好", body: "账号登录提醒", category: "account"))
        guard case .delivered(_?, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        let one = try #require(f.simulator.received.last)
        #expect(one.path == "/message/send" && one.message["classification"] == 1 && one.message["category"] == "ACCOUNT")
        let before = f.clock.now
        outcomes = try await f.send([vendorToken(3, prefix: "v"), bad, vendorToken(4, prefix: "v")], NotificationContent(title: "Sale", body: "now"))
        #expect(outcomes[1] == .tokenInvalid(since: before, reason: "vivo: invalidUsers status 1"))
        guard case .delivered(let task?, _) = outcomes[0], case .delivered(task, _) = outcomes[2] else { Issue.record("\(outcomes)"); return }
        let list = try #require(f.simulator.received.last)
        #expect(list.path == "/message/pushToList" && list.id == task && list.tokens.count == 2)
        #expect(list.message["classification"] == 0 && list.message["category"] == "MARKETING")
        // send, saveListPayload, pushToList
        #expect(f.simulator.counters.sends == 3 && f.simulator.counters.accessTokensIssued == 1)
        await f.stop()
    }

    @Test func everyAnswerMapsAsTheTableSays() async throws {
        let gone = vendorToken(9, prefix: "v")
        let f = try await vivoFixture(configureSimulator: { $0.faults.invalidTokens = [gone] })
        var outcomes = try await f.send([gone])
        guard case .tokenInvalid(_, let r) = outcomes[0], r.contains("10302") else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.expiredAccessTokens = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        #expect(f.simulator.counters.accessTokensIssued == 2)
        f.simulator.updateFaults { $0.rateLimited = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isRetry))
        f.simulator.updateFaults { $0.serverErrors = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isRetry))
        f.simulator.updateFaults { $0.dailyQuota = 1 }
        outcomes = try await f.send([vendorToken(1), vendorToken(2)])
        #expect(outcomes.allSatisfy { if case .deferred = $0 { return true } else { return false } }, "\(outcomes)")
        #expect(f.transport.impairment?.contains("vivo daily quota used up") == true)
        await f.stop()
    }

    @Test func aWrongSecretPausesAndAFixedOneResumes() async throws {
        let f = try await vivoFixture(configureSimulator: { $0.faults.badCredentials = true })
        let outcomes = try await f.send([vendorToken(1)])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("10200") else { Issue.record("\(outcomes)"); return }
        #expect(!reason.contains(f.simulator.configuration.credentials.appSecret))
        f.simulator.updateFaults { $0.badCredentials = false }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        await f.stop()
    }
}

@Suite("vivo rendering")
struct VivoRenderingTests {
    let context = RenderContext(notificationID: "n1", app: "a", topic: "a")
    let configuration = VivoConfiguration(appID: "1", appKey: Secret("k"), appSecret: Secret("s"))

    @Test func aChineseCharacterCountsTwoInTheFortyCharacterTitle() throws {
        _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 20), body: "b"), context: context)
        #expect(throws: ContentProblem(field: "title", "vivo takes at most 40 characters (a Chinese character counts 2), found 42")) {
            _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 21), body: "b"), context: context)
        }
        _ = try configuration.render(NotificationContent(title: String(repeating: "x", count: 40), body: "b"), context: context)
    }

    @Test func theBlockSetsVivosOwnClass() throws {
        let m = try JSONValue.parse(configuration.render(NotificationContent(title: "t", body: "b", overrides: ["vivo": ["classification": 1, "category": "TODO"]]),
                                                         context: context).body)
        #expect(m["classification"] == 1 && m["category"] == "TODO")
        #expect(throws: ContentProblem.self) {
            _ = try configuration.render(NotificationContent(title: "t", body: "b", overrides: ["vivo": ["skipType": 2]]), context: context)
        }
    }
}
