import Foundation
import HeraldCore
@testable import HeraldSQLite
import HeraldTestKit
import Testing

/// ``InboxNumberingQueue/numberAtAccept(transport:_:)``: an accept that claims and numbers, in its
/// own transaction, the deliveries whose device has a stream here, so nothing is claimed after
/// the 202 for them. SQLite offers it; PostgreSQL stores every delivery `queued` as before.
struct AcceptNumberingTests {
    typealias TestNumbering = NumberedClaimTests.TestNumbering
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func notification(_ id: String, tokens: [String], key: String? = nil) -> QueuedNotification {
        NumberedClaimTests.notification(id, tokens: tokens, key: key, at: t0)
    }

    func numberingQueue(_ storage: OpenStorage) throws -> (any InboxNumberingQueue, SQLiteDeliveryQueue) {
        try NumberedClaimTests.numberingQueue(storage)
    }

    /// More than one multi-row INSERT's worth (16 rows), so the row ids of later chunks are checked too.
    let tokens = (0..<40).map { String(format: "aa%02d", $0) }

    @Test func anAcceptTakesWhatItsNumberingNumbersAndAppendsTheirEntriesInBatchesRightAfter() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, sqlite) = try numberingQueue(storage)
            let connected = Set(tokens.enumerated().filter { $0.offset % 3 != 1 }.map(\.element))
            let numbering = TestNumbering(connected: connected)
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: numbering, lease: { 60 }, batchSize: { 16 }))
            let before = sqlite.commitStatistics.commits
            _ = try await storage.queue.enqueue(notification("n1", tokens: tokens), idempotencySince: t0)
            #expect(numbering.asked.withLock { $0 } == [tokens])
            // Handed over once their entries are committed, in batches of 16: the taken deliveries
            // only, with their rows' ids.
            let taken = tokens.filter { connected.contains($0) }
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 2 })
            let batches = numbering.committedBatches.withLock { $0 }
            #expect(batches.map(\.claimed.count) == [16, taken.count - 16])
            #expect(batches.allSatisfy { $0.atAccept })
            // The accept's commit, then one per batch (each queued once the previous one has
            // committed, so the group commit cannot fold them into one).
            #expect(sqlite.commitStatistics.commits == before + 3)
            let batch = NumberedClaim(claimed: batches.flatMap(\.claimed), entries: batches.flatMap(\.entries))
            #expect(batch.claimed.map(\.delivery.token) == taken)
            #expect(batch.claimed.allSatisfy { $0.delivery.attempt == 1 && $0.delivery.notificationID == "n1" && $0.acceptedAt == t0 })
            #expect(batch.entries.map { $0?.seq } == Array(repeating: 1, count: taken.count))
            let status = try #require(try await storage.queue.status(notificationID: "n1"))
            let rowIDs = Dictionary(uniqueKeysWithValues: status.deliveries.map { ($0.token, $0.id) })
            #expect(batch.claimed.map(\.delivery.id) == taken.map { rowIDs[$0]! })
            #expect(batch.claimed.map(\.delivery.messageID.lowercasedString) == taken.map { t in status.deliveries.first { $0.token == t }!.messageID })
            for d in status.deliveries {
                #expect(d.state == (connected.contains(d.token) ? .sent : .queued), "\(d.token)")
                #expect(d.attempts == (connected.contains(d.token) ? 1 : 0), "\(d.token)")
            }
            #expect(storage.queue.depth()["t"] == QueueDepth(queued: tokens.count - taken.count, inFlight: taken.count))
            let entry = try #require(try await storage.inbox.entry(app: "app", user: "u0", device: "aa00", notificationID: "n1"))
            #expect(entry.seq == 1)
            #expect(try await storage.inbox.entry(app: "app", user: "u1", device: "aa01", notificationID: "n1") == nil)
            // The rest is claimed as before; what was taken is not claimed again.
            let rest = try await storage.queue.claim(transport: "t", limit: 100, now: t0, leaseUntil: t0 + 60)
            #expect(rest.map(\.delivery.token) == tokens.filter { !connected.contains($0) })
            // The taken deliveries are completed by the attempt they were handed over with.
            try await storage.queue.complete(batch.claimed.map { .finished($0.delivery, .delivered, reason: "acknowledged (test)") }, now: t0)
            let after = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(after.deliveries.filter { $0.state == .delivered }.map(\.token) == taken)
        }
    }

    /// Users whose inboxes are full: each batch is appended and handed over without its trim,
    /// and the trim of all of them follows the last batch in a commit of its own; then every
    /// user holds `maxPerUser` entries again, the newest.
    @Test func aFullInboxIsTrimmedOnceTheAcceptsBatchesAreHandedOver() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, sqlite) = try numberingQueue(storage)
            let numbering = TestNumbering(connected: Set(tokens), maxPerUser: 1)
            let handedOver = Locked<[Int]>([])
            numbering.onCommitted = { _ in handedOver.withLock { $0.append(sqlite.commitStatistics.commits) } }
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: numbering, lease: { 60 }, batchSize: { 16 }))
            // The first notification fills every inbox (one entry each; nothing to trim yet).
            _ = try await storage.queue.enqueue(notification("n1", tokens: tokens), idempotencySince: t0)
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 3 })
            let before = sqlite.commitStatistics.commits
            handedOver.withLock { $0 = [] }
            _ = try await storage.queue.enqueue(notification("n2", tokens: tokens), idempotencySince: t0)
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 6 })
            // The accept's commit, then one per batch, each handed over right after it ...
            #expect(handedOver.withLock { $0 } == [before + 2, before + 3, before + 4])
            // ... then the trim's own.
            #expect(await eventually { sqlite.commitStatistics.commits == before + 5 })
            #expect(numbering.committedBatches.withLock { $0 }.suffix(3).flatMap(\.entries).map { $0?.seq } == Array(repeating: 2, count: tokens.count))
            for (i, token) in tokens.enumerated() {
                let kept = try await storage.inbox.entries(app: "app", user: "u\(i)", device: token, after: 0, limit: 10)
                #expect(kept.map(\.seq) == [2] && kept.map(\.notificationID) == ["n2"], "\(token)")
            }
        }
    }

    /// The deferred trims wait their delay (here longer than the test), merged: one per user
    /// however many accepts left one; closing the queue hands them to the writer before it stops.
    @Test func deferredTrimsWaitTheirDelayMergedPerUserAndCloseHandsThemOver() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-trims")
        defer { dir.remove() }
        let path = dir.file("herald.db")
        func open() throws -> (SQLiteDeliveryQueue, SQLiteInboxStore) {
            let queue = try SQLiteDeliveryQueue(path: path, inboxTrimDelay: 3600)
            let inbox = try SQLiteInboxStore(sharing: queue.writer, configuration: SQLiteStorageConfiguration(path: path))
            queue.attach(inbox: inbox)
            return (queue, inbox)
        }
        let (queue, inbox) = try open()
        let numbering = TestNumbering(connected: Set(tokens), maxPerUser: 1)
        queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: numbering, lease: { 60 }, batchSize: { 16 }))
        for (k, id) in ["n1", "n2", "n3"].enumerated() {
            _ = try await queue.enqueue(notification(id, tokens: tokens), idempotencySince: t0)
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 3 * (k + 1) })
        }
        // Nothing trimmed yet: every user keeps all three, and one trim waits per user.
        #expect(queue.pendingInboxTrims == tokens.count)
        for (i, token) in tokens.enumerated() {
            #expect(try await inbox.entries(app: "app", user: "u\(i)", device: token, after: 0, limit: 10).map(\.seq) == [1, 2, 3], "\(token)")
        }
        inbox.close()
        await queue.close()
        #expect(queue.pendingInboxTrims == 0)
        // Handed over on close and committed: each user holds the newest entry only.
        let (reopened, store) = try open()
        for (i, token) in tokens.enumerated() {
            let kept = try await store.entries(app: "app", user: "u\(i)", device: token, after: 0, limit: 10)
            #expect(kept.map(\.seq) == [3] && kept.map(\.notificationID) == ["n3"], "\(token)")
        }
        store.close()
        await reopened.close()
    }

    @Test func anAcceptWhoseNumberingFailsIsStoredQueuedWithNothingNumbered() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, _) = try numberingQueue(storage)
            let failing = TestNumbering(connected: ["aa00", "aa01"], miscount: true)
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: failing, lease: { 60 }))
            // The numbering fails inside the accept's transaction: the accept goes on without it.
            let receipt = try await storage.queue.enqueue(notification("n1", tokens: ["aa00", "aa01"]), idempotencySince: t0)
            #expect(receipt.deliveries == 2 && !receipt.replayed)
            let stored = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(stored.deliveries.map(\.state) == [.queued, .queued])
            #expect(stored.deliveries.map(\.attempts) == [0, 0])
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 0)
            #expect(storage.queue.depth()["t"] == QueueDepth(queued: 2, inFlight: 0))
            #expect(failing.committedBatches.withLock { $0 }.isEmpty)
            // Another lending replaces it; a stale one's stop leaves the new one in place.
            let working = TestNumbering(connected: ["aa00"])
            let lending = AcceptNumbering(numbering: working, lease: { 60 })
            queue.numberAtAccept(transport: "t", lending)
            await queue.stopNumberingAtAccept(transport: "t", AcceptNumbering(numbering: failing, lease: { 60 }))
            _ = try await storage.queue.enqueue(notification("n2", tokens: ["aa00", "aa01"]), idempotencySince: t0)
            #expect(await eventually { working.committedBatches.withLock { $0 }.count == 1 })
            #expect(working.committedBatches.withLock { $0 }.map { $0.claimed.map(\.delivery.token) } == [["aa00"]])
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 1)
            // Stopped: accepts store `queued` again.
            await queue.stopNumberingAtAccept(transport: "t", lending)
            _ = try await storage.queue.enqueue(notification("n3", tokens: ["aa00"]), idempotencySince: t0)
            #expect(working.committedBatches.withLock { $0 }.count == 1)
            let status = try #require(try await storage.queue.status(notificationID: "n3"))
            #expect(status.deliveries.map(\.state) == [.queued])
        }
    }

    @Test func anInboxThatRefusesTheAppendHandsTheTakenDeliveriesOverUnnumbered() async throws {
        try await NumberedClaimTests.withInboxThatCanRefuse(prefix: "herald-accept-numbering") { storage, refuse, accept in
            let (queue, _) = try numberingQueue(storage)
            let numbering = TestNumbering(connected: ["aa00", "aa01"])
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: numbering, lease: { 60 }))
            // After the counters' upsert ran in the same transaction.
            try refuse()
            // The accept stands (taken, `sent`); its batch comes without numbers, for the
            // transport's own path (which numbers them, or reports them not written).
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa00", "aa01"]), idempotencySince: t0)
            let status = try #require(try await storage.queue.status(notificationID: "n1"))
            #expect(status.deliveries.map(\.state) == [.sent, .sent])
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 1 })
            #expect(numbering.committedBatches.withLock { $0 }.map { $0.entries.map { $0?.seq } } == [[nil, nil]])
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 0)
            try accept()
            _ = try await storage.queue.enqueue(notification("n2", tokens: ["aa00", "aa01"]), idempotencySince: t0)
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 2 })
            #expect(numbering.committedBatches.withLock { $0 }.map { $0.entries.map { $0?.seq } } == [[nil, nil], [1, 1]])
        }
    }

    @Test func aReplayedAcceptNumbersNothing() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let (queue, _) = try numberingQueue(storage)
            let numbering = TestNumbering(connected: ["aa00"])
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: numbering, lease: { 60 }))
            let first = try await storage.queue.enqueue(notification("n1", tokens: ["aa00"], key: "k"), idempotencySince: t0)
            #expect(await eventually { numbering.committedBatches.withLock { $0 }.count == 1 })
            let again = try await storage.queue.enqueue(notification("n2", tokens: ["aa00"], key: "k"), idempotencySince: t0)
            #expect(!first.replayed && again.replayed && again.id == "n1")
            try await Task.sleep(nanoseconds: 100_000_000)
            #expect(numbering.committedBatches.withLock { $0 }.count == 1)
            #expect(try await storage.inbox.lastSequence(app: "app", user: "u0") == 1)
        }
    }

    @Test func aCrashAfterAnAcceptLeavesWhatItTookInterruptedWithItsNumbers() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-accept-numbering")
        defer { dir.remove() }
        let configuration = try await Backend.sqlite.configuration(in: dir)
        var storage = try await SQLiteStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: false)
        do {
            let (queue, _) = try numberingQueue(storage)
            queue.numberAtAccept(transport: "t", AcceptNumbering(numbering: TestNumbering(connected: ["aa00"]), lease: { 60 }))
            _ = try await storage.queue.enqueue(notification("n1", tokens: ["aa00", "aa01"]), idempotencySince: t0)
            // The daemon dies before the events are written: what is on disk is what a kill -9 leaves.
            await storage.close()
            storage = try await SQLiteStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: false)
            let interrupted = try await storage.queue.interrupted(transport: "t")
            #expect(interrupted.map(\.delivery.token) == ["aa00"])
            #expect(interrupted.map(\.delivery.attempt) == [1])
            let entry = try #require(try await storage.inbox.entry(app: "app", user: "u0", device: "aa00", notificationID: "n1"))
            #expect(entry.seq == 1)
            let queued = try await storage.queue.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0 + 60)
            #expect(queued.map(\.delivery.token) == ["aa01"])
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }
}

