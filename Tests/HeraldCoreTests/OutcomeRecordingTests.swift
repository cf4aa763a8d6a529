import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// A queue whose first `failures` outcome writes fail as a stopped database's do.
final class FlakyOutcomeQueue: DeliveryQueue {
    let inner: MemoryDeliveryQueue
    private let remaining: Locked<Int>
    private let counts = Locked((attempts: 0, recorded: 0))

    init(failures: Int) {
        inner = MemoryDeliveryQueue(onFinal: { _ in })
        remaining = Locked(failures)
    }

    /// Outcome writes tried, and those that went through.
    var completeCalls: (attempts: Int, recorded: Int) { counts.withLock { $0 } }

    func complete(_ completions: [DeliveryCompletion], now: Date) async throws {
        let fail: Bool = remaining.withLock { r in
            defer { r -= 1 }
            return r > 0
        }
        counts.withLock { $0.attempts += 1 }
        if fail { throw StoreUnavailableError("PostgreSQL is unavailable (test): connection refused") }
        try await inner.complete(completions, now: now)
        counts.withLock { $0.recorded += 1 }
    }

    func enqueue(_ n: QueuedNotification, idempotencySince: Date) async throws -> EnqueueReceipt {
        try await inner.enqueue(n, idempotencySince: idempotencySince)
    }
    func receipt(app: String, idempotencyKey: String, since: Date) async throws -> EnqueueReceipt? { nil }
    func claim(transport: String, limit: Int, now: Date, leaseUntil: Date) async throws -> [ClaimedDelivery] {
        try await inner.claim(transport: transport, limit: limit, now: now, leaseUntil: leaseUntil)
    }
    func interrupted(transport: String) async throws -> [ClaimedDelivery] { [] }
    func renewLeases(_ claims: [ClaimedDelivery], until: Date) async throws { try await inner.renewLeases(claims, until: until) }
    func unpark(transport: String, token: String, now: Date) async throws -> Int {
        try await inner.unpark(transport: transport, token: token, now: now)
    }
    func expireParked(transport: String, app: String, keepPerUser: Int, now: Date) async throws -> Int {
        try await inner.expireParked(transport: transport, app: app, keepPerUser: keepPerUser, now: now)
    }
    func reclaimExpiredLeases(now: Date) async throws -> Int { try await inner.reclaimExpiredLeases(now: now) }
    func nextDue(transport: String) async throws -> Date? { try await inner.nextDue(transport: transport) }
    func status(notificationID: String) async throws -> NotificationStatus? { try await inner.status(notificationID: notificationID) }
    var waitingAccepts: Int { 0 }
    func depth() -> [String: QueueDepth] { inner.depth() }
    func prune(createdBefore cutoff: Date) async throws -> Int { 0 }
    func ping() async throws {}
    func close() async { await inner.close() }
}

/// The worker keeps an answered batch's outcomes while the store refuses them and writes them
/// when it answers again: the peer's answer is never lost, so the delivery is not sent twice.
@Suite struct OutcomeRecordingTests {
    @Test func outcomesRefusedByTheStoreAreWrittenLaterAndTheDeliveryIsNotSentAgain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let clock = TestClock()
        let queue = FlakyOutcomeQueue(failures: 4)
        let transport = ScriptedTransport(name: "t", clock: clock)
        let store = try SQLiteTokenStore(path: dir.file("herald.db"))
        let lease: TimeInterval = 30
        let worker = TransportWorker(
            name: "t", transport: transport, configuration: ScriptedTransport.Configuration(), queue: queue,
            invalidator: TokenInvalidator(store: store, logger: .disabled, metrics: MetricsRegistry()),
            clock: clock, logger: .disabled, metrics: DeliveryMetrics(registry: MetricsRegistry()), alreadyStarted: true,
            random: { 0 },
            settings: { .init(retry: RetryPolicy(), batchSize: 10, concurrency: 1, deadline: lease, lease: lease) })
        _ = try await queue.enqueue(QueuedNotification(
            id: "n1", app: "app", topic: "app", content: NotificationContent(alert: .text("hi")), idempotencyKey: nil, createdAt: clock.now,
            deliveries: [PlannedDelivery(token: String(repeating: "a", count: 64), user: "u", transport: "t", 
                                         messageID: UUIDSource.random())]), idempotencySince: clock.now)
        worker.start()
        worker.wake()
        #expect(await within { queue.completeCalls.attempts == 1 })
        #expect(transport.calls.count == 1)
        // Each failure waits on the test clock before the next write: advance through the backoff.
        for failed in 1...4 {
            #expect(await within { queue.completeCalls.attempts == failed && clock.sleeperCount >= 1 }, "write \(failed)")
            #expect(queue.completeCalls.recorded == 0)
            clock.advance(by: 1)
        }
        #expect(await within { queue.completeCalls.recorded == 1 }, "\(queue.completeCalls)")
        #expect(queue.completeCalls.attempts == 5)
        // The delivery is final: past its lease nothing is reclaimed, nothing is sent again.
        clock.advance(by: lease + 1)
        #expect(try await queue.reclaimExpiredLeases(now: clock.now) == 0)
        #expect(queue.depth()["t"] == QueueDepth(queued: 0, inFlight: 0))
        await worker.stop(deadline: 5)
        #expect(transport.calls.count == 1)
        #expect(transport.calls.flatMap(\.deliveries).count == 1)
        #expect(queue.completeCalls.attempts == 5 && queue.completeCalls.recorded == 1)
        await queue.close()
    }
}

/// Waits (real time, up to a minute: the machine is shared) until `condition` holds.
private func within(_ condition: () -> Bool) async -> Bool {
    let end = Date().addingTimeInterval(60)
    while Date() < end {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 2_000_000)
    }
    return condition()
}
