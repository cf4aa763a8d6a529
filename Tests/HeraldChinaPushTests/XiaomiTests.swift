import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldXiaomi

func xiaomiFixture(configureSimulator: (inout ChinaVendorSimulator.Configuration) -> Void = { _ in },
                   edit: (inout [String: JSONValue]) -> Void = { _ in }) async throws -> VendorFixture<XiaomiTransport> {
    try await VendorFixture<XiaomiTransport>(vendor: .xiaomi, configureSimulator: configureSimulator, section: { sim, ca in
        var m: [String: JSONValue] = ["appSecret": .string(sim.configuration.credentials.appSecret), "packageName": .string(sim.configuration.credentials.packageName),
                                      "endpoint": .string(sim.baseURL), "caFile": .string(ca),
                                      "systemChannelId": "sys", "marketingChannelId": "promo"]
        edit(&m)
        return m
    }, make: { members, context in
        let (c, errors) = readSection(.object(members), XiaomiTransport.configuration(from:))
        guard let c, errors.isEmpty else { throw TestSetupError("xiaomi config: \(errors)") }
        return (try XiaomiTransport(name: "xiaomi", configuration: c, context: context), { try c.render($0, context: $1) })
    })
}

@Suite("Xiaomi transport against its simulator", .serialized)
struct XiaomiTransportTests {
    @Test func oneFormPostForManyPhonesWithBadRegidsPerDevice() async throws {
        let bad = vendorToken(2, prefix: "mi")
        let f = try await xiaomiFixture(configureSimulator: { $0.faults.invalidTokens = [bad] })
        let before = f.clock.now
        let expiration = Int64(before.timeIntervalSince1970) + 120
        let outcomes = try await f.send([vendorToken(1, prefix: "mi"), bad],
                                        NotificationContent(title: "新消息", body: "Ann: are you there?", data: ["chat": "7"],
                                                            category: "im", collapseKey: "chat-7", expiration: expiration))
        #expect(f.simulator.counters.sends == 1)
        guard case .delivered(let id?, _) = outcomes[0], id.hasPrefix("scm") else { Issue.record("\(outcomes)"); return }
        #expect(outcomes[1] == .tokenInvalid(since: before, reason: "Xiaomi: bad_regids"))
        let m = try #require(f.simulator.received.first?.message)
        #expect(m["title"] == "新消息" && m["description"] == "Ann: are you there?" && m["pass_through"] == "0")
        #expect(m["extra.channel_id"] == "sys" && m["time_to_live"] == "120000")
        #expect(m["notify_id"]?.stringValue == String(VendorText.notifyID("chat-7", max: 1_000_000)))
        let payload = try JSONValue.parse(try #require(m["payload"]?.stringValue))
        #expect(payload["chat"] == "7")
        await f.stop()
    }

    @Test func everyAnswerMapsAsTheTableSays() async throws {
        let gone = vendorToken(3, prefix: "mi")
        let f = try await xiaomiFixture(configureSimulator: { $0.faults.invalidTokens = [gone] })
        var outcomes = try await f.send([gone])
        guard case .tokenInvalid(_, let r) = outcomes[0], r.contains("20301") else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.rateLimited = 1 }
        outcomes = try await f.send([vendorToken(1)])
        guard case .retry(nil, let rate) = outcomes[0], rate.contains("10027") else { Issue.record("\(outcomes)"); return }
        f.simulator.updateFaults { $0.serverErrors = 1 }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isRetry))
        f.simulator.updateFaults { $0.dailyQuota = 1 }
        outcomes = try await f.send([vendorToken(1)])
        guard case .deferred(let after?, _) = outcomes[0], after > 0, after <= 86_400 else { Issue.record("\(outcomes)"); return }
        #expect(f.transport.impairment?.contains("Xiaomi daily quota used up on route xiaomi") == true)
        #expect(f.metrics.value("herald_vendor_limited_total", labels: [("transport", "xiaomi"), ("vendor", "Xiaomi"), ("limit", "daily_quota")]) == 1)
        await f.stop()
    }

    @Test func aWrongKeyPausesAndTheFixedOneResumes() async throws {
        let f = try await xiaomiFixture(configureSimulator: { $0.faults.badCredentials = true })
        let outcomes = try await f.send([vendorToken(1)])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("21301") else { Issue.record("\(outcomes)"); return }
        #expect(!reason.contains(f.simulator.configuration.credentials.appSecret))
        f.simulator.updateFaults { $0.badCredentials = false }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        await f.stop()
    }

    @Test func theSimulatorChecksThePackage() async throws {
        let f = try await xiaomiFixture(edit: { $0["packageName"] = "com.other.app" })
        let outcomes = try await f.send([vendorToken(1)])
        guard case .rejected(let reason) = outcomes[0], reason.contains("22022") else { Issue.record("\(outcomes)"); return }
        #expect(f.simulator.counters.invalidRequests == 1)
        await f.stop()
    }
}

@Suite("Xiaomi rendering")
struct XiaomiRenderingTests {
    let context = RenderContext(notificationID: "n1", app: "a", topic: "a")
    let configuration: XiaomiConfiguration = {
        var c = XiaomiConfiguration(appSecret: Secret("s"), packageName: "com.example.app")
        c.systemChannelID = "sys"
        c.marketingChannelID = "promo"
        return c
    }()

    @Test func titlesOver50AndDescriptionsOver128AreRefusedAtAcceptTime() throws {
        _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 50), body: "b"), context: context)
        #expect(throws: ContentProblem(field: "title", "Xiaomi takes at most 50 characters, found 51")) {
            _ = try configuration.render(NotificationContent(title: String(repeating: "标", count: 51), body: "b"), context: context)
        }
        #expect(throws: ContentProblem(field: "body", "Xiaomi takes at most 128 characters, found 129")) {
            _ = try configuration.render(NotificationContent(title: "t", body: String(repeating: "x", count: 129)), context: context)
        }
    }

    /// Data with nothing to show is a pass-through message, as FCM sends a data message.
    @Test func dataWithNothingToShowPassesThrough() throws {
        let data = try JSONValue.parse(configuration.render(NotificationContent(data: ["k": "v"]), context: context).body)
        #expect(data["pass_through"] == "1" && data["title"] == nil, "\(data.jsonString)")
        #expect(try JSONValue.parse(try #require(data["payload"]?.stringValue))["k"] == "v")
        let shown = try JSONValue.parse(configuration.render(NotificationContent(body: "hi", data: ["k": "v"]), context: context).body)
        #expect(shown["pass_through"] == "0")
    }

    @Test func theClassPicksTheChannelAndTheBlockWins() throws {
        let promo = try JSONValue.parse(configuration.render(NotificationContent(title: "t", body: "b"), context: context).body)
        #expect(promo["extra.channel_id"] == "promo")
        let order = try JSONValue.parse(configuration.render(NotificationContent(title: "t", body: "b", category: "order"), context: context).body)
        #expect(order["extra.channel_id"] == "sys")
        let own = try JSONValue.parse(configuration.render(NotificationContent(title: "t", body: "b", overrides: ["xiaomi": ["channel_id": "calls", "extra": ["sound_uri": "x"]]]),
                                                           context: context).body)
        #expect(own["extra.channel_id"] == "calls" && own["extra.sound_uri"] == "x")
        #expect(throws: ContentProblem.self) {
            _ = try configuration.render(NotificationContent(title: "t", body: "b", overrides: ["xiaomi": ["notify_effect": "2"]]), context: context)
        }
    }
}
