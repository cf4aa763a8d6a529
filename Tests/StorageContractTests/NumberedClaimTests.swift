import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// ``InboxNumberingQueue``: a claim that numbers its batch in the inbox in the same transaction
/// (the local path's one commit per batch). SQLite offers it; PostgreSQL keeps the claim and the
/// append apart (the engine then takes the transport's own path).
struct NumberedClaimTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    /// Numbers the deliveries of the devices in `connected` (the stream hub's role), and records
    /// what it was asked.
    final class TestNumbering: InboxNumbering, @unchecked Sendable {
        let connected: Set<String>
        /// A wrong number of entries, to fail the transaction after the claim's own statements ran.
        let miscount: Bool
        let maxPerUser: Int
        let asked = Locked<[[String]]>([])
        init(connected: Set<String>, miscount: Bool = false, maxPerUser: Int = 100) {
            self.connected = connected
            self.miscount = miscount
            self.maxPerUser = maxPerUser
        }
        func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?] {
            asked.withLock { $0.append(deliveries.map(\.token)) }
            let entries = deliveries.map { d -> InboxEntry.New? in
                guard connected.contains(d.token) else { return nil }
                return InboxEntry.New(app: d.app, user: d.user ?? "", device: d.token, notificationID: d.notificationID,
                                      event: Array(#"{"id":"\#(d.notificationID)"}"#.utf8), createdAt: now)
            }
            return miscount ? Array(entries.dropLast()) : entries
        }
        func inboxMaxPerUser(_ app: String) -> Int { maxPerUser }
        func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {}
        /// Batches handed over after their commit, in commit order.
        let committedBatches = Locked<[NumberedClaim]>([])
        /// Called with each batch as it is handed over (on the writer thread, after its commit).
        var onCommitted: (@Sendable (NumberedClaim) -> Void)?
        func committed(_ batch: NumberedClaim) {
            committedBatches.withLock { $0.append(batch) }
            onCommitted?(batch)
        }
    }

    /// A notification at `t0` to `tokens`, one user each (`u0`, `u1`, …), on transport `t`.
    static func notification(_ id: String, tokens: [String], key: String? = nil, at t0: Date) -> QueuedNotification {
        QueuedNotification(id: id, app: "app", topic: "com.example.app", content: NotificationContent(alert: .text("hi")),
                           idempotencyKey: key, createdAt: t0,
                           deliveries: tokens.enumerated().map { PlannedDelivery(token: $1, user: "u\($0)", transport: "t", messageID: UUID()) })
    }

    func notification(_ id: String, tokens: [String]) -> QueuedNotification { Self.notification(id, tokens: tokens, at: t0) }

    /// The storage's queue as the numbering protocol and as SQLite's (for its commit counts).
    static func numberingQueue(_ storage: OpenStorage) throws -> (any InboxNumberingQueue, SQLiteDeliveryQueue) {
        let queue = try #require(storage.queue as? SQLiteDeliveryQueue)
        return (try #require(storage.queue as? any InboxNumberingQueue), queue)
    }

    func numberingQueue(_ storage: OpenStorage) throws -> (any InboxNumberingQueue, SQLiteDeliveryQueue) { try Self.numberingQueue(storage) }

    /// SQLite storage in a new folder, with a second connection to its database whose `refuse`
    /// makes every inbox insert fail (as a full disk or a damaged page would) and `accept` undoes
    /// it; `body` runs with both, and the storage is closed on every path.
    static func withInboxThatCanRefuse(prefix: String,
                                       _ body: (OpenStorage, _ refuse: () throws -> Void, _ accept: () throws -> Void) async throws -> Void) async throws {
        let dir = try TemporaryDirectory(prefix: prefix)
        defer { dir.remove() }
        let configuration = try await Backend.sqlite.configuration(in: dir)
        let storage = try await SQLiteStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: false)
        do {
            let other = try SQLiteDatabase(path: dir.file("herald.db"), synchronous: "NORMAL")
            try await body(storage, {
                try other.execute("CREATE TRIGGER refuse_inbox BEFORE INSERT ON inbox BEGIN SELECT RAISE(ABORT, 'inbox refused'); END",
                                  operation: "refuse inbox inserts")
            }, {
                try other.execute("DROP TRIGGER refuse_inbox", operation: "accept inbox inserts again")
            })
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }

    @Test func aNumberedBatchIsOneCommit() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, sqlite) = try numberingQueue(storage)
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa01", "aa02", "aa03"]), idempotencySince: t0)
            let numbering = TestNumbering(connected: ["aa01", "aa03"])
            let before = sqlite.commitStatistics.commits
            let batch = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60, numbering: numbering)
            // Claimed, numbered and marked sent: one transaction, one commit of the writer.
            #expect(sqlite.commitStatistics.commits == before + 1)
            #expect(batch.claimed.map(\.delivery.token) == ["aa01", "aa02", "aa03"])
            #expect(batch.entries.map { $0?.seq } == [1, nil, 1])
            #expect(batch.entries[0]?.user == "u0" && batch.entries[2]?.user == "u2")
            #expect(numbering.asked.withLock { $0 } == [["aa01", "aa02", "aa03"]])
            #expect(storage.queue.depth()["t"] == QueueDepth(queued: 0, inFlight: 3))
            // Committed: the inbox's own reader sees the numbers, and the counters moved on.
            let entry = try #require(try await storage.inbox.entry(app: "app", user: "u0", device: "aa01", notificationID: "n1"))
            #expect(entry.seq == 1)
            #expect(try await storage.inbox.entry(app: "app", user: "u1", device: "aa02", notificationID: "n1") == nil)
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u2") == 1)
            let status = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(status.deliveries.map(\.state) == [.sent, .sent, .sent])
            // A plain append afterwards takes the next numbers.
            let next = try await storage.inbox.append([InboxEntry.New(app: "app", user: "u0", device: "aa01", notificationID: "n2",
                                                                      event: Array("{}".utf8), createdAt: t0)],
                                                     maxPerUser: { _ in 100 }, now: t0)
            #expect(next.map(\.seq) == [2])
            // Nothing due: an empty claim numbers nothing.
            let empty = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60, numbering: numbering)
            #expect(empty.claimed.isEmpty && empty.entries.isEmpty)
        }
    }

    @Test func aNumberingThatFailsClaimsNothing() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, _) = try numberingQueue(storage)
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa01", "aa02"]), idempotencySince: t0)
            await #expect(throws: (any Error).self) {
                _ = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60,
                                          numbering: TestNumbering(connected: ["aa01", "aa02"], miscount: true))
            }
            // The claim's UPDATEs ran before the numbering failed: rolled back with it.
            #expect(storage.queue.depth()["t"] == QueueDepth(queued: 2, inFlight: 0))
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 0)
            let again = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60,
                                              numbering: TestNumbering(connected: ["aa01", "aa02"]))
            #expect(again.claimed.map(\.delivery.attempt) == [1, 1])
            #expect(again.entries.map { $0?.seq } == [1, 1])
        }
    }

    @Test func anInboxThatRefusesTheAppendLeavesTheBatchQueued() async throws {
        try await Self.withInboxThatCanRefuse(prefix: "herald-numbered") { storage, refuse, accept in
            let (queue, _) = try numberingQueue(storage)
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa01", "aa02"]), idempotencySince: t0)
            // After the claim and the counters' upsert have run in the same transaction.
            try refuse()
            await #expect(throws: (any Error).self) {
                _ = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60,
                                          numbering: TestNumbering(connected: ["aa01", "aa02"]))
            }
            #expect(storage.queue.depth()["t"] == QueueDepth(queued: 2, inFlight: 0))
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 0)
            let status = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(status.deliveries.map(\.state) == [.queued, .queued])
            #expect(status.deliveries.map(\.attempts) == [0, 0])
            try accept()
            let batch = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60,
                                              numbering: TestNumbering(connected: ["aa01", "aa02"]))
            #expect(batch.entries.map { $0?.seq } == [1, 1])
        }
    }

    @Test func aCrashAfterTheCommitLeavesTheNumberForTheSecondAttempt() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-numbered")
        defer { dir.remove() }
        let configuration = try await Backend.sqlite.configuration(in: dir)
        var storage = try await SQLiteStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: false)
        do {
            let (queue, _) = try numberingQueue(storage)
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa01"]), idempotencySince: t0)
            let batch = try await queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60,
                                              numbering: TestNumbering(connected: ["aa01"]))
            #expect(batch.entries.map { $0?.seq } == [1])
            // The daemon dies here: no write, no outcome. What is on disk is what a kill -9 leaves.
            await storage.close()
            storage = try await SQLiteStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: false)
            let interrupted = try await storage.queue.interrupted(transport: "t")
            #expect(interrupted.map(\.delivery.token) == ["aa01"])
            // Claimed and numbered together: the interrupted claim has its number, which the
            // second attempt finds (the stream hub's orphans) instead of taking a new one.
            let entry = try #require(try await storage.inbox.entry(app: "app", user: "u0", device: "aa01", notificationID: "n1"))
            #expect(entry.seq == 1)
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 1)
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }
}

