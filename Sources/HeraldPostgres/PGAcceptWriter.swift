import Dispatch
import FoundationEssentials
import Glibc
import HeraldCore

/// Group commit of accepts on PostgreSQL: one connection on one thread takes every accept that
/// arrived meanwhile and commits them together (one WAL flush, shared), with one `pg_notify` per
/// transport so every node's workers wake. Key-less accepts (the common case) are one statement
/// for the whole batch, notifications and wake-ups included, committed on its own: one round
/// trip. Accepts with an idempotency key take a transaction, one statement each.
///
/// A failing accept does not sink the others: the batch is then run again with a savepoint
/// around each. A lost connection fails the whole batch with ``StoreUnavailableError`` (nothing
/// was committed); the next batch reconnects.
final class PGAcceptWriter: Sendable {
    struct Operation {
        /// Runs inside the batch transaction; returns the transports to wake and what to do after the commit.
        var run: (PGConnection) throws -> (wake: [String], after: () -> Void)
        var fail: (any Error) -> Void
        /// An accept without an idempotency key: stored with the others of its batch in one
        /// statement (``run`` is the fallback when that statement fails).
        var plain: PlainAccept? = nil
        var succeed: () -> Void = {}
    }

    /// The rows of one accept, as text, for the batch `INSERT`.
    struct PlainAccept: Sendable {
        /// id, app, topic, content, deliveries, created_at.
        var notification: [String?]
        /// Per delivery: token, user, transport, state, reason, message_id, fallback, stream_device.
        var deliveries: [[String?]]
        var wake: [String]
    }

    private let worker: BlockingWorker<Operation>
    private let stats: Locked<(commits: Int, operations: Int, roundTrips: Int)>

    /// Starts the writer thread.
    /// - Parameters:
    ///   - node: this node (``PostgresDeliveryQueue/nodeID``), stored as the deliveries' `accepted_by`.
    ///   - committed: told after each commit which transports got work (this node's workers wake
    ///     at once; other nodes' through the coalesced `NOTIFY`).
    init(conninfo: String, node: String, maxBatch: Int, committed: @escaping @Sendable (Set<String>) -> Void,
         observe: @escaping @Sendable (Int, Double, Int) -> Void) {
        let stats = Locked((commits: 0, operations: 0, roundTrips: 0))
        self.stats = stats
        // The connection and the wake-up coalescer belong to the writer thread.
        let local = ThreadConfined(WriterThread(conninfo: conninfo, node: node, committed: committed, observe: observe, stats: stats))
        worker = BlockingWorker(name: "herald-pg-accepts", maxBatch: maxBatch, body: .init(
            run: { local.value.runBatch($0) },
            // A wake-up held back is sent when its window ends, even with no accept to carry it.
            idle: { local.value.secondsUntilHeldWakes() },
            tick: { local.value.sendHeldWakes() },
            finished: { local.value.db = nil }))
        local.confine(to: worker.thread)
    }

    /// Accepts waiting for their commit.
    var waiting: Int { worker.waiting }

    var isClosed: Bool { worker.isClosed }

    /// Commits, accepts committed, and statements sent (round trips) so far.
    var statistics: (commits: Int, operations: Int, roundTrips: Int) { stats.withLock { $0 } }

    /// Stores a key-less accept in the next group commit, batched with the others in one
    /// statement; `fallback` stores it alone (when the batch statement fails).
    func accept<T: Sendable>(_ plain: PlainAccept, result: T, fallback: @escaping (PGConnection) throws -> (T, [String])) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit(Operation(run: { db in
                let (value, wake) = try fallback(db)
                return (wake, { continuation.resume(returning: value) })
            }, fail: { continuation.resume(throwing: $0) }, plain: plain, succeed: { continuation.resume(returning: result) }))
        }
    }

    /// Runs `body` in the next group commit and returns its result once committed.
    func perform<T: Sendable>(_ body: @escaping (PGConnection) throws -> (T, [String])) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit(Operation(run: { db in
                let (value, wake) = try body(db)
                return (wake, { continuation.resume(returning: value) })
            }, fail: { continuation.resume(throwing: $0) }))
        }
    }

    private func submit(_ op: Operation) {
        if !worker.submit(op) { op.fail(StoreError("the queue is closed")) }
    }

    /// Stops taking work, finishes what is queued, and stops the thread.
    func close() {
        worker.close()
    }
}

/// What only the accept writer's thread touches: its connection, the wake-up coalescer, and
/// the batches it runs.
private struct WriterThread {
    typealias Operation = PGAcceptWriter.Operation
    typealias PlainAccept = PGAcceptWriter.PlainAccept

