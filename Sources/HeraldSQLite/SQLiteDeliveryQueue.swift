internal import CSQLite
import FoundationEssentials
import Glibc
import HeraldCore

/// The daemon's durable queue in the SQLite file (tables `notifications` and `deliveries`).
///
/// Every write goes through one writer thread that groups concurrent operations into one
/// transaction (see ``SQLiteGroupCommitWriter``): accepts, claims and outcomes from many
/// requests and workers share each commit. Reads (status, idempotency look-ups) use a second
/// connection, which WAL lets run beside the writer.
///
/// - Important: one daemon per database file. Claims left `sent` by a previous run are
///   treated as interrupted when the queue opens (see ``interrupted(transport:)``).
///
/// It numbers claimed batches in the inbox in the claim's own transaction
/// (``InboxNumberingQueue``) once the inbox sharing its writer is attached (the driver does).
public final class SQLiteDeliveryQueue: InboxNumberingQueue, Sendable {
    /// The one writer connection and thread (the inbox shares it).
    let writer: SQLiteGroupCommitWriter
    /// The reader connection, on its own thread: a read may wait for a lock (busyTimeout).
    private let reader: ThreadConfined<SQLiteDatabase>
    private let readerThread = BlockingThread(name: "herald-sqlite-read")
    private let counts: Locked<[String: QueueDepth]>
    /// Notifications waiting for claims, and the writer's statements (prepared once, see
    /// ``WriterStatements``): both confined to the writer thread.
    private let writerCache: ThreadConfined<NotificationCache>
    private let writerStatements = ThreadConfined(WriterStatements())
    /// The inbox on this queue's writer, for numbered claims (``attach(inbox:)``).
    private let inbox = Locked<SQLiteInboxStore?>(nil)
    /// Transports whose deliveries accepts number and claim (``numberAtAccept(transport:_:)``).
    private let acceptNumbering = Locked<[String: AcceptNumbering]>([:])
    /// Appends of accepts' entries queued and not yet handed over, per lending.
    private let pendingAppends = Locked<[UUID: Int]>([:])
    /// The inbox trims accepts leave for later (``appendEntries(of:)``).
    private let deferredTrims: DeferredInboxTrims
    /// How long an accept's inbox trims wait before they go to the writer (merged with later ones).
    public static let inboxTrimDelay: TimeInterval = 1

    /// Users whose deferred inbox trim has not gone to the writer yet.
    var pendingInboxTrims: Int { deferredTrims.pendingCount }
    private var cache: NotificationCache {
        get { writerCache.value }
        _modify { yield &writerCache.value }
    }
    private var statements: WriterStatements {
        get { writerStatements.value }
        _modify { yield &writerStatements.value }
    }

    /// Turns off SQLite's allocator statistics (a global mutex on every allocation) for this
    /// process. Call before the first database opens (the daemon does); later calls do nothing.
    public static func tuneProcess() {
        _ = herald_sqlite3_disable_memstatus()
    }

