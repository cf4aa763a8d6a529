import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldSQLite
import HeraldTestKit
import Testing

/// The storage drivers a suite runs against: the same contract, every driver.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgresql

    var testDescription: String { rawValue }

    var driver: any StorageDriver {
        switch self {
        case .sqlite: SQLiteStorageDriver()
        case .postgresql: PostgresStorageDriver()
        }
    }

    /// A configuration naming a fresh database of this driver (a temporary file, or a new
    /// PostgreSQL database on the shared test server).
    func configuration(in dir: TemporaryDirectory) async throws -> HeraldConfiguration {
        let storage = switch self {
        case .sqlite: #"{"path": "\#(dir.file("herald.db"))", "synchronous": "normal"}"#
        case .postgresql: #"{"driver": "postgresql", "url": "\#(try await PostgresServer.shared().createDatabase())", "pool": 4}"#
        }
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        return try HeraldConfiguration.parse(Data(#"{"storage": \#(storage), "apps": {"app": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}}"#.utf8), baseDirectory: dir.path,
                                             registry: registry, environment: [:])
    }
}

/// Runs `body` with storage opened by `backend` on a fresh database; closes it and removes the
/// folder on every path.
func withStorage(_ backend: Backend, _ body: (OpenStorage, HeraldConfiguration) async throws -> Void) async throws {
    let dir = try TemporaryDirectory(prefix: "herald-contract")
    defer { dir.remove() }
    let configuration = try await backend.configuration(in: dir)
    let storage = try await backend.driver.open(configuration, metrics: MetricsRegistry(), exclusive: false)
    do {
        try await body(storage, configuration)
    } catch {
        await storage.close()
        throw error
    }
    await storage.close()
}