    let conninfo: String
    let node: String
    let committed: @Sendable (Set<String>) -> Void
    let observe: @Sendable (Int, Double, Int) -> Void
    let stats: Locked<(commits: Int, operations: Int, roundTrips: Int)>
    var db: PGConnection? = nil
    /// See ``WakeCoalescer``.
    var wakes = WakeCoalescer()

    init(conninfo: String, node: String, committed: @escaping @Sendable (Set<String>) -> Void,
         observe: @escaping @Sendable (Int, Double, Int) -> Void, stats: Locked<(commits: Int, operations: Int, roundTrips: Int)>) {
        self.conninfo = conninfo
        self.node = node
        self.committed = committed
        self.observe = observe
        self.stats = stats
    }

    /// Seconds until the earliest held wake-up is due (`nil`: none is held).
    func secondsUntilHeldWakes() -> Double? {
        guard let due = wakes.nextDue else { return nil }
        return Double(Int64(due) - Int64(DispatchTime.now().uptimeNanoseconds)) / 1e9
    }

    mutating func runBatch(_ batch: [Operation]) {
        let start = DispatchTime.now().uptimeNanoseconds
        let db: PGConnection
        do {
            if let d = self.db { db = d } else { db = try PGConnection(conninfo); self.db = db }
        } catch {
            for op in batch { op.fail(error) }
            return
        }
        var outcome = transaction(batch, db: db, isolated: false)
        if case .retryIsolated = outcome { outcome = transaction(batch, db: db, isolated: true) }
        guard case .committed(let done, let statements) = outcome else { return }
        stats.withLock {
            $0.commits += 1
            $0.operations += batch.count
            $0.roundTrips += statements
        }
        observe(batch.count, Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9, statements)
        for after in done { after() }
    }

    /// Sends the wake-ups whose window ended (a statement of its own, committed at once).
    mutating func sendHeldWakes() {
        let due = wakes.take(Set(), now: DispatchTime.now().uptimeNanoseconds)
        guard !due.isEmpty else { return }
        do {
            if db == nil { db = try PGConnection(conninfo) }
            try db!.execute("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t", [PostgresSchema.channel, PGArray.text(due)])
        } catch {
            // The listeners wake every transport when they reconnect; the workers poll too.
        }
    }

    private mutating func transaction(_ batch: [Operation], db: PGConnection, isolated: Bool) -> WriterBatchOutcome {
        let sentBefore = db.executed
        func exec(_ sql: String, _ p: [String?] = []) throws {
            try db.execute(sql, p)
        }
        if !isolated, batch.allSatisfy({ $0.plain != nil }) {
            // The common case, key-less accepts only: one statement, committed on its own (no
            // BEGIN, no separate pg_notify, no COMMIT: one round trip for the whole batch).
            let plain = batch.map { $0.plain! }
            let wake = wakes.take(Set(plain.flatMap(\.wake)), now: DispatchTime.now().uptimeNanoseconds)
            do {
                try db.execute(PGAcceptWriter.batchInsertAndNotify, PGAcceptWriter.batchParameters(plain, node: node) + [PostgresSchema.channel, PGArray.text(wake)],
                               prepared: true)
                committed(Set(plain.flatMap(\.wake)))
                return .committed(batch.map(\.succeed), statements: db.executed - sentBefore)
            } catch let error as StoreUnavailableError {
                for op in batch { op.fail(error) }
                return .abandoned
            } catch {
                return .retryIsolated
            }
        }
        do { try exec("BEGIN") } catch {
            for op in batch { op.fail(error) }
            return .abandoned
        }
        var done: [(after: () -> Void, fail: (any Error) -> Void)] = []
        var wake = Set<String>()
        var told = Set<Int>()   // failed on their own (isolated): already answered
        // Key-less accepts: all in one statement (unless isolating a failure).
        let batched = isolated ? [] : batch.indices.filter { batch[$0].plain != nil }
        if batched.count > 1 {
            do {
                try db.execute(PGAcceptWriter.batchInsert, PGAcceptWriter.batchParameters(batched.map { batch[$0].plain! }, node: node), prepared: true)
                for i in batched {
                    wake.formUnion(batch[i].plain!.wake)
                    done.append((batch[i].succeed, batch[i].fail))
                }
            } catch let error as StoreUnavailableError {
                _ = try? db.execute("ROLLBACK")
                for op in batch { op.fail(error) }
                return .abandoned
            } catch {
                _ = try? db.execute("ROLLBACK")
                return .retryIsolated
            }
        }
        for (index, op) in batch.enumerated() where !(batched.count > 1 && op.plain != nil) {
            do {
                if isolated { try exec("SAVEPOINT op") }
                do {
                    let (w, after) = try op.run(db)
                    if isolated { try exec("RELEASE op") }
                    wake.formUnion(w)
                    done.append((after, op.fail))
                } catch let error as StoreUnavailableError {
                    throw error
                } catch {
                    guard isolated else {
                        _ = try? db.execute("ROLLBACK")
                        return .retryIsolated
                    }
                    try exec("ROLLBACK TO op")
                    told.insert(index)
                    op.fail(error)
                }
            } catch {
                // The connection is gone (or a savepoint failed): nothing is committed.
                _ = try? db.execute("ROLLBACK")
                for (i, op) in batch.enumerated() where !told.contains(i) { op.fail(error) }
                return .abandoned
            }
        }
        do {
            let notify = wakes.take(wake, now: DispatchTime.now().uptimeNanoseconds)
            if !notify.isEmpty {
                try exec("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t", [PostgresSchema.channel, PGArray.text(notify)])
            }
            try exec("COMMIT")
            if !wake.isEmpty { committed(wake) }
        } catch {
            _ = try? db.execute("ROLLBACK")
            for d in done { d.fail(error) }
            return .abandoned
        }
        return .committed(done.map(\.after), statements: db.executed - sentBefore)
    }
}