    /// Opens the queue in the database at `path` (migrating it), marking claims of a previous
    /// run as interrupted.
    /// - Parameters:
    ///   - maxCommitBatch: most operations in one group commit.
    ///   - metrics: receives `herald_queue_commits_total` and the commit size and time histograms.
    ///   - inboxTrimDelay: how long an accept's inbox trims wait before they go to the writer.
    public init(path: String, synchronous: SQLiteStorageConfiguration.Synchronous = .full, busyTimeout: TimeInterval = 5,
                maxCommitBatch: Int = 2000, metrics: MetricsRegistry = MetricsRegistry(),
                inboxTrimDelay: TimeInterval = SQLiteDeliveryQueue.inboxTrimDelay) throws {
        if path == ":memory:" {
            throw StoreError("the delivery queue needs a database file (a reader connection runs beside the writer); \":memory:\" cannot be shared")
        }
        let db = try SQLiteDatabase(path: path, synchronous: synchronous.rawValue.uppercased(), busyTimeout: busyTimeout)
        try HeraldSchema.migrations.apply(to: db)
        // SQLite checks `deliveries.state IN (…seven states…)` by building a temporary index for
        // every statement that writes `state` (a new pager each time: more than half the cost of
        // a claim or an outcome). This connection writes states only from `DeliveryState`, so
        // the check cannot fail here; other connections (the CLI) still enforce it.
        try db.execute("PRAGMA ignore_check_constraints = ON", operation: "tune the queue writer")
        // Claims of an earlier run: their lease is void, their outcome unknown.
        try db.execute("UPDATE deliveries SET lease_until = NULL WHERE state = 'sent' AND lease_until IS NOT NULL",
                       operation: "mark interrupted claims")
        // One daemon per file: a webhook lease left by an earlier run is void (its sender is gone).
        try db.execute("UPDATE webhook_cursors SET holder = NULL, lease_until = NULL WHERE holder IS NOT NULL",
                       operation: "release webhook leases of an earlier run")
        var depth: [String: QueueDepth] = [:]
        let s = try db.statement("""
            SELECT transport, state, count(*) FROM deliveries
            WHERE state IN ('queued', 'sent') AND transport IS NOT NULL GROUP BY transport, state
            """)
        while try s.step() {
            let n = Int(s.int64(2))
            if s.string(1) == "queued" { depth[s.string(0), default: QueueDepth()].queued += n } else {
                depth[s.string(0), default: QueueDepth()].inFlight += n
            }
        }
        counts = Locked(depth)
        reader = ThreadConfined(try SQLiteDatabase(path: path, synchronous: synchronous.rawValue.uppercased(), busyTimeout: busyTimeout),
                                to: readerThread.thread)
        let commits = metrics.counter("herald_queue_commits_total", help: "Group commits of the queue's writer.")
        let sizes = metrics.histogram("herald_queue_commit_operations", help: "Operations (accepts, claims, outcomes) per group commit.",
                                      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000])
        let times = metrics.histogram("herald_queue_commit_seconds", help: "Time of one group commit, fsync included.")
        let cache = ThreadConfined(NotificationCache(limit: 20_000))
        writerCache = cache
        writer = SQLiteGroupCommitWriter(db: db, maxBatch: maxCommitBatch, onRollback: { cache.value.removeAll() }) { n, seconds in
            commits.increment()
            sizes.observe(Double(n))
            times.observe(seconds)
        }
        cache.confine(to: writer.thread)
        writerStatements.confine(to: writer.thread)
        let writer = writer, inbox = inbox
        deferredTrims = DeferredInboxTrims(delay: inboxTrimDelay) { trims in
            guard !trims.isEmpty, let store = inbox.withLock({ $0 }) else { return }
            writer.submit(.init(isAccept: false, run: { db in
                try store.trim(trims, db: db)
                return {}
            }, fail: { _ in }))
        }
    }

    /// Opens the queue a configuration names.
    public convenience init(configuration: HeraldConfiguration, metrics: MetricsRegistry = MetricsRegistry()) throws {
        let storage = try configuration.sqliteStorage()
        try self.init(path: storage.path, synchronous: storage.synchronous,
                      busyTimeout: storage.busyTimeout, maxCommitBatch: configuration.server.maxCommitBatch,
                      metrics: metrics)
    }

    /// Accepts waiting for their group commit (the API refuses new ones past a bound).
    public var waitingAccepts: Int { writer.waitingAccepts }

    /// Group commits so far and the operations they carried.
    public var commitStatistics: (commits: Int, operations: Int) {
        let s = writer.statistics
        return (s.commits, s.operations)
    }

    public func depth() -> [String: QueueDepth] { counts.withLock { $0 } }

    private func adjust(_ changes: [String: (queued: Int, inFlight: Int)]) {
        guard !changes.isEmpty else { return }
        counts.withLock { c in
            for (transport, change) in changes {
                var d = c[transport, default: QueueDepth()]
                d.queued += change.queued
                d.inFlight += change.inFlight
                c[transport] = d
            }
        }
    }

    // MARK: Accepting

    public func enqueue(_ n: QueuedNotification, idempotencySince: Date) async throws -> EnqueueReceipt {
        // Everything that needs no database is prepared here, off the writer thread.
        let contentJSON = String(decoding: n.content.apiJSON, as: UTF8.self)
        let rows = n.deliveries.map(DeliveryRow.init)
        var added: [String: (queued: Int, inFlight: Int)] = [:]
        for d in n.deliveries where d.state == .queued {
            if let t = d.transport { added[t, default: (0, 0)].queued += 1 }
        }
        let waiting = added.values.reduce(0) { $0 + $1.queued }
        let created = n.createdAt.millisecondsSince1970
        let takers = acceptTakers(for: n)
        return try await writer.perform(isAccept: true) { [self, added] db in
            if let key = n.idempotencyKey {
                let s = try db.statement("SELECT seq, id, deliveries, created_at FROM notifications WHERE app = ? AND idempotency_key = ?")
                s.bind(1, n.app).bind(2, key)
                if try s.step() {
                    if s.int64(3) >= idempotencySince.millisecondsSince1970 {
                        let receipt = EnqueueReceipt(id: s.string(1), deliveries: Int(s.int64(2)), replayed: true)
                        s.reset()
                        return (receipt, {})
                    }
                    let old = s.int64(0)
                    let clear = try db.statement("UPDATE notifications SET idempotency_key = NULL WHERE seq = ?")
                    clear.bind(1, old)
                    try clear.run()
                }
            }
            var rows = rows
            var taken = take(takers, &rows)
            let insert = try statements.insertNotification(db)
            insert.bind(1, n.id).bind(2, n.app).bind(3, n.topic).bind(4, contentJSON).bind(5, n.idempotencyKey)
                .bind(6, n.deliveries.count).bind(7, created)
            try insert.run()
            let seq = db.lastInsertRowID
            // Row ids are needed only for what was taken (handed over with them).
            let needsIDs = taken.contains { $0.count > 0 }
            var ids = [Int64](repeating: 0, count: needsIDs ? rows.count : 0)
            var next = 0
            while next < rows.count {
                let chunk = rows[next..<min(next + WriterStatements.maxRowsPerInsert, rows.count)]
                let s = try statements.insertDeliveries(chunk.count, db)
                var p: Int32 = 1
                for r in chunk {
                    s.bind(p, seq).bind(p + 1, r.token).bind(p + 2, r.user).bind(p + 3, r.transport)
                        .bind(p + 4, r.state).bind(p + 5, r.queued ? created : nil).bind(p + 6, r.reason)
                        .bind(p + 7, r.messageID).bind(p + 8, created).bind(p + 9, r.fallback).bind(p + 10, r.streamDevice)
                        .bind(p + 11, Int64(r.leaseUntil == nil ? 0 : 1)).bind(p + 12, r.leaseUntil)
                    p += WriterStatements.deliveryColumns
                }
                try s.run()
                if needsIDs {
                    // The rows of one INSERT take consecutive ids, the last one reported.
                    let last = db.lastInsertRowID
                    for (k, i) in chunk.indices.enumerated() { ids[i] = last - Int64(chunk.count - 1 - k) }
                }
                next += chunk.count
            }
            var added = added
            var claimedAtAccept = 0
            for i in taken.indices where taken[i].count > 0 {
                taken[i].assign(ids)
                let k = taken[i].count
                added[taken[i].transport, default: (0, 0)].queued -= k
                added[taken[i].transport, default: (0, 0)].inFlight += k
                claimedAtAccept += k
            }
            let receipt = EnqueueReceipt(id: n.id, deliveries: n.deliveries.count, replayed: false)
            // Cached now, not after the commit: a claim in the same group commit reads it. A
            // rollback clears the cache (row ids can be reused after one).
            cache.insert(seq, CachedNotification(id: n.id, app: n.app, topic: n.topic, content: n.content,
                                                 createdAt: n.createdAt), unclaimed: waiting - claimedAtAccept)
            return (receipt, { [self, added, taken] in
                adjust(added)
                for t in taken where t.count > 0 { appendEntries(of: t) }
            })
        }
    }

    /// Takes what `takers` take (inside the accept's transaction; it writes nothing, it marks
    /// rows still to be inserted). When a numbering fails, the accept goes on without any: its
    /// deliveries are stored `queued` and claimed as before, so a broken numbering never
    /// refuses a notification.
    private func take(_ takers: [AcceptTaker], _ rows: inout [DeliveryRow]) -> [AcceptTaker] {
        guard !takers.isEmpty else { return [] }
        var marked = rows
        guard let taken = try? takers.map({ try $0.take(&marked) }) else { return [] }
        rows = marked
        return taken
    }

    /// The transports that number this notification's deliveries at accept, each with the
    /// deliveries it may take (first attempts, built off the writer thread).
    private func acceptTakers(for n: QueuedNotification) -> [AcceptTaker] {
        let registered = acceptNumbering.withLock { $0 }
        guard !registered.isEmpty else { return [] }
        var candidates: [String: [Int]] = [:]
        for (i, d) in n.deliveries.enumerated() where d.state == .queued {
            if let t = d.transport, registered[t] != nil { candidates[t, default: []].append(i) }
        }
        guard let store = inbox.withLock({ $0 }) else { return [] }
        return candidates.map { transport, indexes in
            let numbering = registered[transport]!
            let deliveries: [Delivery] = indexes.map { i in
                let d = n.deliveries[i]
                var delivery = Delivery(id: 0, notificationID: n.id, app: n.app, topic: n.topic, token: d.token, user: d.user,
                                        transport: transport, attempt: 1, messageID: d.messageID, content: n.content,
                                        fallback: d.fallback, streamDevice: d.streamDevice)
                delivery.acceptedAt = n.createdAt
                return delivery
            }
            let leaseUntil = n.createdAt.addingTimeInterval(numbering.lease()).millisecondsSince1970
            return AcceptTaker(queue: self, lending: numbering.id, transport: transport, numbering: numbering.numbering, store: store,
                               indexes: indexes, deliveries: deliveries, createdAt: n.createdAt, leaseUntil: leaseUntil,
                               batchSize: numbering.batchSize())
        }
    }

    /// One transport's share of an accept: the deliveries it may take, then (on the writer
    /// thread) the ones it took, claimed in the accept's rows, with their entries to append.
    private struct AcceptTaker: Sendable {
        let queue: SQLiteDeliveryQueue
        /// The lending it was read from (checked again on the writer thread).
        let lending: UUID
        let transport: String
        let numbering: any InboxNumbering
        let store: SQLiteInboxStore
        /// Indexes into the notification's deliveries (and rows).
        let indexes: [Int]
        var deliveries: [Delivery]
        let createdAt: Date
        let leaseUntil: Int64
        /// Most deliveries appended and handed over at once.
        let batchSize: Int
        /// Of `indexes`/`deliveries`, the positions taken, with their entries to append.
        private(set) var taken: [(position: Int, entry: InboxEntry.New)] = []
        var count: Int { taken.count }

        /// Looks up the candidates' entries (inside the accept's transaction) and marks the
        /// rows of those with one claimed. Takes nothing when the lending was withdrawn since the
        /// accept read it (its worker is stopping and would not write them): then the rows stay
        /// `queued`.
        func take(_ rows: inout [DeliveryRow]) throws -> AcceptTaker {
            guard queue.stillLent(lending, transport: transport) else { return self }
            let wanted = numbering.entries(for: deliveries, now: createdAt)
            guard wanted.count == deliveries.count else {
                throw StoreError("inbox numbering returned \(wanted.count) entries for \(deliveries.count) deliveries")
            }
            var result = self
            for (p, entry) in wanted.enumerated() {
                guard let entry else { continue }
                result.taken.append((position: p, entry: entry))
                rows[indexes[p]].claim(leaseUntil: leaseUntil)
            }
            return result
        }

        /// Gives the taken deliveries their row ids (known once inserted).
        mutating func assign(_ ids: [Int64]) {
            for (p, _) in taken { deliveries[p].id = ids[indexes[p]] }
        }

        /// The taken deliveries and their entries to append, in batches of `size`.
        func parts(of size: Int) -> [(claimed: [ClaimedDelivery], entries: [InboxEntry.New])] {
            stride(from: 0, to: taken.count, by: max(1, size)).map { start in
                let slice = taken[start..<min(start + max(1, size), taken.count)]
                return (slice.map { ClaimedDelivery(delivery: deliveries[$0.position], acceptedAt: createdAt) }, slice.map(\.entry))
            }
        }
    }

    /// Appends the inbox entries of what an accept took, in batches, each in a writer operation
    /// and a commit of its own: the first is queued now (on the writer thread, right after the
    /// accept's commit), each next one once the previous has committed, so the group commit does
    /// not fold them into one and the first batch's writes overlap the next batch's append.
    /// Each batch is handed over once its entries are committed; one whose append fails is
    /// handed over without numbers (its deliveries are `sent`; the transport's own path numbers
    /// them or reports them not written).
    ///
    /// The trim (each user's entries past `inbox.maxPerUser`, one `DELETE` per user) is not part
    /// of these appends: in a daemon that has run a while every append of a broadcast trims every
    /// user, and that took a fifth of the append's time in front of each batch's writes, then as
    /// much again beside the writes to the streams. The trims go to ``DeferredInboxTrims``, which
    /// hands them to the writer ``inboxTrimDelay`` later, merged with any that came meanwhile.
    private func appendEntries(of t: AcceptTaker) {
        let parts = t.parts(of: t.batchSize)
        guard !parts.isEmpty else { return }
        pendingAppends.withLock { $0[t.lending, default: 0] += parts.count }
        appendEntries(of: t, parts: parts, at: 0, trims: [])
    }

    private func appendEntries(of t: AcceptTaker, parts: [(claimed: [ClaimedDelivery], entries: [InboxEntry.New])], at index: Int,
                               trims: [SQLiteInboxStore.Trim]) {
        guard index < parts.count else {
            deferredTrims.add(trims)
            return
        }
        if writer.isClosed {
            // Nothing more will be appended: the rest goes over without numbers, in a loop (a
            // refused submit would call back into this method once per part).
            for part in parts[index...] { handOver(part.claimed, [InboxEntry?](repeating: nil, count: part.claimed.count), of: t) }
            return
        }
        let part = parts[index]
        writer.submit(.init(isAccept: false, run: { db in
            let (appended, more) = try t.store.appendDeferringTrim(part.entries, maxPerUser: t.numbering.inboxMaxPerUser, db: db)
            return { [self] in
                handOver(part.claimed, appended.map { Optional($0) }, of: t)
                appendEntries(of: t, parts: parts, at: index + 1, trims: trims + more)
            }
        }, fail: { [self] _ in
            handOver(part.claimed, [InboxEntry?](repeating: nil, count: part.claimed.count), of: t)
            appendEntries(of: t, parts: parts, at: index + 1, trims: trims)
        }))
    }

    /// Hands one batch of an accept over and counts it done (``stopNumberingAtAccept(transport:_:)`` waits for it).
    private func handOver(_ claimed: [ClaimedDelivery], _ entries: [InboxEntry?], of t: AcceptTaker) {
        t.numbering.committed(NumberedClaim(claimed: claimed, entries: entries, atAccept: true))
        pendingAppends.withLock { p in
            p[t.lending, default: 1] -= 1
            if p[t.lending] == 0 { p[t.lending] = nil }
        }
    }

    public func receipt(app: String, idempotencyKey: String, since: Date) async throws -> EnqueueReceipt? {
        try await read { db in
            let s = try db.statement("SELECT id, deliveries, created_at FROM notifications WHERE app = ? AND idempotency_key = ?")
            s.bind(1, app).bind(2, idempotencyKey)
            defer { s.reset() }
            guard try s.step(), s.int64(2) >= since.millisecondsSince1970 else { return nil }
            return EnqueueReceipt(id: s.string(0), deliveries: Int(s.int64(1)), replayed: true)
        }
    }

    // MARK: Working

    public func claim(transport: String, limit: Int, now: Date, leaseUntil: Date) async throws -> [ClaimedDelivery] {
        try await writer.perform { [self] db in
            let deliveries = try claimRows(transport: transport, limit: limit, now: now, leaseUntil: leaseUntil, db: db)
            let n = deliveries.count
            return (deliveries, { [self] in
                if n > 0 { adjust([transport: (-n, n)]) }
            })
        }
    }

    public func numberAtAccept(transport: String, _ numbering: AcceptNumbering) {
        acceptNumbering.withLock { $0[transport] = numbering }
    }

    public func stopNumberingAtAccept(transport: String, _ numbering: AcceptNumbering) async {
        // On the writer thread, after every operation queued before it: an accept checks its
        // lending there too (``AcceptTaker/take(_:)``), so after this operation no accept takes
        // more. The appends those accepts queued after their commits run after it: wait for
        // them too (each hands its batch over before it counts as done).
        repeat {
            _ = try? await writer.perform { [self] _ in
                acceptNumbering.withLock { if $0[transport]?.id == numbering.id { $0[transport] = nil } }
                return ((), {})
            }
            acceptNumbering.withLock { if $0[transport]?.id == numbering.id { $0[transport] = nil } }
        } while pendingAppends.withLock({ $0[numbering.id] != nil }) && !writer.isClosed
        // A closed writer (the queue closed before the worker stopped, past its deadline) still
        // runs the appends it had queued: their batches may come after the worker's line ended,
        // and their deliveries stay `sent` until the next start settles them.
    }

    /// Whether `lending` is still the numbering accepts use for `transport`.
    fileprivate func stillLent(_ lending: UUID, transport: String) -> Bool {
        acceptNumbering.withLock { $0[transport]?.id == lending }
    }

    /// Lets numbered claims append to `inbox`, which must share this queue's writer.
    func attach(inbox store: SQLiteInboxStore) {
        inbox.withLock { $0 = store }
    }

    /// The claim and its inbox numbering in one operation of the writer, so in one transaction:
    /// when either fails, both are rolled back (the group commit retries the others alone).
    public func claim(transport: String, limit: Int, now: Date, leaseUntil: Date, numbering: any InboxNumbering) async throws -> NumberedClaim {
        guard let store = inbox.withLock({ $0 }) else {
            throw StoreError("numbered claims need the inbox on the queue's writer (SQLiteStorageDriver attaches it)")
        }
        return try await writer.perform { [self] db in
            let claimed = try claimRows(transport: transport, limit: limit, now: now, leaseUntil: leaseUntil, db: db)
            let deliveries = claimed.map { c in
                var d = c.delivery
                d.acceptedAt = c.acceptedAt
                return d
            }
            let wanted = numbering.entries(for: deliveries, now: now)
            guard wanted.count == claimed.count else { throw StoreError("inbox numbering returned \(wanted.count) entries for \(claimed.count) deliveries") }
            let indexes = wanted.indices.filter { wanted[$0] != nil }
            let appended = try store.appendInTransaction(indexes.map { wanted[$0]! }, maxPerUser: numbering.inboxMaxPerUser, db: db)
            var entries = [InboxEntry?](repeating: nil, count: claimed.count)
            for (i, e) in zip(indexes, appended) { entries[i] = e }
            let n = claimed.count
            let batch = NumberedClaim(claimed: claimed, entries: entries)
            return (batch, { [self] in
                if n > 0 { adjust([transport: (-n, n)]) }
                if !appended.isEmpty { numbering.committed(batch) }
            })
        }
    }

    /// Selects up to `limit` due deliveries of `transport` and marks them `sent` with the lease
    /// (on the writer thread, inside its transaction).
    private func claimRows(transport: String, limit: Int, now: Date, leaseUntil: Date, db: SQLiteDatabase) throws -> [ClaimedDelivery] {
        // A SELECT, then an UPDATE by row id for each: `UPDATE … WHERE id IN (SELECT …)
        // RETURNING` builds two temporary tables per call, far costlier for small batches.
        let due = try statements.due(db)
        due.bind(1, transport).bind(2, now.millisecondsSince1970).bind(3, limit)
        var rows = try Self.rows(due)
        let mark = try statements.markSent(db)
        for i in rows.indices {
            mark.reset()
            mark.bind(1, leaseUntil.millisecondsSince1970).bind(2, now.millisecondsSince1970).bind(3, rows[i].id)
            try mark.run()
            rows[i].attempts += 1
        }
        rows.sort { $0.id < $1.id }
        return try deliveries(rows, transport: transport, claiming: true, db: db)
    }

    public func interrupted(transport: String) async throws -> [ClaimedDelivery] {
        try await writer.perform { [self] db in
            let s = try db.statement("""
                SELECT id, notification, token, user, attempts, message_id, fallback, stream_device FROM deliveries
                WHERE state = 'sent' AND transport = ? AND lease_until IS NULL ORDER BY id
                """)
            s.bind(1, transport)
            return (try deliveries(Self.rows(s), transport: transport, claiming: false, db: db), {})
        }
    }

    /// A delivery row as claims read it.
    private struct ClaimRow {
        var id: Int64
        var seq: Int64
        var token: String
        var user: String?
        var attempts: Int
        var messageID: String
        var fallback: String?
        var streamDevice: String?
    }

    /// Rows `id, notification, token, user, attempts, message_id, fallback, stream_device`, read to the end.
    private static func rows(_ s: SQLiteStatement) throws -> [ClaimRow] {
        var rows: [ClaimRow] = []
        while try s.step() {
            rows.append(ClaimRow(id: s.int64(0), seq: s.int64(1), token: s.string(2), user: s.optionalString(3),
                                 attempts: Int(s.int64(4)), messageID: s.string(5), fallback: s.optionalString(6),
                                 streamDevice: s.optionalString(7)))
        }
        return rows
    }

    /// Builds deliveries from rows. Runs on the writer thread (it uses the cache); `claiming`:
    /// rows just claimed, whose first attempts the cache counts (retries only read it).
    private func deliveries(_ rows: [ClaimRow], transport: String, claiming: Bool, db: SQLiteDatabase) throws -> [ClaimedDelivery] {
        var result: [ClaimedDelivery] = []
        result.reserveCapacity(rows.count)
        var loaded: [Int64: CachedNotification] = [:]   // not cached: read once per claim
        for r in rows {
            let n: CachedNotification
            let cached = claiming ? (r.attempts == 1 ? cache.claim(r.seq) : cache.peek(r.seq)) : nil
            if let c = cached ?? loaded[r.seq] {
                n = c
            } else {
                n = try notification(seq: r.seq, db: db)
                loaded[r.seq] = n
            }
            result.append(ClaimedDelivery(delivery: Delivery(id: r.id, notificationID: n.id, app: n.app, topic: n.topic, token: r.token, user: r.user,
                                   transport: transport, attempt: r.attempts, messageID: UUID(lowercasedString: r.messageID) ?? UUIDSource.random(),
                                   content: n.content, fallback: r.fallback, streamDevice: r.streamDevice), acceptedAt: n.createdAt))
        }
        return result
    }

    /// Reads a notification's row (one that is not cached).
    private func notification(seq: Int64, db: SQLiteDatabase) throws -> CachedNotification {
        try db.withStatement("SELECT id, app, topic, content, created_at FROM notifications WHERE seq = ?") { s in
            s.bind(1, seq)
            guard try s.step() else { throw StoreError("queue: delivery refers to notification \(seq), which is gone") }
            let id = s.string(0), app = s.string(1), topic = s.string(2)
            let content: NotificationContent
            do { content = try NotificationContent.fromAPIJSON(Array(s.string(3).utf8)) } catch {
                throw StoreError("queue: notification \(id) has content this Herald cannot read: \(error)")
            }
            return CachedNotification(id: id, app: app, topic: topic, content: content,
                                      createdAt: Date(millisecondsSince1970: s.int64(4)))
        }
    }

    public func complete(_ completions: [DeliveryCompletion], now: Date) async throws {
        guard !completions.isEmpty else { return }
        try await writer.perform { [self] db in
            // No RETURNING (a temporary table per statement): the row count says whether the
            // attempt still matched, and the transport is read only then.
            let finish = try statements.finish(db), retry = try statements.retry(db), transportOf = try statements.transport(db)
            let nowMs = now.millisecondsSince1970
            var changes: [String: (queued: Int, inFlight: Int)] = [:]
            for c in completions {
                let requeued = c.state == .queued || c.state == .parked
                var left: String? = nil
                if c.transport != nil {
                    // Rerouted: the transport it leaves loses the claim, the new one gains a queued delivery.
                    transportOf.reset()
                    transportOf.bind(1, c.id)
                    if try transportOf.step() { left = transportOf.optionalString(0) }
                    transportOf.reset()
                }
                if requeued {
                    retry.reset()
                    retry.bind(1, c.reason).bind(2, (c.retryAt ?? now).millisecondsSince1970).bind(3, nowMs).bind(4, c.id)
                        .bind(5, c.attempt).bind(6, c.countsAttempt ? 0 : 1).bind(7, c.state == .parked ? 1 : 0).bind(8, c.transport)
                        .bind(9, c.historyEntry?.storedJSON)
                    try retry.run()
                } else {
                    finish.reset()
                    finish.bind(1, c.state.rawValue).bind(2, c.reason).bind(3, c.receipt).bind(4, nowMs).bind(5, c.id).bind(6, c.attempt)
                        .bind(7, c.historyEntry?.storedJSON)
                    try finish.run()
                }
                guard db.changes > 0 else { continue }
                // The event of the state just written, in the same transaction (issue 38).
                try SQLiteEvents.appendDelivery(id: c.id, state: c.state, reason: c.reason, now: now, db: db)
                transportOf.reset()
                transportOf.bind(1, c.id)
                if try transportOf.step(), let transport = transportOf.optionalString(0) {
                    changes[left ?? transport, default: (0, 0)].inFlight -= 1
                    if requeued { changes[transport, default: (0, 0)].queued += 1 }
                }
                transportOf.reset()
            }
            return ((), { [self] in adjust(changes) })
        }
    }

    public func renewLeases(_ claims: [ClaimedDelivery], until: Date) async throws {
        guard !claims.isEmpty else { return }
        try await writer.perform { [self] db in
            let renew = try statements.renew(db)
            for c in claims {
                renew.reset()
                renew.bind(1, until.millisecondsSince1970).bind(2, c.delivery.id).bind(3, c.delivery.attempt)
                try renew.run()
            }
            return ((), {})
        }
    }

    /// The row's stream device (``Delivery/streamKey``) is `parameter`: each side of the `OR`
    /// has its partial index (`deliveries_parked`, `deliveries_parked_stream`).
    private static func streamKeyIs(_ parameter: String) -> String {
        "((token = \(parameter) AND stream_device IS NULL) OR stream_device = \(parameter))"
    }

    public func unpark(transport: String, token: String, now: Date) async throws -> Int {
        // Most devices that connect have nothing parked: look first, on the reader, and leave
        // the writer (and its fsync) to the ones that do.
        let any = try await read { db in
            try db.withStatement("SELECT 1 FROM deliveries WHERE parked = 1 AND transport = ?1 AND \(Self.streamKeyIs("?2")) AND state = 'queued' LIMIT 1") { s in
                s.bind(1, transport).bind(2, token)
                return try s.step()
            }
        }
        guard any else { return 0 }
        return try await writer.perform { db in
            let s = try db.statement("""
                UPDATE deliveries SET next_attempt_at = ?1 WHERE parked = 1 AND transport = ?2 AND \(Self.streamKeyIs("?3")) AND state = 'queued'
                """)
            s.bind(1, now.millisecondsSince1970).bind(2, transport).bind(3, token)
            try s.run()
            return (db.changes, {})
        }
    }

    public func expireParked(transport: String, app: String, keepPerUser: Int, now: Date) async throws -> Int {
        try await writer.perform { [self] db in
            let s = try db.statement("""
                UPDATE deliveries SET state = 'expired', parked = 0, next_attempt_at = NULL, updated_at = ?1, last_reason = ?2
                WHERE id IN (
                    SELECT id FROM (
                        SELECT d.id, row_number() OVER (PARTITION BY d.user ORDER BY d.id DESC) AS rank
                        FROM deliveries d JOIN notifications n ON n.seq = d.notification
                        WHERE d.parked = 1 AND d.state = 'queued' AND d.transport = ?3 AND n.app = ?4)
                    WHERE rank > ?5)
                RETURNING id
                """)
            let reason = MemoryDeliveryQueue.inboxFull(keepPerUser)
            s.bind(1, now.millisecondsSince1970).bind(2, reason).bind(3, transport).bind(4, app)
                .bind(5, Int64(keepPerUser))
            var expired: [Int64] = []
            while try s.step() { expired.append(s.int64(0)) }
            s.reset()
            let n = expired.count
            // Their events, in the same transaction (issue 38).
            for id in expired { try SQLiteEvents.appendDelivery(id: id, state: .expired, reason: reason, now: now, db: db) }
            return (n, { [self] in if n > 0 { adjust([transport: (-n, 0)]) } })
        }
    }

    public func reclaimExpiredLeases(now: Date) async throws -> Int {
        try await writer.perform { [self] db in
            let s = try db.statement("""
                UPDATE deliveries SET state = 'queued', lease_until = NULL, next_attempt_at = ?1, updated_at = ?1,
                    last_reason = 'lease expired before the transport answered'
                WHERE state = 'sent' AND lease_until IS NOT NULL AND lease_until <= ?1 RETURNING transport
                """)
            s.bind(1, now.millisecondsSince1970)
            var changes: [String: (queued: Int, inFlight: Int)] = [:]
            var n = 0
            while try s.step() {
                n += 1
                if let t = s.optionalString(0) {
                    changes[t, default: (0, 0)].queued += 1
                    changes[t, default: (0, 0)].inFlight -= 1
                }
            }
            return (n, { [self] in adjust(changes) })
        }
    }

    public func nextDue(transport: String) async throws -> Date? {
        try await read { db in
            let s = try db.statement("SELECT min(next_attempt_at) FROM deliveries WHERE state = 'queued' AND transport = ?")
            s.bind(1, transport)
            defer { s.reset() }
            guard try s.step(), let ms = s.optionalInt64(0) else { return nil }
            return Date(millisecondsSince1970: ms)
        }
    }

    // MARK: Reading and housekeeping

    /// Runs `body` with the reader connection on its own thread.
    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        try await readerThread.run { [reader] in try body(reader.value) }
    }

    public func status(notificationID: String) async throws -> NotificationStatus? {
        try await read { db in
            let n = try db.statement("SELECT seq, app, created_at, idempotency_key FROM notifications WHERE id = ?")
            n.bind(1, notificationID)
            guard try n.step() else { return nil }
            let seq = n.int64(0), app = n.string(1), created = n.int64(2), key = n.optionalString(3)
            n.reset()
            let s = try db.statement("""
                SELECT id, token, user, transport, state, attempts, last_reason, message_id, updated_at, next_attempt_at, parked, receipt, history
                FROM deliveries WHERE notification = ? ORDER BY id
                """)
            s.bind(1, seq)
            var deliveries: [DeliveryStatus] = []
            while try s.step() {
                deliveries.append(DeliveryStatus(
                    id: s.int64(0), token: s.string(1), user: s.optionalString(2), transport: s.optionalString(3),
                    state: s.int64(10) == 1 && s.string(4) == "queued" ? .parked : DeliveryState(rawValue: s.string(4)) ?? .failed,
                    attempts: Int(s.int64(5)),
                    lastReason: s.optionalString(6), messageID: s.string(7), receipt: s.optionalString(11), updatedAt: Date(millisecondsSince1970: s.int64(8)),
                    nextAttemptAt: s.optionalInt64(9).map { Date(millisecondsSince1970: $0) },
                    history: DeliveryAttempt.history(stored: s.optionalString(12))))
            }
            return NotificationStatus(id: notificationID, app: app, createdAt: Date(millisecondsSince1970: created),
                                      idempotencyKey: key, deliveries: deliveries)
        }
    }

    public func prune(createdBefore cutoff: Date) async throws -> Int {
        var total = 0
        var cursor: Int64 = 0
        // Small chunks, each its own write, so accepts are never held up for long.
        while true {
            let (removed, next, done) = try await writer.perform { [self] db -> ((Int, Int64, Bool), () -> Void) in
                let s = try db.statement("SELECT seq, created_at FROM notifications WHERE seq > ? ORDER BY seq LIMIT 500")
                s.bind(1, cursor)
                var candidates: [Int64] = []
                var done = false
                var last = cursor
                while try s.step() {
                    if s.int64(1) >= cutoff.millisecondsSince1970 { done = true; break }
                    candidates.append(s.int64(0))
                    last = s.int64(0)
                }
                if candidates.count < 500 { done = true }
                let open = try db.statement("SELECT 1 FROM deliveries WHERE notification = ? AND state IN ('queued', 'sent') LIMIT 1")
                let deleteDeliveries = try db.statement("DELETE FROM deliveries WHERE notification = ?")
                let deleteNotification = try db.statement("DELETE FROM notifications WHERE seq = ?")
                var removed = 0
                var gone: [Int64] = []
                for seq in candidates {
                    open.reset()
                    open.bind(1, seq)
                    if try open.step() { continue }
                    deleteDeliveries.reset()
                    deleteDeliveries.bind(1, seq)
                    try deleteDeliveries.run()
                    removed += db.changes
                    deleteNotification.reset()
                    deleteNotification.bind(1, seq)
                    try deleteNotification.run()
                    gone.append(seq)
                }
                return ((removed, last, done), { [self] in for seq in gone { cache.remove(seq) } })
            }
            total += removed
            cursor = next
            if done { return total }
        }
    }

    public func ping() async throws {
        if writer.isClosed { throw StoreError("the queue is closed") }
        try await read { db in
            try db.withStatement("SELECT seq FROM notifications ORDER BY seq DESC LIMIT 1") { _ = try $0.step() }
        }
    }

    public func close() async {
        // The deferred trims go to the writer before it finishes what it holds.
        deferredTrims.close()
        writer.close()
    }
}