/// The ``TokenStore`` and ``DeliveryQueue`` contract, run against SQLite and PostgreSQL.
struct StorageContractTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func notification(_ id: String = UUID().uuidString.lowercased(), tokens: [String] = ["aa01", "aa02"], key: String? = nil,
                      at time: Date? = nil) -> QueuedNotification {
        QueuedNotification(id: id, app: "app", topic: "com.example.app",
                           content: NotificationContent(alert: .text("hi \"there\" \\ {x}"), badge: 1), idempotencyKey: key, createdAt: time ?? t0,
                           deliveries: tokens.map { PlannedDelivery(token: $0, user: "u", transport: "t", messageID: UUID()) })
    }

    func registration(_ token: String, user: String) -> DeviceRegistration {
        DeviceRegistration(app: "app", token: token, user: user, transport: "t", environment: .sandbox)
    }

    @Test(arguments: Backend.allCases)
    func parkedDeliveriesWaitForTheirDeviceAndFallBack(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let problems = try await QueueContract.parkUnparkAndReroute(s.queue, exactDepth: backend == .sqlite)
            #expect(problems == [])
        }
    }

    @Test(arguments: Backend.allCases)
    func aLinkedSubscriptionKeepsItsStreamDeviceAndIsUnparkedByIt(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let problems = try await QueueContract.streamDeviceIsKeptAndUnparksByIt(s.queue)
            #expect(problems == [])
        }
    }

    @Test(arguments: Backend.allCases)
    func parkedDeliveriesBeyondTheInboxBoundExpire(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let problems = try await QueueContract.parkedBeyondTheBoundExpire(s.queue)
            #expect(problems == [])
        }
    }

    @Test(arguments: Backend.allCases)
    func everyAttemptIsOnRecordInOrderAndBounded(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let problems = try await QueueContract.attemptsAreKeptInOrderAndBounded(s.queue)
            #expect(problems == [])
        }
    }

    @Test(arguments: Backend.allCases)
    func registrationMovesAndTheTimestampRule(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let store = s.tokens
            #expect(try await store.register(registration("aa01", user: "ann"), at: t0).change == .created)
            #expect(try await store.register(registration("aa01", user: "ann"), at: t0.addingTimeInterval(1)).change == .updated)
            let moved = try await store.register(registration("aa01", user: "bob"), at: t0.addingTimeInterval(10))
            #expect(moved.change == .moved && moved.previousUser == "ann" && moved.device.user == "bob")
            #expect(moved.device.environment == .sandbox && moved.device.createdAt == t0 && moved.device.updatedAt == t0.addingTimeInterval(10))
            // Apple's timestamp rule: an invalidation older than the last registration is ignored.
            #expect(try await store.invalidate(app: "app", token: "aa01", at: t0.addingTimeInterval(5), reason: "Unregistered") == .keptReRegistered)
            #expect(try await store.invalidate(app: "app", token: "aa01", at: t0.addingTimeInterval(20), reason: "Unregistered") == .invalidated)
            #expect(try await store.invalidate(app: "app", token: "aa01", at: t0.addingTimeInterval(30), reason: "Unregistered") == .alreadyInvalid)
            #expect(try await store.invalidate(app: "app", token: "ffff", at: t0, reason: "x") == .unknown)
            let dead = try #require(try await store.device(app: "app", token: "aa01"))
            #expect(dead.invalidatedAt == t0.addingTimeInterval(20) && dead.invalidationReason == "Unregistered")
            #expect(try await store.devices(app: "app", users: ["bob"], includeInvalidated: false).isEmpty)
            #expect(try await store.devices(app: "app", users: ["bob"], includeInvalidated: true).count == 1)
            // Registering again clears the invalidation.
            _ = try await store.register(registration("aa01", user: "bob"), at: t0.addingTimeInterval(40))
            #expect(try await store.device(app: "app", token: "aa01")?.invalidatedAt == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func registeringPastTheBoundRemovesTheUsersLeastRecentlyRegisteredDevices(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let store = s.tokens
            func register(_ token: String, _ user: String, at seconds: Double, max: Int? = 3, app: String = "app") async throws -> RegistrationResult {
                try await store.register(DeviceRegistration(app: app, token: token, user: user, transport: "t", maxPerUser: max),
                                         at: t0.addingTimeInterval(seconds))
            }
            func tokens(_ user: String, app: String = "app") async throws -> [String] {
                try await store.devices(app: app, users: [user], includeInvalidated: true).map(\.token)
            }
            for (i, token) in ["aa01", "aa02", "aa03"].enumerated() {
                #expect(try await register(token, "ann", at: Double(i)).removed == [])
            }
            // Bob and another app at the bound: never touched by ann's registrations.
            for token in ["bb01", "bb02", "bb03"] { _ = try await register(token, "bob", at: 0) }
            for token in ["cc01", "cc02", "cc03"] { _ = try await register(token, "ann", at: 0, app: "other") }
            // The fourth: created, and the least recently registered goes in the same call.
            let fourth = try await register("aa04", "ann", at: 10)
            #expect(fourth.change == .created && fourth.removed == ["aa01"])
            #expect(try await tokens("ann") == ["aa04", "aa03", "aa02"])
            // Registering a known device again refreshes it and removes nothing.
            #expect(try await register("aa02", "ann", at: 11).removed == [])
            #expect(try await register("aa05", "ann", at: 12).removed == ["aa03"])
            #expect(try await tokens("ann") == ["aa05", "aa02", "aa04"])
            // Invalidated devices count too (they are rows).
            _ = try await store.invalidate(app: "app", token: "aa04", at: t0.addingTimeInterval(13), reason: "Unregistered")
            // A device moved from another user counts for its new one.
            let moved = try await register("bb01", "ann", at: 14)
            #expect(moved.change == .moved && moved.previousUser == "bob" && moved.removed == ["aa04"])
            #expect(try await tokens("ann") == ["bb01", "aa05", "aa02"])
            #expect(Set(try await tokens("bob")) == ["bb02", "bb03"])
            #expect(try await tokens("ann", app: "other").count == 3)
            // A lower bound removes every device beyond it at once, least recently registered first.
            #expect(try await register("aa06", "ann", at: 15, max: 2).removed == ["aa02", "aa05"])
            #expect(try await tokens("ann") == ["aa06", "bb01"])
            // No bound: nothing removed.
            #expect(try await register("aa07", "ann", at: 16, max: nil).removed == [])
            #expect(try await tokens("ann").count == 3)
        }
    }

    @Test(arguments: Backend.allCases)
    func listingsLookupsPruneAndUnregister(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let store = s.tokens
            _ = try await store.register(registration("aa01", user: "ann"), at: t0)
            _ = try await store.register(registration("aa02", user: "ann"), at: t0.addingTimeInterval(1))
            _ = try await store.register(registration("aa03", user: "o'brien \"q\""), at: t0)
            let ann = try await store.devices(app: "app", users: ["ann", "o'brien \"q\"", "nobody"], includeInvalidated: false)
            #expect(ann.map(\.token) == ["aa02", "aa01", "aa03"])   // by user, most recent first
            #expect(try await store.devices(app: "app", tokens: ["aa03", "aa01", "ffff"]).map(\.token).sorted() == ["aa01", "aa03"])
            #expect(try await store.listDevices(app: "app", user: nil, limit: 2).count == 2)
            #expect(try await store.listDevices(app: nil, user: "ann", limit: nil).count == 2)
            _ = try await store.invalidate(app: "app", token: "aa01", at: t0.addingTimeInterval(100), reason: "BadDeviceToken")
            #expect(try await store.prune(invalidatedBefore: t0.addingTimeInterval(50)) == 0)
            #expect(try await store.prune(invalidatedBefore: t0.addingTimeInterval(200)) == 1)
            #expect(try await store.unregister(app: "app", token: "aa02"))
            #expect(try await !store.unregister(app: "app", token: "aa02"))
            #expect(try await store.listDevices(app: "app", user: nil, limit: nil).map(\.token) == ["aa03"])
        }
    }

    @Test(arguments: Backend.allCases)
    func claimCompleteAndStatus(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let q = s.queue
            let n = notification("n1")
            #expect(try await q.enqueue(n, idempotencySince: t0) == EnqueueReceipt(id: "n1", deliveries: 2, replayed: false))
            #expect(try await q.nextDue(transport: "t") == t0)
            #expect(try await q.claim(transport: "other", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(30)).isEmpty)
            let claimed = try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(30))
            #expect(claimed.map(\.delivery.token) == ["aa01", "aa02"])
            #expect(claimed.allSatisfy { $0.delivery.attempt == 1 && $0.delivery.notificationID == "n1" && $0.acceptedAt == t0 })
            #expect(claimed[0].delivery.content == n.content)
            #expect(claimed[0].delivery.messageID == n.deliveries[0].messageID)
            #expect(try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(30)).isEmpty)
            try await q.complete([.finished(claimed[0].delivery, .delivered, reason: nil),
                                  .finished(claimed[1].delivery, .invalidToken, reason: "BadDeviceToken")], now: t0.addingTimeInterval(1))
            let status = try #require(try await q.status(notificationID: "n1"))
            #expect(status.app == "app" && status.createdAt == t0)
            #expect(status.deliveries.map(\.state) == [.delivered, .invalidToken])
            #expect(status.deliveries[1].lastReason == "BadDeviceToken" && status.deliveries[1].attempts == 1)
            #expect(try await q.status(notificationID: "nope") == nil)
            #expect(try await q.nextDue(transport: "t") == nil)
            try await q.ping()
        }
    }

    @Test(arguments: Backend.allCases)
    func aStaleClaimCannotOverwriteTheNextOne(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let q = s.queue
            _ = try await q.enqueue(notification("n1", tokens: ["aa01"]), idempotencySince: t0)
            let first = try await q.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(30))
            // The lease runs out: the delivery goes back and is claimed again (attempt 2).
            #expect(try await q.reclaimExpiredLeases(now: t0.addingTimeInterval(10)) == 0)
            #expect(try await q.reclaimExpiredLeases(now: t0.addingTimeInterval(31)) == 1)
            let second = try await q.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(31), leaseUntil: t0.addingTimeInterval(60))
            #expect(second.map(\.delivery.attempt) == [2])
            // The first claimant answers late: fenced off, nothing changes.
            try await q.complete([.finished(first[0].delivery, .failed, reason: "late")], now: t0.addingTimeInterval(32))
            try await q.renewLeases(first, until: t0.addingTimeInterval(1000))
            #expect(try await q.status(notificationID: "n1")?.deliveries.map(\.state) == [.sent])
            #expect(try await q.reclaimExpiredLeases(now: t0.addingTimeInterval(61)) == 1)   // the stale renewal did not extend it
            let third = try await q.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(61), leaseUntil: t0.addingTimeInterval(90))
            try await q.renewLeases(third, until: t0.addingTimeInterval(200))
            #expect(try await q.reclaimExpiredLeases(now: t0.addingTimeInterval(100)) == 0)   // renewed
            try await q.complete([.finished(third[0].delivery, .delivered, reason: nil)], now: t0.addingTimeInterval(101))
            let d = try #require(try await q.status(notificationID: "n1")?.deliveries.first)
            #expect(d.state == .delivered && d.attempts == 3)
        }
    }

    @Test(arguments: Backend.allCases)
    func retriesAndGivenBackAttempts(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let q = s.queue
            _ = try await q.enqueue(notification("n1", tokens: ["aa01"]), idempotencySince: t0)
            var c = try await q.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(30))
            try await q.complete([.requeued(c[0].delivery, at: t0.addingTimeInterval(5), reason: "paused", countsAttempt: false)], now: t0)
            #expect(try await q.nextDue(transport: "t") == t0.addingTimeInterval(5))
            #expect(try await q.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(4), leaseUntil: t0.addingTimeInterval(30)).isEmpty)
            c = try await q.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(5), leaseUntil: t0.addingTimeInterval(30))
            #expect(c.map(\.delivery.attempt) == [1])   // the paused attempt was given back
            try await q.complete([.requeued(c[0].delivery, at: t0.addingTimeInterval(6), reason: "TooManyRequests")], now: t0.addingTimeInterval(5))
            c = try await q.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(6), leaseUntil: t0.addingTimeInterval(30))
            #expect(c.map(\.delivery.attempt) == [2])
            let d = try #require(try await q.status(notificationID: "n1")?.deliveries.first)
            #expect(d.state == .sent && d.lastReason == "TooManyRequests")
        }
    }

    @Test(arguments: Backend.allCases)
    func idempotencyKeysReplayWithinTheWindow(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let q = s.queue
            #expect(try await q.enqueue(notification("n1", key: "k"), idempotencySince: t0).replayed == false)
            let replay = try await q.enqueue(notification("n2", tokens: ["x"], key: "k"), idempotencySince: t0)
            #expect(replay == EnqueueReceipt(id: "n1", deliveries: 2, replayed: true))
            #expect(try await q.status(notificationID: "n2") == nil)
            #expect(try await q.receipt(app: "app", idempotencyKey: "k", since: t0) == replay)
            #expect(try await q.receipt(app: "app", idempotencyKey: "k", since: t0.addingTimeInterval(1)) == nil)
            // Past the window the key is free again.
            let later = t0.addingTimeInterval(100)
            #expect(try await q.enqueue(notification("n3", key: "k", at: later), idempotencySince: t0.addingTimeInterval(50))
                    == EnqueueReceipt(id: "n3", deliveries: 2, replayed: false))
        }
    }

    @Test(arguments: Backend.allCases)
    func pruneRemovesOnlyFinishedOldNotifications(_ backend: Backend) async throws {
        try await withStorage(backend) { s, _ in
            let q = s.queue
            _ = try await q.enqueue(notification("done", tokens: ["aa01"]), idempotencySince: t0)
            _ = try await q.enqueue(notification("open", tokens: ["aa02"], at: t0.addingTimeInterval(1)), idempotencySince: t0)
            let c = try await q.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(30))
            #expect(c.map(\.delivery.notificationID) == ["done"])
            try await q.complete([.finished(c[0].delivery, .delivered, reason: nil)], now: t0)
            #expect(try await q.prune(createdBefore: t0) == 0)
            #expect(try await q.prune(createdBefore: t0.addingTimeInterval(10)) == 1)
            #expect(try await q.status(notificationID: "done") == nil)
            #expect(try await q.status(notificationID: "open") != nil)
        }
    }
}