/// The delivery engine over numbered claims: the next claim runs while the previous batch's
/// events are written (one batch ahead, no more), and each batch's writes start only once the
/// previous batch's have ended, so a device's events go out in number order.
@Suite struct NumberedClaimPipelineTests {
    /// Numbers every delivery; holds the first batch's writes until ``release()``.
    final class HeldNumbering: InboxNumbering, @unchecked Sendable {
        struct Log { var claims: [[String]] = []; var writes: [String] = []; var numbers: [Int64] = []; var released = false }
        let log = Locked(Log())
        func release() { log.withLock { $0.released = true } }
        func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?] {
            log.withLock { $0.claims.append(deliveries.map(\.token)) }
            return deliveries.map { d in
                InboxEntry.New(app: d.app, user: d.user ?? "", device: d.token, notificationID: d.notificationID,
                               event: Array("{}".utf8), createdAt: now)
            }
        }
        func inboxMaxPerUser(_ app: String) -> Int { 100 }
        func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {
            let batch = deliveries.map(\.token).joined(separator: ",")
            let first = log.withLock { l in
                l.writes.append("start \(batch)")
                l.numbers += entries.compactMap { $0?.seq }
                return l.writes.count == 1
            }
            if first {
                while !log.withLock({ $0.released }) { try? await Task.sleep(nanoseconds: 1_000_000) }
            }
            log.withLock { $0.writes.append("end \(batch)") }
        }
    }

    final class NumberingTransport: InboxNumberingTransport {
        let name = "t"
        let numbering = HeldNumbering()
        let delivered = Locked<[String]>([])
        let batches = Locked<[[String]]>([])
        var inboxNumbering: (any InboxNumbering)? { numbering }
        var impairment: String? { nil }
        func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
            delivered.withLock { $0 += batch.map(\.token) }
            batches.withLock { $0.append(batch.map(\.token)) }
            return batch.map { _ in .delivered(receipt: nil, evidence: "written (test)") }
        }
    }

    /// The engine over `transport` and the storage's queue: batches of 2, one in flight.
    static func worker(_ transport: NumberingTransport, _ storage: OpenStorage, _ clock: TestClock) -> TransportWorker {
        TransportWorker(
            name: "t", transport: transport, configuration: ScriptedTransport.Configuration(), queue: storage.queue,
            invalidator: TokenInvalidator(store: storage.tokens, logger: .disabled, metrics: MetricsRegistry()),
            clock: clock, logger: .disabled, metrics: DeliveryMetrics(registry: MetricsRegistry()), alreadyStarted: true,
            random: { 0 },
            settings: { .init(retry: RetryPolicy(), batchSize: 2, concurrency: 1, deadline: 30, lease: 30) })
    }

    @Test func theNextClaimOverlapsTheWritesAndTheWritesKeepTheirOrder() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let clock = TestClock()
            let transport = NumberingTransport()
            let worker = Self.worker(transport, storage, clock)
            let tokens = (1...6).map { String(format: "aa%02d", $0) }
            _ = try await storage.queue.enqueue(QueuedNotification(
                id: "n1", app: "app", topic: "app", content: NotificationContent(alert: .text("hi")), idempotencyKey: nil, createdAt: clock.now,
                deliveries: tokens.map { PlannedDelivery(token: $0, user: "u-\($0)", transport: "t", messageID: UUIDSource.random()) }),
                idempotencySince: clock.now)
            worker.start()
            worker.wake()
            let log = transport.numbering.log
            // The first batch's writes are held: the second batch is claimed meanwhile, not the third.
            #expect(await eventually { log.withLock { $0.claims.count == 2 } })
            try await Task.sleep(nanoseconds: 200_000_000)
            #expect(log.withLock { $0.claims } == [["aa01", "aa02"], ["aa03", "aa04"]])
            #expect(log.withLock { $0.writes } == ["start aa01,aa02"])
            #expect(transport.delivered.withLock { $0 }.isEmpty)
            transport.numbering.release()
            #expect(await eventually { transport.delivered.withLock { $0.count } == 6 })
            #expect(log.withLock { $0.writes } == ["start aa01,aa02", "end aa01,aa02", "start aa03,aa04", "end aa03,aa04",
                                                    "start aa05,aa06", "end aa05,aa06"])
            await worker.stop(deadline: 5)
            let status = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(status.deliveries.map(\.state) == Array(repeating: .delivered, count: 6))
        }
    }

    /// An accept that numbers its deliveries (``InboxNumberingQueue/numberAtAccept(transport:_:)``)
    /// hands them to the engine in commit order with the claims: written after the batch a claim
    /// numbered before it, with no claim of their own, in parts of the batch size.
    @Test func anAcceptsDeliveriesAreWrittenInCommitOrderAfterAClaimsWithoutAClaim() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let clock = TestClock()
            let transport = NumberingTransport()
            let worker = Self.worker(transport, storage, clock)
            func notification(_ id: String, _ tokens: [String]) -> QueuedNotification {
                QueuedNotification(id: id, app: "app", topic: "app", content: NotificationContent(alert: .text(id)), idempotencyKey: nil,
                                   createdAt: clock.now,
                                   deliveries: tokens.map { PlannedDelivery(token: $0, user: "u-\($0)", transport: "t", messageID: UUIDSource.random()) })
            }
            _ = try await storage.queue.enqueue(notification("n1", ["aa01"]), idempotencySince: clock.now)
            worker.start()
            worker.wake()
            let log = transport.numbering.log
            // n1 claimed and numbered; its writes are held.
            #expect(await eventually { log.withLock { $0.writes } == ["start aa01"] })
            let tokens = (1...5).map { String(format: "aa%02d", $0) }
            _ = try await storage.queue.enqueue(notification("n2", tokens), idempotencySince: clock.now)
            // Numbered by the accept itself (asked once, all five), lined up behind n1's batch.
            #expect(log.withLock { $0.claims } == [["aa01"], tokens])
            try await Task.sleep(nanoseconds: 200_000_000)
            #expect(log.withLock { $0.writes } == ["start aa01"])
            transport.numbering.release()
            #expect(await eventually { transport.delivered.withLock { $0.count } == 6 })
            #expect(log.withLock { $0.writes } == ["start aa01", "end aa01", "start aa01,aa02", "end aa01,aa02",
                                                    "start aa03,aa04", "end aa03,aa04", "start aa05", "end aa05"])
            // aa01's user had number 1 from the claim, then 2 from the accept: written in that order.
            #expect(log.withLock { $0.numbers } == [1, 2, 1, 1, 1, 1])
            #expect(Set(transport.batches.withLock { $0 }) == [["aa01"], ["aa01", "aa02"], ["aa03", "aa04"], ["aa05"]])
            #expect(log.withLock { $0.claims }.count == 2)
            await worker.stop(deadline: 5)
            let status = try #require(try await storage.queue.status(notificationID: "n2"))
            #expect(status.deliveries.map(\.state) == Array(repeating: .delivered, count: 5))
            #expect(status.deliveries.map(\.attempts) == Array(repeating: 1, count: 5))
        }
    }
}
