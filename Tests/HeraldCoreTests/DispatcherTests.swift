import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// Dispatcher behaviour with a real SQLite store, a scripted transport and the test clock.
/// A token store and configuration in a temporary folder, removed when the fixture goes.
final class DispatchFixture: Sendable {
    let directory: TemporaryDirectory
    let store: SQLiteTokenStore
    let clock = TestClock()
    let configuration: HeraldConfiguration

    init(maxDevicesPerUser: Int = 100, routes: String = #"["prod", "sand"]"#) throws {
        directory = try TemporaryDirectory()
        store = try SQLiteTokenStore(path: directory.file("herald.db"))
        configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": \(routes), "maxDevicesPerUser": \(maxDevicesPerUser)}},
         "transports": {"prod": {"type": "fake-apns", "environment": "production", "keyId": "K"},
                        "sand": {"type": "fake-apns", "environment": "sandbox", "keyId": "K"}},
         "delivery": {"maxAttempts": 4, "initialBackoff": "1s", "maxBackoff": "1m", "jitter": 0}}
        """.utf8), baseDirectory: directory.path, registry: testRegistry(), environment: [:])
    }

    deinit { directory.remove() }

    func token(_ n: Int) -> String { String(format: "%064x", n) }

    @discardableResult
    func register(_ n: Int, user: String, environment: APNsEnvironment = .production, at seconds: TimeInterval = 0) async throws -> Device {
        let transport = environment == .production ? "prod" : "sand"
        return try await store.register(DeviceRegistration(app: "com.example.app", token: token(n), user: user,
                                                           transport: transport, environment: environment),
                                        at: clock.now.addingTimeInterval(seconds)).device
    }

    func dispatcher(_ transports: [ScriptedTransport], unavailable: [String: String] = [:], batchSize: Int = 500,
                    metrics: MetricsRegistry = MetricsRegistry()) -> Dispatcher {
        Dispatcher(configuration: configuration,
                   tuning: .init(retry: configuration.delivery.retry, batchSize: batchSize, concurrentBatches: 2),
                   store: store, transports: Dictionary(uniqueKeysWithValues: transports.map { ($0.name, $0 as any Transport) }),
                   unavailable: unavailable, clock: clock, logger: .disabled, metrics: metrics, random: { 0.5 })
    }

    func request(users: [String] = [], tokens: [String] = [], content: NotificationContent = NotificationContent(alert: .text("hi"))) -> NotificationRequest {
        NotificationRequest(app: "com.example.app", users: users, tokens: tokens, content: content)
    }
}

@Suite struct DispatcherTests {
    @Test func fansOutToEveryDeviceOnceAndRoutesByEnvironment() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        try await f.register(2, user: "alice", environment: .sandbox)
        try await f.register(3, user: "bob")
        try await f.register(4, user: "carol")
        let prod = ScriptedTransport(name: "prod", clock: f.clock)
        let sand = ScriptedTransport(name: "sand", clock: f.clock)
        // alice twice, bob's token also as a raw token: each device once.
        let reports = try await f.dispatcher([prod, sand]).send(f.request(users: ["alice", "bob", "alice"], tokens: [f.token(3).uppercased()]))
        #expect(reports.count == 3)
        #expect(reports.allSatisfy { $0.outcome == .delivered && $0.attempts == 1 })
        #expect(Set(prod.attempts.map(\.delivery.token)) == [f.token(1), f.token(3)])
        #expect(sand.attempts.map(\.delivery.token) == [f.token(2)])
        #expect(Set(reports.map(\.user)) == ["alice", "bob"])
        let plan = try await f.dispatcher([prod, sand]).plan(f.request(users: ["alice", "bob"], tokens: [f.token(3)]))
        #expect(plan.duplicates == 1)
        // One payload for all deliveries, with the app's topic.
        #expect(Set(prod.attempts.map(\.delivery.payload.body)).count == 1)
        #expect(prod.attempts.allSatisfy { $0.delivery.topic == "com.example.app" })
    }

    @Test func perUserLimitKeepsTheMostRecentlyRegistered() async throws {
        let f = try DispatchFixture(maxDevicesPerUser: 2)
        try await f.register(1, user: "alice", at: 0)
        try await f.register(2, user: "alice", at: 10)
        try await f.register(3, user: "alice", at: 20)
        let prod = ScriptedTransport(name: "prod", clock: f.clock)
        let plan = try await f.dispatcher([prod]).plan(f.request(users: ["alice"]))
        #expect(plan.skippedOverLimit == 1)
        #expect(Set(plan.deliveries.map(\.token)) == [f.token(2), f.token(3)])
    }

    @Test func rawTokensUnknownToTheStoreUseTheDefaultRoute() async throws {
        let f = try DispatchFixture()
        let prod = ScriptedTransport(name: "prod", clock: f.clock)
        let sand = ScriptedTransport(name: "sand", clock: f.clock)
        var request = f.request(tokens: ["<\(f.token(9))>", "not-a-token"])
        let reports = try await f.dispatcher([prod, sand]).send(request)
        #expect(prod.attempts.map(\.delivery.token) == [f.token(9)])
        let bad = try #require(reports.first { $0.token == "not-a-token" })
        #expect(bad.outcome == .rejected)
        #expect(bad.reason?.hasPrefix("tokens[1]: no route of app com.example.app takes it: prod: token: device token has a character that is not hexadecimal: \"n\"") == true, "\(bad.reason ?? "")")
        request.tokens = [f.token(8)]
        request.attributes = .apns(.sandbox)
        _ = try await f.dispatcher([prod, sand]).send(request)
        #expect(sand.attempts.map(\.delivery.token) == [f.token(8)])
    }

    @Test func unknownAppAndEmptyTargetsAreErrors() async throws {
        let f = try DispatchFixture()
        let d = f.dispatcher([])
        await #expect(throws: DispatchError.unknownApp("com.nope", known: ["com.example.app"])) {
            try await d.send(NotificationRequest(app: "com.nope", users: ["a"], content: NotificationContent(alert: .text("x"))))
        }
        await #expect(throws: DispatchError.invalidRequest(field: "users", message: "give at least one user or token")) {
            try await d.send(f.request())
        }
    }

    @Test func retriesFollowTheBackoffOnTheTestClock() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        let start = f.clock.now
        let prod = ScriptedTransport(name: "prod", clock: f.clock) { d in
            d.attempt < 3 ? .retry(after: nil, reason: "ServiceUnavailable") : .delivered(receipt: "confirmed-id")
        }
        let dispatcher = f.dispatcher([prod])
        let task = Task { try await dispatcher.send(f.request(users: ["alice"])) }
        // First attempt at once; the second waits for 1 s of test time.
        #expect(await f.clock.waitForSleepers(1))
        #expect(prod.attempts.count == 1)
        #expect(f.clock.nextDeadline == start.addingTimeInterval(1))
        f.clock.advance(by: 0.9)
        #expect(prod.attempts.count == 1)
        f.clock.advance(by: 0.1)
        #expect(await f.clock.waitForSleepers(1))
        #expect(prod.attempts.count == 2)
        #expect(f.clock.nextDeadline == start.addingTimeInterval(3))
        f.clock.advance(by: 2)
        let reports = try await task.value
        #expect(prod.attempts.map(\.time) == [start, start.addingTimeInterval(1), start.addingTimeInterval(3)])
        #expect(reports.map(\.outcome) == [.delivered])
        #expect(reports[0].attempts == 3)
        #expect(reports[0].receipt == "confirmed-id")
    }

    @Test func retriesAreBoundedAndNeverPastExpiration() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        try await f.register(2, user: "bob")
        let prod = ScriptedTransport(name: "prod", clock: f.clock) { _ in .retry(after: nil, reason: "InternalServerError") }
        let dispatcher = f.dispatcher([prod])
        var content = NotificationContent(alert: .text("x"))
        let first = content
        let task = Task { try await dispatcher.send(f.request(users: ["alice"], content: first)) }
        for _ in 0..<3 {
            #expect(await f.clock.waitForSleepers(1))
            f.clock.advance(to: try #require(f.clock.nextDeadline))
        }
        let reports = try await task.value
        #expect(reports[0].outcome == .failed)
        #expect(reports[0].reason == "InternalServerError (gave up after 4 attempts)")
        #expect(prod.attempts.count == 4)

        content.apns.expiration = Int64(f.clock.now.timeIntervalSince1970) + 2
        let expiring = content
        let second = Task { try await dispatcher.send(f.request(users: ["bob"], content: expiring)) }
        #expect(await f.clock.waitForSleepers(1))
        f.clock.advance(by: 1)
        let expired = try await second.value
        #expect(expired[0].outcome == .expired)
        #expect(expired[0].attempts == 2)  // at t+0 and t+1; t+3 would be past the expiration
    }

    @Test func expiredNotificationsAreNotSent() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        let prod = ScriptedTransport(name: "prod", clock: f.clock)
        var content = NotificationContent(alert: .text("x"))
        content.apns.expiration = Int64(f.clock.now.timeIntervalSince1970) - 1
        let reports = try await f.dispatcher([prod]).send(f.request(users: ["alice"], content: content))
        #expect(reports.map(\.outcome) == [.expired])
        #expect(prod.attempts.isEmpty)
    }

    @Test func invalidTokensAreRetiredWithTheTimestampRule() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice", at: 0)
        try await f.register(2, user: "alice", at: 100)   // registered again after Apple's timestamp
        let appleTime = f.clock.now.addingTimeInterval(50)
        let prod = ScriptedTransport(name: "prod", clock: f.clock) { _ in .tokenInvalid(since: appleTime, reason: "Unregistered") }
        let metrics = MetricsRegistry()
        let reports = try await f.dispatcher([prod], metrics: metrics).send(f.request(users: ["alice"]))
        #expect(reports.allSatisfy { $0.outcome == .invalidToken && $0.reason == "Unregistered" })
        let first = try #require(try await f.store.device(app: "com.example.app", token: f.token(1)))
        #expect(first.invalidatedAt == appleTime)
        #expect(first.invalidationReason == "Unregistered")
        let second = try #require(try await f.store.device(app: "com.example.app", token: f.token(2)))
        #expect(second.invalidatedAt == nil)
        #expect(metrics.value("herald_token_invalidations_total", labels: [("app", "com.example.app"), ("result", "invalidated")]) == 1)
        #expect(metrics.value("herald_token_invalidations_total", labels: [("app", "com.example.app"), ("result", "keptReRegistered")]) == 1)
        // The invalidated device is no longer fanned out to.
        let plan = try await f.dispatcher([prod]).plan(f.request(users: ["alice"]))
        #expect(plan.deliveries.map(\.token) == [f.token(2)])
    }

    @Test func rejectedIsFinalAndCounted() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        let prod = ScriptedTransport(name: "prod", clock: f.clock) { _ in .rejected(reason: "PayloadTooLarge") }
        let metrics = MetricsRegistry()
        let reports = try await f.dispatcher([prod], metrics: metrics).send(f.request(users: ["alice"]))
        #expect(reports.map(\.outcome) == [.rejected])
        #expect(prod.attempts.count == 1)
        #expect(metrics.value("herald_deliveries_total", labels: [("transport", "prod"), ("outcome", "rejected"), ("reason", "PayloadTooLarge")]) == 1)
    }

    @Test func anUnavailableTransportFailsOnlyItsOwnDeliveries() async throws {
        let f = try DispatchFixture()
        try await f.register(1, user: "alice")
        try await f.register(2, user: "alice", environment: .sandbox)
        let sand = ScriptedTransport(name: "sand", clock: f.clock)
        let reports = try await f.dispatcher([sand], unavailable: ["prod": "cannot read key"]).send(f.request(users: ["alice"]))
        #expect(reports.first { $0.token == f.token(1) }?.outcome == .failed)
        #expect(reports.first { $0.token == f.token(1) }?.reason == "transport prod is not available: cannot read key")
        #expect(reports.first { $0.token == f.token(2) }?.outcome == .delivered)
    }

    @Test func batchesRespectTheBatchSize() async throws {
        let f = try DispatchFixture()
        for n in 1...25 { try await f.register(n, user: "u\(n % 5)") }
        let prod = ScriptedTransport(name: "prod", clock: f.clock, batchSize: 10)
        let reports = try await f.dispatcher([prod], batchSize: 8).send(f.request(users: (0..<5).map { "u\($0)" }))
        #expect(reports.count == 25)
        #expect(prod.calls.map(\.deliveries.count).sorted() == [1, 8, 8, 8])
    }

    @Test func progressIsReportedPerDevice() async throws {
        let f = try DispatchFixture()
        for n in 1...5 { try await f.register(n, user: "alice") }
        let seen = Locked<[String]>([])
        let prod = ScriptedTransport(name: "prod", clock: f.clock)
        _ = try await f.dispatcher([prod]).send(f.request(users: ["alice"], tokens: ["zz"])) { report in
            seen.withLock { $0.append(report.outcome.rawValue) }
        }
        #expect(seen.value.sorted() == ["delivered", "delivered", "delivered", "delivered", "delivered", "rejected"])
    }

    /// `herald send` runs the daemon's engine: a transport whose setup is refused pauses, and with
    /// nobody there to fix it during a CLI run its deliveries fail with the reason.
    @Test func aPausedTransportFailsTheRestOfTheRunWithTheReason() async throws {
        let f = try DispatchFixture()
        for n in 1...3 { try await f.register(n, user: "alice") }
        let prod = ScriptedTransport(name: "prod", clock: f.clock, batchSize: 1) { _ in .setupFailure(reason: "BadCertificate: renew it") }
        let reports = try await f.dispatcher([prod], batchSize: 1).send(f.request(users: ["alice"]))
        #expect(reports.count == 3)
        #expect(reports.allSatisfy { $0.outcome == .failed && $0.reason == "transport prod paused: BadCertificate: renew it" })
        #expect(prod.attempts.count < 3)
    }
}
