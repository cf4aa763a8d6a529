import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// The SQLite queue: claims, leases, retries, idempotency, recovery, pruning, group commit.
struct SQLiteDeliveryQueueTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func notification(_ id: String = UUID().uuidString.lowercased(), tokens: [String] = ["aa01", "aa02"], key: String? = nil,
                      at time: Date? = nil) -> QueuedNotification {
        QueuedNotification(id: id, app: "app", topic: "com.example.app",
                           content: NotificationContent(alert: .text("hi"), badge: 1), idempotencyKey: key, createdAt: time ?? t0,
                           deliveries: tokens.map { PlannedDelivery(token: $0, user: "u", transport: "t", messageID: UUID()) })
    }

    /// Runs `body` with a queue in a temporary folder; closes the queue and removes the folder on every path.
    func withQueue(busyTimeout: TimeInterval = 5, _ body: (SQLiteDeliveryQueue, TemporaryDirectory) async throws -> Void) async throws {
        let dir = try TemporaryDirectory(prefix: "herald-queue")
        defer { dir.remove() }
        try await withQueue(in: dir, busyTimeout: busyTimeout) { try await body($0, dir) }
    }

    /// Runs `body` with the queue in `dir/q.db`; closes the queue on every path.
    func withQueue(in dir: TemporaryDirectory, busyTimeout: TimeInterval = 5, _ body: (SQLiteDeliveryQueue) async throws -> Void) async throws {
        let queue = try SQLiteDeliveryQueue(path: dir.file("q.db"), synchronous: .normal, busyTimeout: busyTimeout)
        do {
            try await body(queue)
        } catch {
            await queue.close()
            throw error
        }
        await queue.close()
    }

    @Test func claimCompleteAndStatus() async throws {
        try await withQueue { q, _ in
            let receipt = try await q.enqueue(notification("n1"), idempotencySince: t0)
            #expect(receipt == EnqueueReceipt(id: "n1", deliveries: 2, replayed: false))
            #expect(q.depth()["t"] == QueueDepth(queued: 2, inFlight: 0))
            let claimed = try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60)
            #expect(claimed.map(\.delivery.token) == ["aa01", "aa02"])
            #expect(claimed.allSatisfy { $0.delivery.attempt == 1 && $0.delivery.content.badge == 1 && $0.delivery.topic == "com.example.app" })
            #expect(q.depth()["t"] == QueueDepth(queued: 0, inFlight: 2))
            #expect(try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60).isEmpty)
            try await q.complete([.finished(claimed[0].delivery, .delivered, reason: nil),
                                  .finished(claimed[1].delivery, .rejected, reason: "BadTopic")],
                                 now: t0 + 1)
            #expect(q.depth()["t"] == QueueDepth(queued: 0, inFlight: 0))
            let status = try #require(try await q.status(notificationID: "n1"))
            #expect(status.deliveries.map(\.state) == [.delivered, .rejected])
            #expect(status.deliveries[1].lastReason == "BadTopic")
            #expect(status.deliveries[0].messageID == claimed[0].delivery.messageID.uuidString.lowercased())
            #expect(try await q.status(notificationID: "nope") == nil)
        }
    }

    @Test func retriesWaitForTheirTimeAndStaleCompletionsAreIgnored() async throws {
        try await withQueue { q, _ in
            _ = try await q.enqueue(notification(tokens: ["aa01"]), idempotencySince: t0)
            let first = try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60)
            try await q.complete([.requeued(first[0].delivery, at: t0 + 10, reason: "Busy")], now: t0)
            #expect(try await q.claim(transport: "t", limit: 10, now: t0 + 9, leaseUntil: t0 + 60).isEmpty)
            #expect(try await q.nextDue(transport: "t") == t0 + 10)
            let second = try await q.claim(transport: "t", limit: 10, now: t0 + 10, leaseUntil: t0 + 70)
            #expect(second.first?.delivery.attempt == 2)
            #expect(second.first?.delivery.messageID == first[0].delivery.messageID)
            // A late answer to attempt 1 does not touch attempt 2.
            try await q.complete([.finished(first[0].delivery, .failed, reason: "late")], now: t0 + 11)
            #expect(q.depth()["t"]?.inFlight == 1)
        }
    }

    @Test func expiredLeasesComeBack() async throws {
        try await withQueue { q, _ in
            _ = try await q.enqueue(notification(tokens: ["aa01"]), idempotencySince: t0)
            _ = try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 5)
            #expect(try await q.reclaimExpiredLeases(now: t0 + 4) == 0)
            #expect(try await q.reclaimExpiredLeases(now: t0 + 5) == 1)
            #expect(q.depth()["t"] == QueueDepth(queued: 1, inFlight: 0))
            #expect(try await q.claim(transport: "t", limit: 10, now: t0 + 5, leaseUntil: t0 + 10).first?.delivery.attempt == 2)
        }
    }

    @Test func idempotencyKeyWithinTheWindow() async throws {
        try await withQueue { q, _ in
            let a = try await q.enqueue(notification("a", key: "k"), idempotencySince: t0 - 86_400)
            let b = try await q.enqueue(notification("b", key: "k", at: t0 + 10), idempotencySince: t0 + 10 - 86_400)
            #expect(b == EnqueueReceipt(id: "a", deliveries: 2, replayed: true))
            #expect(try await q.receipt(app: "app", idempotencyKey: "k", since: t0 - 1) == EnqueueReceipt(id: "a", deliveries: 2, replayed: true))
            #expect(q.depth()["t"]?.queued == 2)
            // After the window the key names a new notification.
            let c = try await q.enqueue(notification("c", key: "k", at: t0 + 90_000), idempotencySince: t0 + 90_000 - 86_400)
            #expect(c == EnqueueReceipt(id: "c", deliveries: 2, replayed: false))
            #expect(a.replayed == false)
        }
    }

    @Test func claimsOfACrashedRunAreInterrupted() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-queue")
        defer { dir.remove() }
        try await withQueue(in: dir) { q in
            _ = try await q.enqueue(notification("n", tokens: ["aa01", "aa02", "aa03"]), idempotencySince: t0)
            _ = try await q.claim(transport: "t", limit: 2, now: t0, leaseUntil: t0 + 3600)
        }  // closed as if the process died here
        try await withQueue(in: dir) { q in
            #expect(q.depth()["t"] == QueueDepth(queued: 1, inFlight: 2))
            let interrupted = try await q.interrupted(transport: "t")
            #expect(interrupted.map(\.delivery.token) == ["aa01", "aa02"])
            // The lease of the dead run does not matter; the sweeper leaves them to the recovery.
            #expect(try await q.reclaimExpiredLeases(now: t0 + 7200) == 0)
            try await q.complete(interrupted.map { .requeued($0.delivery, at: t0, reason: "interrupted") }, now: t0)
            #expect(try await q.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60).count == 3)
        }
    }

    @Test func pruneRemovesOnlyFinishedOldNotifications() async throws {
        try await withQueue { q, _ in
            _ = try await q.enqueue(notification("old", tokens: ["aa01"]), idempotencySince: t0)
            _ = try await q.enqueue(notification("open", tokens: ["aa02"]), idempotencySince: t0)
            _ = try await q.enqueue(notification("new", tokens: ["aa03"], at: t0 + 1000), idempotencySince: t0)
            let claimed = try await q.claim(transport: "t", limit: 10, now: t0 + 1000, leaseUntil: t0 + 2000)
            let done = claimed.filter { $0.delivery.notificationID != "open" }
            try await q.complete(done.map { .finished($0.delivery, .delivered, reason: nil) }, now: t0)
            #expect(try await q.prune(createdBefore: t0 + 500) == 1)
            #expect(try await q.status(notificationID: "old") == nil)
            #expect(try await q.status(notificationID: "open") != nil)
            #expect(try await q.status(notificationID: "new") != nil)
        }
    }

    @Test func acceptsWaitingForABusyWriterShareOneCommit() async throws {
        try await withQueue(busyTimeout: 60) { q, dir in
            // Another connection holds the write lock, so the writer's first transaction waits and
            // every accept submitted meanwhile queues up behind it.
            let blocker = try SQLiteDatabase(path: dir.file("q.db"), synchronous: "NORMAL")
            try blocker.execute("BEGIN IMMEDIATE", operation: "hold the write lock")
            let n = 400
            let started = Locked(0)
            try await withThrowingTaskGroup(of: Void.self) { group in
                func accept(_ i: Int) {
                    group.addTask {
                        started.withLock { $0 += 1 }
                        _ = try await q.enqueue(notification("n\(i)", tokens: ["aa01"]), idempotencySince: t0)
                    }
                }
                // The first accept alone: the writer takes it and blocks in its transaction.
                accept(0)
                try? await Task.sleep(nanoseconds: 100_000_000)
                for i in 1..<n { accept(i) }
                // Every accept submitted: those the writer had not taken wait (how many depends on
                // how soon it took its first batch, so the figure is read once it holds still).
                var waiting = -1
                var stableSince = Date()
                let end = Date().addingTimeInterval(60)
                while Date() < end {
                    let now = q.waitingAccepts
                    if now != waiting || started.value < n { waiting = now; stableSince = Date() }
                    if Date().timeIntervalSince(stableSince) >= 0.5 { break }
                    try? await Task.sleep(nanoseconds: 5_000_000)
                }
                #expect(waiting >= 1, "the accepts did not queue up behind the busy writer")
                // Released on every path, so the writer (and the queue's close) can go on.
                try? blocker.execute("ROLLBACK", operation: "release the write lock")
                try await group.waitForAll()
            }
            #expect(q.depth()["t"]?.queued == n)
            let stats = q.commitStatistics
            #expect(stats.operations == n)
            // The first transaction (the accepts taken before the lock was seen), then one for
            // every accept that waited: they shared a commit.
            #expect(stats.commits <= 2, "\(stats.commits) commits for \(n) accepts")
            #expect(try await q.claim(transport: "t", limit: 1000, now: t0, leaseUntil: t0 + 60).count == n)
        }
    }

    @Test func aFailingAcceptDoesNotUndoTheOthersInItsCommit() async throws {
        try await withQueue { q, _ in
            _ = try await q.enqueue(notification("dup", tokens: ["aa01"]), idempotencySince: t0)
            let n = 200
            let failures = try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<n {
                    // Every 50th reuses an id: the UNIQUE constraint refuses it inside a shared commit.
                    let id = i % 50 == 25 ? "dup" : "n\(i)"
                    group.addTask {
                        do { _ = try await q.enqueue(notification(id, tokens: ["aa02", "aa03"]), idempotencySince: t0); return false } catch { return true }
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(failures == 4)
            #expect(q.depth()["t"]?.queued == 1 + 2 * (n - 4))
            let claimed = try await q.claim(transport: "t", limit: 10_000, now: t0, leaseUntil: t0 + 60)
            #expect(claimed.count == 1 + 2 * (n - 4))
            #expect(Set(claimed.map(\.delivery.notificationID)).count == 1 + n - 4)
            #expect(try await q.status(notificationID: "dup")?.deliveries.count == 1)
        }
    }

    @Test func manyDevicesGoInChunksAndComeBackInOrder() async throws {
        try await withQueue { q, _ in
            let tokens = (1...37).map { String(format: "aa%02d", $0) }
            _ = try await q.enqueue(notification("big", tokens: tokens), idempotencySince: t0)
            let claimed = try await q.claim(transport: "t", limit: 100, now: t0, leaseUntil: t0 + 60)
            #expect(claimed.map(\.delivery.token) == tokens)
            #expect(Set(claimed.map(\.delivery.messageID)).count == 37)
            let status = try #require(try await q.status(notificationID: "big"))
            #expect(status.deliveries.map(\.messageID) == claimed.map { $0.delivery.messageID.uuidString.lowercased() })
        }
    }

    @Test func rejectsAnInMemoryDatabase() {
        #expect(throws: StoreError.self) { try SQLiteDeliveryQueue(path: ":memory:") }
    }
}
