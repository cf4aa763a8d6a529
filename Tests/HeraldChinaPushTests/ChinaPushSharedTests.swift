import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldTestKit
import Testing

@Suite("China push: what the vendors share")
struct ChinaPushSharedTests {
    @Test func theVendorDayEndsAtMidnightInUTCPlus8() {
        // 2026-12-06T15:59:59Z is 23:59:59 in Beijing: the day ends a second later.
        let justBefore = Date(timeIntervalSince1970: 1_796_572_799)
        #expect(VendorDay.end(of: justBefore) == Date(timeIntervalSince1970: 1_796_572_800))
        // At midnight Beijing time a new day starts: it ends 24 h later.
        #expect(VendorDay.end(of: Date(timeIntervalSince1970: 1_796_572_800)) == Date(timeIntervalSince1970: 1_796_659_200))
        // 00:30 UTC is 08:30 in Beijing.
        #expect(VendorDay.end(of: Date(timeIntervalSince1970: 1_796_517_000)) == Date(timeIntervalSince1970: 1_796_572_800))
    }

    @Test func formBodiesEncodeEverythingButUnreservedCharacters() {
        let body = FormBody([("title", "你好 world&x=1"), ("extra.channel_id", "a-b_c.d~")])
        #expect(String(decoding: body.bytes, as: UTF8.self) == "title=%E4%BD%A0%E5%A5%BD%20world%26x%3D1&extra.channel_id=a-b_c.d~")
    }

    @Test func vivoCountsAChineseCharacterAsTwo() throws {
        #expect(VendorText.weighted("Hi 你好") == 7)
        #expect(VendorText.characters("Hi 你好") == 5)
        #expect(throws: ContentProblem(field: "title", "vivo takes at most 4 characters (a Chinese character counts 2), found 6")) {
            try VendorText.check("ab你好", field: "title", limit: 4, vendor: "vivo", weighted: true)
        }
        try VendorText.check("ab你", field: "title", limit: 4, vendor: "vivo", weighted: true)
    }

    @Test func aMessageClassComesFromTheCategoryElseTheDefault() {
        #expect(MessageClass.of(NotificationContent(category: "IM"), fallback: .marketing) == .im)
        #expect(MessageClass.of(NotificationContent(category: "OPEN_CHAT"), fallback: .marketing) == .marketing)
        #expect(MessageClass.of(NotificationContent(), fallback: .order) == .order)
        #expect(MessageClass.im.isSystem && !MessageClass.marketing.isSystem)
    }

    @Test func aBodyAloneGetsTheRoutesDefaultTitleElseItself() {
        #expect(VendorVisibleText.of(NotificationContent(body: "Sale!"), defaultTitle: "Example")! == ("Example", "Sale!"))
        #expect(VendorVisibleText.of(NotificationContent(body: "Sale!"), defaultTitle: nil)! == ("Sale!", "Sale!"))
        #expect(VendorVisibleText.of(NotificationContent(title: "Hi"), defaultTitle: "Example")! == ("Hi", "Hi"))
        #expect(VendorVisibleText.of(NotificationContent(data: ["k": "v"]), defaultTitle: "Example") == nil)
    }

    @Test func notifyIDsAreStableAndPositive() {
        #expect(VendorText.notifyID("chat-42") == VendorText.notifyID("chat-42"))
        #expect(VendorText.notifyID("chat-42") != VendorText.notifyID("chat-43"))
        #expect(VendorText.notifyID("x", max: 100) >= 1 && VendorText.notifyID("x", max: 100) <= 100)
    }

    @Test func concurrentSendsShareOneTokenFetch() async throws {
        let clock = TestClock(start: Date(timeIntervalSince1970: 1_800_000_000))
        let calls = Locked(0)
        let cache = AccessTokenCache(label: "Test", clock: clock, logger: .disabled, refreshMargin: 300) {
            calls.withLock { $0 += 1 }
            try? await Task.sleep(nanoseconds: 50_000_000)
            return .token(Secret("t\(calls.value)"), lifetime: 3600)
        }
        let tokens = await withTaskGroup(of: Secret?.self) { group in
            for _ in 0..<20 { group.addTask { try? await cache.token() } }
            var all: [Secret?] = []
            for await t in group { all.append(t) }
            return all
        }
        #expect(calls.value == 1)
        #expect(tokens.allSatisfy { $0 == Secret("t1") })
        // Inside the margin: the current token still serves while one refresh runs.
        clock.advance(by: 3600 - 200)
        #expect(try await cache.token() == Secret("t1"))
        #expect(await eventually(timeout: 5) { await cache.fetched == 2 })
        #expect(try await cache.token() == Secret("t2"))
        // Past expiry with no refresh: a send waits for the new one.
        clock.advance(by: 3601)
        #expect(try await cache.token() == Secret("t3"))
        #expect(calls.value == 3)
    }

    @Test func aRefusedGrantIsASetupFailureAndTheNextCallTriesAgain() async throws {
        let refuse = Locked(true)
        let cache = AccessTokenCache(label: "Test", clock: TestClock(), logger: .disabled, refreshMargin: 300) {
            refuse.value ? .refused("invalid client") : .token(Secret("ok"), lifetime: 60)
        }
        await #expect(throws: TokenError.setup("Test refused the credentials: invalid client")) { try await cache.token() }
        refuse.withLock { $0 = false }
        #expect(try await cache.token() == Secret("ok"))
    }
}

/// A vendor whose answers the test scripts.
final class ScriptedVendor: ChinaPushVendor, @unchecked Sendable {
    let label = "Scripted"
    let maxBatch: Int
    let usesAccessToken: Bool
    let answers: Locked<[VendorAnswer]>
    let groups = Locked<[[String]]>([])
    let fetches = Locked(0)

