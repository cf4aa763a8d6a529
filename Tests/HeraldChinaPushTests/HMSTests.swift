import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldHMS

func hmsFixture(configureSimulator: (inout ChinaVendorSimulator.Configuration) -> Void = { _ in },
                edit: (inout [String: JSONValue]) -> Void = { _ in }) async throws -> VendorFixture<HMSTransport> {
    try await VendorFixture<HMSTransport>(vendor: .hms, configureSimulator: configureSimulator, section: { sim, ca in
        var m: [String: JSONValue] = ["appId": .string(sim.configuration.credentials.appID), "appSecret": .string(sim.configuration.credentials.appSecret),
                                      "endpoint": .string(sim.baseURL), "authEndpoint": .string(sim.authURL), "caFile": .string(ca)]
        edit(&m)
        return m
    }, make: { members, context in
        let (c, errors) = readSection(.object(members), HMSTransport.configuration(from:))
        guard let c, errors.isEmpty else { throw TestSetupError("hms config: \(errors)") }
        return (try HMSTransport(name: "huawei", configuration: c, context: context), { try c.render($0, context: $1) })
    })
}

@Suite("HMS transport against its simulator", .serialized)
struct HMSTransportTests {
    @Test func oneNotificationToManyPhonesIsOneCallWithPerDeviceAnswers() async throws {
        let bad = vendorToken(2)
        let f = try await hmsFixture(configureSimulator: { $0.faults.invalidTokens = [bad] })
        let tokens = [vendorToken(1), bad, vendorToken(3)]
        let before = f.clock.now
        let outcomes = try await f.send(tokens, NotificationContent(title: "Order shipped", body: "It is on its way", data: ["order": 42],
                                                                     category: "order", collapseKey: "order-42", priority: .high))
        #expect(f.simulator.counters.sends == 1)
        guard case .delivered(let receipt?, _) = outcomes[0], case .delivered(receipt, _) = outcomes[2] else { Issue.record("\(outcomes)"); return }
        #expect(outcomes[1] == .tokenInvalid(since: before, reason: "HMS: 80100000 illegal_tokens"))
        let got = try #require(f.simulator.received.first)
        #expect(got.tokens == [vendorToken(1), vendorToken(3)] && got.id == receipt)
        let android = try #require(got.message["android"])
        #expect(android["category"] == "EXPRESS" && android["urgency"] == "HIGH")
        #expect(android["notification"]?["importance"] == "NORMAL")
        #expect(android["notification"]?["notify_id"]?.intValue == VendorText.notifyID("order-42"))
        #expect(android["notification"]?["click_action"]?["type"] == 3)
        let data = try JSONValue.parse(try #require(got.message["data"]?.stringValue))
        #expect(data["order"] == 42 && data["herald_id"]?.stringValue?.hasPrefix("n") == true)
        #expect(f.simulator.counters.accessTokensIssued == 1)
        await f.stop()
    }

    @Test func everyTokenInvalidIs80300007() async throws {
        let f = try await hmsFixture(configureSimulator: { $0.faults.invalidTokens = [vendorToken(1), vendorToken(2)] })
        let outcomes = try await f.send([vendorToken(1), vendorToken(2)])
        #expect(outcomes.allSatisfy { if case .tokenInvalid(_, let r) = $0 { return r.contains("80300007") } else { return false } })
        await f.stop()
    }

    @Test func anAccessTokenExpiredMidRunIsFetchedAgainAndTheSendGoesOnce() async throws {
        let f = try await hmsFixture()
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        // The vendor forgets the token (80200003 on the next send): one refetch, one more send.
        f.simulator.revokeAccessTokens()
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        #expect(f.simulator.counters.accessTokensIssued == 2 && f.simulator.counters.sends == 3)
        // Refused twice in a row: the transport pauses.
        f.simulator.updateFaults { $0.expiredAccessTokens = 2 }
        let outcomes = try await f.send([vendorToken(1)])
        guard case .setupFailure(let reason) = outcomes[0], reason.contains("80200003") else { Issue.record("\(outcomes)"); return }
        await f.stop()
    }

    @Test func theTokenIsRefreshedBeforeItExpires() async throws {
        let f = try await hmsFixture(configureSimulator: { $0.accessTokenLifetime = 3600 })
        // Sends at 0, 850, 1700, 2550 and 3400 s: the last is inside the 5-minute margin, goes
        // with the current token, and starts one refresh.
        for step in 0..<5 {
            if step > 0 { f.clock.advance(by: 850) }
            #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        }
        #expect(await eventually(timeout: 10) { f.simulator.counters.accessTokensIssued == 2 })
        #expect(f.simulator.counters.sends == 5)
        await f.stop()
    }

    @Test func badCredentialsPauseAndFixedSecretsResume() async throws {
        let f = try await hmsFixture(configureSimulator: { $0.faults.badCredentials = true })
        let outcomes = try await f.send([vendorToken(1)])
        guard case .setupFailure(let reason) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(reason.contains("1101") && !reason.contains(f.simulator.configuration.credentials.appSecret))
        #expect(f.simulator.counters.sends == 0)
        // The operator fixes the secret (a SIGHUP rebuilds the transport; the same transport asks again too).
        f.simulator.updateFaults { $0.badCredentials = false }
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        await f.stop()
    }

    @Test func flowControlAndServerErrorsAreRetried() async throws {
        let f = try await hmsFixture(configureSimulator: { $0.faults.rateLimited = 1; $0.faults.serverErrors = 1 })
        var outcomes = try await f.send([vendorToken(1)])
        guard case .retry(_, let r) = outcomes[0], r.contains("503") else { Issue.record("\(outcomes)"); return }
        outcomes = try await f.send([vendorToken(1)])
        #expect(outcomes.allSatisfy(isRetry))
        #expect(f.metrics.value("herald_vendor_limited_total", labels: [("transport", "huawei"), ("vendor", "HMS"), ("limit", "rate")]) == 1)
        #expect(try await f.send([vendorToken(1)]).allSatisfy(isDelivered))
        await f.stop()
    }

    @Test func theTTLComesFromTheExpirationWhenSent() async throws {
        let f = try await hmsFixture()
        let expiration = Int64(f.clock.now.timeIntervalSince1970) + 600
        #expect(try await f.send([vendorToken(1)], NotificationContent(title: "t", body: "b", expiration: expiration)).allSatisfy(isDelivered))
        #expect(f.simulator.received.first?.message["android"]?["ttl"] == "600s")
        await f.stop()
    }

    @Test func theNGHTTP2EngineDeliversToo() async throws {
        let f = try await hmsFixture(edit: { $0["engine"] = "nghttp2" })
        #expect(f.transport.configuration.connection.engine == .nghttp2)
        #expect(try await f.send([vendorToken(1), vendorToken(2)]).allSatisfy(isDelivered))
        #expect(f.simulator.received.first?.tokens.count == 2)
        await f.stop()
    }

    @Test func aDataMessageHasNoNotification() async throws {
        let f = try await hmsFixture()
        #expect(try await f.send([vendorToken(1)], NotificationContent(data: ["k": "v"], contentAvailable: true)).allSatisfy(isDelivered))
        #expect(f.simulator.received.first?.message["android"]?["notification"] == nil)
        await f.stop()
    }
}

@Suite("HMS rendering and configuration")
struct HMSRenderingTests {
    let context = RenderContext(notificationID: "n1", app: "a", topic: "a")

    @Test func theMessageClassPicksTheCategoryAndImportance() throws {
        let marketing = try HMSRenderer.render(NotificationContent(title: "Sale", body: "50% off"), context: context, defaultClass: .marketing)
        let m = try JSONValue.parse(marketing.body)
        #expect(m["android"]?["category"] == "MARKETING" && m["android"]?["notification"]?["importance"] == "LOW")
        let im = try JSONValue.parse(HMSRenderer.render(NotificationContent(title: "Ann", body: "hi", category: "im"), context: context, defaultClass: .marketing).body)
        #expect(im["android"]?["category"] == "IM" && im["android"]?["notification"]?["importance"] == "NORMAL")
        // The override block wins, and a category that is no class is a click action.
        let own = try JSONValue.parse(HMSRenderer.render(NotificationContent(title: "t", body: "b", category: "OPEN_CHAT",
                                                                             overrides: ["hms": ["category": "VOIP", "channel_id": "calls"]]),
                                                         context: context, defaultClass: .marketing).body)
        #expect(own["android"]?["category"] == "VOIP" && own["android"]?["notification"]?["channel_id"] == "calls")
        #expect(own["android"]?["notification"]?["click_action"] == ["type": 1, "action": "OPEN_CHAT"])
    }

    /// Data with nothing to show is a data message, as on FCM; visible text stays a notification.
    @Test func dataWithNothingToShowIsADataMessage() throws {
        let data = try JSONValue.parse(HMSRenderer.render(NotificationContent(data: ["k": "v"]), context: context, defaultClass: .im).body)
        #expect(data["android"]?["notification"] == nil, "\(data.jsonString)")
        #expect(try JSONValue.parse(try #require(data["data"]?.stringValue))["k"] == "v")
        let shown = try JSONValue.parse(HMSRenderer.render(NotificationContent(body: "hi", data: ["k": "v"]), context: context, defaultClass: .im).body)
        #expect(shown["android"]?["notification"]?["body"] == "hi")
    }

    @Test func theLimitsAreCheckedAtAcceptTime() {
        #expect(throws: ContentProblem.self) {
            _ = try HMSRenderer.render(NotificationContent(title: "t", body: String(repeating: "x", count: 4100)), context: context, defaultClass: .im)
        }
        #expect(throws: ContentProblem(field: "hms.colour", "unknown key; known: bi_tag, category, channel_id, click_action, importance, notification, receipt_id, urgency")) {
            _ = try HMSRenderer.render(NotificationContent(title: "t", body: "b", overrides: ["hms": ["colour": "red"]]), context: context, defaultClass: .im)
        }
        #expect(throws: ContentProblem.self) {
            _ = try HMSRenderer.render(NotificationContent(title: "t", body: "b", overrides: ["hms": ["category": "SPAM"]]), context: context, defaultClass: .im)
        }
    }

    @Test func theSectionNamesMissingKeysAndKeepsTheSecretOut() {
        let (c, errors) = readSection(["appId": "abc"], HMSTransport.configuration(from:))
        #expect(c == nil)
        #expect(errors.contains { $0.contains("appId") } && errors.contains { $0.contains("appSecret") })
        let (ok, none) = readSection(["appId": "10086000", "appSecret": "s3cr3t-value"], HMSTransport.configuration(from:))
        #expect(none.isEmpty)
        #expect(ok?.summary.contains("s3cr3t") == false)
        #expect(ok?.connection.endpoint.description == "https://push-api.cloud.huawei.com")
        #expect(ok?.authEndpoint.description == "https://oauth-login.cloud.huawei.com/oauth2/v3/token")
        #expect(ok?.vendor == "huawei" && ok?.platform == .android)
    }
}