/// Withdrawing a lending (``InboxNumberingQueue/stopNumberingAtAccept(transport:_:)``) waits for
/// the accepts that already took it: none hands a batch over after the withdrawal returned (its
/// worker's line would be closed, and the deliveries left `sent` and never written).
struct AcceptNumberingWithdrawalTests {
    /// Numbers every delivery; its first call blocks the store's writer thread until released.
    final class BlockingNumbering: InboxNumbering, @unchecked Sendable {
        let gate = DispatchSemaphore(value: 0)
        struct Log { var calls = 0; var handedOver: [(notification: String, afterWithdrawal: Bool)] = []; var withdrawn = false }
        let log = Locked(Log())
        func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?] {
            if log.withLock({ $0.calls += 1; return $0.calls == 1 }) { gate.wait() }
            return deliveries.map { d in
                InboxEntry.New(app: d.app, user: d.user ?? "", device: d.token, notificationID: d.notificationID,
                               event: Array("{}".utf8), createdAt: now)
            }
        }
        func inboxMaxPerUser(_ app: String) -> Int { 100 }
        func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {}
        func committed(_ batch: NumberedClaim) {
            log.withLock { l in l.handedOver.append((batch.claimed[0].delivery.notificationID, l.withdrawn)) }
        }
    }

    @Test func anAcceptThatTookTheLendingHandsItsBatchOverBeforeTheWithdrawalReturns() async throws {
        try await withStorage(.sqlite) { storage, _ in
            let queue = try #require(storage.queue as? any InboxNumberingQueue)
            let sqlite = try #require(storage.queue as? SQLiteDeliveryQueue)
            let t0 = Date(timeIntervalSince1970: 1_767_225_600)
            func notification(_ id: String) -> QueuedNotification {
                QueuedNotification(id: id, app: "app", topic: "app", content: NotificationContent(alert: .text(id)), idempotencyKey: nil,
                                   createdAt: t0, deliveries: [PlannedDelivery(token: "aa\(id)", user: "u", transport: "t", messageID: UUID())])
            }
            let numbering = BlockingNumbering()
            let lending = AcceptNumbering(numbering: numbering, lease: { 60 })
            queue.numberAtAccept(transport: "t", lending)
            // n1 holds the writer thread inside its numbering; n2 has read the lending and waits behind it.
            let first = Task { try await storage.queue.enqueue(notification("n1"), idempotencySince: t0) }
            #expect(await eventually { numbering.log.withLock { $0.calls } == 1 })
            let waiting = sqlite.waitingAccepts
            let second = Task { try await storage.queue.enqueue(notification("n2"), idempotencySince: t0) }
            #expect(await eventually { sqlite.waitingAccepts == waiting + 1 })
            let withdrawal = Task {
                await queue.stopNumberingAtAccept(transport: "t", lending)
                numbering.log.withLock { $0.withdrawn = true }
            }
            try await Task.sleep(nanoseconds: 100_000_000)
            #expect(!numbering.log.withLock { $0.withdrawn })   // it waits for the accepts ahead of it
            numbering.gate.signal()
            _ = try await first.value
            _ = try await second.value
            await withdrawal.value
            let handedOver = numbering.log.withLock { $0.handedOver }
            #expect(handedOver.map(\.notification) == ["n1", "n2"])
            #expect(handedOver.allSatisfy { !$0.afterWithdrawal })
            // After it: accepts store `queued` and hand nothing over.
            _ = try await storage.queue.enqueue(notification("n3"), idempotencySince: t0)
            #expect(numbering.log.withLock { $0.handedOver.count } == 2)
            let status = try #require(try await storage.queue.status(notificationID: "n3"))
            #expect(status.deliveries.map(\.state) == [.queued])
        }
    }
}