    init(maxBatch: Int = 1000, usesAccessToken: Bool = true, answers: [VendorAnswer]) {
        self.maxBatch = maxBatch
        self.usesAccessToken = usesAccessToken
        self.answers = Locked(answers)
    }

    func fetchAccessToken() async -> TokenGrant {
        fetches.withLock { $0 += 1 }
        return .token(Secret("tok\(fetches.value)"), lifetime: 3600)
    }

    func send(_ group: [Delivery], accessToken: Secret?) async -> VendorAnswer {
        groups.withLock { $0.append(group.map(\.token)) }
        return answers.withLock { a in
            guard !a.isEmpty else { return .outcomes(group.map { _ in .delivered(receipt: "r") }) }
            return a.removeFirst()
        }
    }
}

@Suite("China push: the shared delivery loop")
struct ChinaPushEngineTests {
    func deliveries(_ tokens: [String], notification: String = "n1", expiration: Int64? = nil) -> [Delivery] {
        tokens.enumerated().map { i, t in
            var d = Delivery(id: Int64(i), notificationID: notification, app: "a", topic: "a", token: t, user: nil, transport: "v",
                             content: NotificationContent(title: "x"))
            d.payload = RenderedPayload(body: Array("{}".utf8), expiration: expiration)
            return d
        }
    }

    @Test func oneNotificationGoesOutInBatchesOfTheVendorsSize() async {
        let vendor = ScriptedVendor(maxBatch: 2, answers: [])
        let engine = ChinaPushEngine(name: "v", vendor: vendor, context: TransportContext(logger: .disabled, clock: TestClock()))
        let outcomes = await engine.deliver(deliveries(["a", "b", "c"]) + deliveries(["d"], notification: "n2"))
        #expect(outcomes.allSatisfy(isDelivered))
        #expect(vendor.groups.value.map { $0.sorted() }.sorted { $0[0] < $1[0] } == [["a", "b"], ["c"], ["d"]])
    }

    @Test func anExpiredAccessTokenIsFetchedAgainAndSentOnce() async {
        let vendor = ScriptedVendor(answers: [.accessTokenExpired("80200003")])
        let engine = ChinaPushEngine(name: "v", vendor: vendor, context: TransportContext(logger: .disabled, clock: TestClock()))
        let outcomes = await engine.deliver(deliveries(["a"]))
        #expect(outcomes.allSatisfy(isDelivered))
        #expect(vendor.fetches.value == 2 && vendor.groups.value.count == 2)
        // Twice in a row: the transport pauses.
        vendor.answers.withLock { $0 = [.accessTokenExpired("x"), .accessTokenExpired("x")] }
        let again = await engine.deliver(deliveries(["a"]))
        #expect(again.allSatisfy(isSetupFailure))
    }

    @Test func aDailyQuotaHoldsTheRouteUntilMidnightUTCPlus8() async {
        // 2026-12-06T10:00:00Z is 18:00 in Beijing: the vendor day ends at 16:00Z.
        let clock = TestClock(start: Date(timeIntervalSince1970: 1_796_551_200))
        let metrics = MetricsRegistry()
        let vendor = ScriptedVendor(answers: [.dailyQuota("200001")])
        let engine = ChinaPushEngine(name: "xiaomi", vendor: vendor, context: TransportContext(logger: .disabled, clock: clock, metrics: metrics))
        let soon = Int64(clock.now.timeIntervalSince1970) + 3600        // expires before midnight
        let later = Int64(clock.now.timeIntervalSince1970) + 86_400      // expires after it
        let outcomes = await engine.deliver(deliveries(["a"], expiration: later))
        let untilMidnight = 6.0 * 3600
        guard case .deferred(let after?, let reason) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(abs(after - untilMidnight) < 1 && reason.contains("midnight UTC+8"))
        #expect(engine.impairment?.contains("daily quota used up on route xiaomi until 2026-12-07T00:00+08:00") == true)
        #expect(metrics.total("herald_vendor_limited_total") >= 1)
        // While the quota is used up, nothing is sent.
        let sent = vendor.groups.value.count
        let held = await engine.deliver(deliveries(["c"], notification: "n3", expiration: soon))
        #expect(held == [.expired])
        #expect(vendor.groups.value.count == sent)
        // System messages have their own quota: they still go.
        var system = deliveries(["s"], notification: "n5")
        system[0].payload.headers[MessageKind.header] = MessageKind.system
        #expect(await engine.deliver(system).allSatisfy(isDelivered))
        #expect(engine.impairment?.hasSuffix("for operational messages") == true)
        // The new day opens the route again.
        clock.advance(by: untilMidnight + 1)
        #expect(engine.impairment == nil)
        #expect(await engine.deliver(deliveries(["d"], notification: "n4")).allSatisfy(isDelivered))
    }

    @Test func rateLimitsRetryAndAreCounted() async {
        let metrics = MetricsRegistry()
        let vendor = ScriptedVendor(usesAccessToken: false, answers: [.rateLimited("10027", retryAfter: nil), .temporary("500", retryAfter: 3)])
        let engine = ChinaPushEngine(name: "v", vendor: vendor, context: TransportContext(logger: .disabled, clock: TestClock(), metrics: metrics))
        let first = await engine.deliver(deliveries(["a", "b"]))
        #expect(first.allSatisfy { if case .retry(nil, let r) = $0 { return r.contains("rate limited") } else { return false } })
        #expect(metrics.value("herald_vendor_limited_total", labels: [("transport", "v"), ("vendor", "Scripted"), ("limit", "rate")]) == 2)
        #expect(await engine.deliver(deliveries(["a"])) == [.retry(after: 3, reason: "500")])
        #expect(vendor.fetches.value == 0)
    }
}