extension PGAcceptWriter {
    /// Many notifications and their deliveries in one statement: the notifications' columns and
    /// the deliveries' columns each travel as arrays (deliveries name their notification's id).
    static let batchInsert = "WITH n AS (\(insertNotifications)) \(insertDeliveries)"

    /// ``batchInsert`` and the wake-ups (`$17` the channel, `$18` the transports: the parameters
    /// after ``batchParameters``) in one statement: run outside a transaction it commits on its
    /// own, notifications included.
    static let batchInsertAndNotify = """
        WITH n AS (\(insertNotifications)), d AS (\(insertDeliveries) RETURNING 1)
        SELECT pg_notify($17, t) FROM unnest($18::text[]) AS t
        """

    private static let insertNotifications = """
        INSERT INTO notifications (id, app, topic, content, deliveries, created_at)
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::bigint[])
        RETURNING seq, id, created_at
        """

    private static let insertDeliveries = """
        INSERT INTO deliveries (notification, token, "user", transport, state, attempts,
                                next_attempt_at, last_reason, message_id, updated_at, fallback, stream_device, accepted_by)
        SELECT n.seq, r.token, r.u, r.transport, r.state, 0,
               CASE WHEN r.state = 'queued' THEN n.created_at END, r.reason, r.message_id, n.created_at, r.fallback, r.stream_device, $16
        FROM unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])
            WITH ORDINALITY AS r(nid, token, u, transport, state, reason, message_id, fallback, stream_device, ord)
        JOIN n ON n.id = r.nid
        ORDER BY r.ord
        """

    /// `$1`–`$15` the notifications' and deliveries' columns as arrays, `$16` this node.
    static func batchParameters(_ accepts: [PlainAccept], node: String) -> [String?] {
        var params: [String?] = []
        for column in 0..<6 { params.append(PGArray.text(accepts.map { $0.notification[column] })) }
        for column in -1..<8 {
            var values: [String?] = []
            for a in accepts {
                for d in a.deliveries { values.append(column < 0 ? a.notification[0] : d[column]) }
            }
            params.append(PGArray.text(values))
        }
        return params + [node]
    }
}

/// Coalesces the accept writer's `pg_notify` wake-ups: a transport woken less than `window`
/// ago is not woken again at once but when the window ends (by the next commit or on its own).
/// The node's own workers are woken directly at every commit; this bounds how late another
/// node's idle workers hear of work.
///
/// Every `NOTIFY` wakes every node's listener and workers, and PostgreSQL serialises the commits
/// of notifying transactions (a database-wide lock held through the commit's WAL flush), so one
/// per commit costs the most when several nodes commit at once, and wakes every node's workers
/// to race for a few rows (many claims of one or two deliveries). Busy workers claim until the
/// queue is empty and need no wake-up; another node's idle one is woken at most `window` late.
struct WakeCoalescer {
    /// Nanoseconds (100 ms).
    var window: UInt64 = 100_000_000
    private var last: [String: UInt64] = [:]
    private var held: Set<String> = []

    /// When the earliest held wake-up is due (monotonic nanoseconds), `nil` when none is held.
    var nextDue: UInt64? { held.compactMap { last[$0].map { $0 + window } }.min() }

    /// The transports to wake now: those of `wanted` not woken within the window, and held ones
    /// whose window ended; the others of `wanted` are held. Marks the returned ones woken.
    mutating func take(_ wanted: Set<String>, now: UInt64) -> [String] {
        var out: [String] = []
        for t in wanted.union(held) {
            if let at = last[t], now < at + window {
                held.insert(t)
            } else {
                held.remove(t)
                last[t] = now
                out.append(t)
            }
        }
        return out.sorted()
    }
}
