import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLocalTransport
import HeraldSQLite
import HeraldTestKit
import Testing

/// Presence as a test sets it.
final class FixedPresence: Presence, Sendable {
    let devices: [String: Set<String>]
    init(_ devices: [String: Set<String>]) { self.devices = devices }
    func connectedDevices(app: String, users: [String]) -> [String: Set<String>] {
        devices.filter { users.contains($0.key) }
    }
}

/// An app with a push route (`prod`) and a local route (`live`), under each foreground policy.
final class LocalFixture: Sendable {
    let directory: TemporaryDirectory
    let store: SQLiteTokenStore
    let configuration: HeraldConfiguration

    init(policy: ForegroundPolicy) throws {
        directory = try TemporaryDirectory()
        store = try SQLiteTokenStore(path: directory.file("herald.db"))
        var registry = testRegistry()
        registry.register(LocalTransport.self)
        configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"app": {"routes": ["prod", "live"], "foreground": "\(policy.rawValue)",
                          "clientSecret": "0123456789abcdef0123456789abcdef"}},
         "transports": {"prod": {"type": "fake-apns", "environment": "production", "keyId": "K"},
                        "live": {"type": "local"}}}
        """.utf8), baseDirectory: directory.path, registry: registry, environment: [:])
    }

    deinit { directory.remove() }

    func token(_ n: Int) -> String { String(format: "%064x", n) }

    func register(_ n: Int, user: String, transport: String = "prod") async throws {
        _ = try await store.register(DeviceRegistration(app: "app", token: token(n), user: user, transport: transport,
                                                        environment: .production), at: Date())
    }

    /// (token number, transport, fallback) of each planned delivery, sorted.
    func plan(users: [String], connected: [String: Set<Int>]) async throws -> [String] {
        let presence = FixedPresence(connected.mapValues { Set($0.map(token)) })
        let plan = try await FanOut(configuration: configuration, store: store, presence: presence)
            .plan(NotificationRequest(app: "app", users: users, tokens: [], content: NotificationContent(alert: .text("hi"))))
        return plan.deliveries.map { d in
            let n = Int(d.token, radix: 16)!
            return "\(n) \(d.transport) \(d.fallback ?? "-")"
        }.sorted()
    }
}

@Suite struct LocalRoutingTests {
    @Test func localFirstSendsAConnectedDeviceOnlyItsStreamAndTheOthersTheirPushRoute() async throws {
        let f = try LocalFixture(policy: .localFirst)
        try await f.register(1, user: "alice")
        try await f.register(2, user: "alice")
        #expect(try await f.plan(users: ["alice"], connected: ["alice": [1]]) == ["1 live prod", "2 prod live"])
    }

    /// A browser's subscription (device 1) linked to its page's installation id (9), as
    /// `POST /v1/stream/subscription` links it: present when the stream of 9 is, planned once.
    @Test func localFirstPlansALinkedSubscriptionByItsStreamDeviceAndNotItsInstallationIDAgain() async throws {
        let f = try LocalFixture(policy: .localFirst)
        _ = try await f.store.register(DeviceRegistration(app: "app", token: f.token(1), user: "alice", transport: "prod",
                                                          attributes: DeviceAttributes(["environment": "production",
                                                                                        DeviceAttributes.streamDevice: f.token(9)])), at: Date())
        func plan(_ connected: Set<Int>) async throws -> [String] {
            let presence = FixedPresence(["alice": Set(connected.map(f.token))])
            let plan = try await FanOut(configuration: f.configuration, store: f.store, presence: presence)
                .plan(NotificationRequest(app: "app", users: ["alice"], tokens: [], content: NotificationContent(alert: .text("hi"))))
            return plan.deliveries.map { d in
                "\(Int(d.token, radix: 16)!) \(d.transport) \(d.fallback ?? "-") \(d.streamDevice.map { String(Int($0, radix: 16)!) } ?? "-")"
            }.sorted()
        }
        // Open tab: the stream only, one delivery, the subscription's, keyed by the tab.
        #expect(try await plan([9]) == ["1 live prod 9"])
        // Closed tab: the push route, falling back to the tab's stream (its inbox).
        #expect(try await plan([]) == ["1 prod live 9"])
        // Another connected device the store does not know is still planned.
        #expect(try await plan([9, 8]) == ["1 live prod 9", "8 live - -"])
    }

    @Test func localAndPushSendsAConnectedDeviceBoth() async throws {
        let f = try LocalFixture(policy: .localAndPush)
        try await f.register(1, user: "alice")
        try await f.register(2, user: "alice")
        #expect(try await f.plan(users: ["alice"], connected: ["alice": [1]]) == ["1 live -", "1 prod -", "2 prod live"])
    }

    @Test func localOnlySendsEveryDeviceItsStream() async throws {
        let f = try LocalFixture(policy: .localOnly)
        try await f.register(1, user: "alice")
        try await f.register(2, user: "alice")
        #expect(try await f.plan(users: ["alice"], connected: ["alice": [1]]) == ["1 live -", "2 live -"])
    }

    @Test func pushOnlyIgnoresPresence() async throws {
        let f = try LocalFixture(policy: .pushOnly)
        try await f.register(1, user: "alice")
        #expect(try await f.plan(users: ["alice"], connected: ["alice": [1]]) == ["1 prod -"])
    }

    @Test func aDeviceWithNoPushRouteAndAConnectedUnknownDeviceGetTheStream() async throws {
        let f = try LocalFixture(policy: .localFirst)
        try await f.register(3, user: "alice", transport: "live")   // a browser, registered
        // 9: connected, never registered (an installation id); bob's device is not alice's.
        #expect(try await f.plan(users: ["alice"], connected: ["alice": [9], "bob": [8]]) == ["3 live -", "9 live -"])
    }

    @Test func withoutPresenceEveryPolicyPlansAsPushOnly() async throws {
        let f = try LocalFixture(policy: .localOnly)
        try await f.register(1, user: "alice")
        let plan = try await FanOut(configuration: f.configuration, store: f.store)
            .plan(NotificationRequest(app: "app", users: ["alice"], tokens: [], content: NotificationContent(alert: .text("hi"))))
        #expect(plan.deliveries.map(\.transport) == ["prod"])
        #expect(plan.deliveries.map(\.fallback) == [nil])
    }
}

@Suite struct LocalOutcomePolicyTests {
    let accepted = Date(timeIntervalSince1970: 1_000_000)
    let policy = OutcomePolicy(retry: RetryPolicy(), local: ["app": LocalDeliveryRules(presenceGrace: 10, inboxTTL: 3600)])

    func delivery(fallback: String?) -> Delivery {
        Delivery(id: 1, notificationID: "n", app: "app", topic: "app", token: "ab", user: "alice", transport: "live", content: NotificationContent(alert: .text("hi")), fallback: fallback)
    }

    func action(_ outcome: DeliveryOutcome, fallback: String?, at seconds: TimeInterval) -> DeliveryAction {
        policy.action(for: outcome, delivery: delivery(fallback: fallback), acceptedAt: accepted,
                      now: accepted.addingTimeInterval(seconds), random: 0)
    }

    @Test func aDeviceThatJustLeftIsWaitedForDuringThePresenceGrace() {
        let closed = accepted.addingTimeInterval(5)
        guard case .park(let until, _) = action(.notConnected(since: closed), fallback: "prod", at: 6) else {
            Issue.record("expected park")
            return
        }
        #expect(until == closed.addingTimeInterval(10))
    }

    @Test func pastTheGraceADeliveryWithAFallbackIsRerouted() {
        #expect(action(.notConnected(since: accepted), fallback: "prod", at: 11)
                    == .reroute(to: "prod", reason: "device not connected; sent through prod"))
    }

    @Test func withoutAFallbackItWaitsInTheInboxUntilTheTTLThenExpires() {
        #expect(action(.notConnected(since: nil), fallback: nil, at: 1)
                    == .park(until: accepted.addingTimeInterval(3600), reason: "in the inbox until the device connects"))
        guard case .finish(.expired, _) = action(.notConnected(since: nil), fallback: nil, at: 3600) else {
            Issue.record("expected expired")
            return
        }
    }

    @Test func aRejectedPushWithAnInboxFallbackIsKeptForTheInbox() {
        #expect(action(.rejected(reason: "BadTopic"), fallback: "live", at: 1) == .reroute(to: "live", reason: "BadTopic; kept for live"))
        guard case .finish(.rejected, _) = action(.rejected(reason: "BadTopic"), fallback: nil, at: 1) else {
            Issue.record("expected rejected")
            return
        }
    }
}

@Suite struct ParkedQueueTests {
    @Test func theInMemoryQueueParksUnparksAndReroutes() async throws {
        #expect(try await QueueContract.parkUnparkAndReroute(MemoryDeliveryQueue(onFinal: { _ in })) == [])
    }

    @Test func theInMemoryQueueKeepsAStreamDeviceAndUnparksByIt() async throws {
        #expect(try await QueueContract.streamDeviceIsKeptAndUnparksByIt(MemoryDeliveryQueue(onFinal: { _ in })) == [])
    }

    @Test func theInMemoryQueueExpiresParkedBeyondTheBound() async throws {
        #expect(try await QueueContract.parkedBeyondTheBoundExpire(MemoryDeliveryQueue(onFinal: { _ in })) == [])
    }

    @Test func theInMemoryQueueKeepsEachDeliverysAttempts() async throws {
        #expect(try await QueueContract.attemptsAreKeptInOrderAndBounded(MemoryDeliveryQueue(onFinal: { _ in })) == [])
    }
}
