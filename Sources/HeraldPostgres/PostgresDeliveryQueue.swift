import FoundationEssentials
import Glibc
import HeraldCore

/// The durable queue in PostgreSQL, shared by any number of Herald nodes.
///
/// - Accepts are group-committed by ``PGAcceptWriter`` (one statement each, one `COMMIT` per batch).
/// - Claims take due rows with `FOR UPDATE SKIP LOCKED` (two nodes never claim the same row),
///   mark them `sent` with a lease and count the attempt: the attempt is the claim's fencing
///   token. Outcomes and lease renewals match on `(id, attempts, state = 'sent')`, so a node
///   whose lease ran out (and whose delivery another node claimed again) changes nothing.
/// - A node that dies leaves its claims `sent` until their lease ends; then any node's
///   housekeeping (``reclaimExpiredLeases(now:)``, one node at a time under an advisory lock)
///   returns them to the queue and they are sent again, with the same `apns-id`.
/// - ``interrupted(transport:)`` is always empty here: on a shared queue a starting node cannot
///   tell a dead node's claims from a live node's, and only the node that sent a delivery could
///   check its own transport ledger. Lease expiry is the only path back (see docs/scale-out.md).
/// - ``depth()`` is the database's count, refreshed every second by the listener thread, plus
///   this node's own changes since; other nodes' changes show within a second.
public final class PostgresDeliveryQueue: DeliveryQueue, QueueWakeSource, @unchecked Sendable {
    let pool: PGPool
    private let writer: PGAcceptWriter
    private let listener: PGListener
    /// This run of this node, written to `deliveries.claimed_by` (for operators; fencing uses the attempt).
    public let nodeID: String
    private let counts = Locked([String: QueueDepth]())
    /// How long a delivery waits for the node that accepted it before any node claims it (a node
    /// that died or falls behind). Until then each node claims its own accepts, so the nodes'
    /// workers do not race for the rows of every commit (see docs/scale-out.md). A delivery to a
    /// device whose stream is open on this node is this node's at once (``streamHere(node:)``).
    static let affinity: TimeInterval = 1
    /// The content of this node's own accepts until their deliveries' first claim (no JSON to parse then).
    private let contents = Locked(AcceptedContentCache(limit: 20_000))

    /// Opens the queue (the schema must be migrated: see ``PostgresStorageDriver``).
    init(conninfo: String, pool: PGPool, maxCommitBatch: Int, metrics: MetricsRegistry) {
        self.pool = pool
        nodeID = UUIDSource.random().lowercasedString
        let commits = metrics.counter("herald_queue_commits_total", help: "Group commits of the queue's writer.")
        let sizes = metrics.histogram("herald_queue_commit_operations", help: "Operations (accepts, claims, outcomes) per group commit.",
                                      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000])
        let times = metrics.histogram("herald_queue_commit_seconds", help: "Time of one group commit, fsync included.")
        let statements = metrics.counter("herald_queue_accept_statements_total",
                                         help: "Statements (database round trips) the accept writer sent, BEGIN and COMMIT included (PostgreSQL).")
        let wake = Locked<PGListener?>(nil)
        writer = PGAcceptWriter(conninfo: conninfo, node: nodeID, maxBatch: maxCommitBatch, committed: { transports in
            wake.withLock { $0 }?.wakeLocally(transports)
        }) { n, seconds, sent in
            statements.increment(by: Int64(sent))
            commits.increment()
            sizes.observe(Double(n))
            times.observe(seconds)
        }
        let counts = self.counts
        listener = PGListener(conninfo: conninfo) { db in
            // Through the two partial indexes (the unfinished rows only), not a scan of the table.
            let r = try db.execute("""
                SELECT transport, 'queued', count(*) FROM deliveries WHERE state = 'queued' AND transport IS NOT NULL GROUP BY transport
                UNION ALL
                SELECT transport, 'sent', count(*) FROM deliveries
                WHERE lease_until IS NOT NULL AND state = 'sent' AND transport IS NOT NULL GROUP BY transport
                """, prepared: true)
            var depth: [String: QueueDepth] = [:]
            for i in 0..<r.count {
                if r.string(i, 1) == "queued" { depth[r.string(i, 0), default: QueueDepth()].queued += Int(r.int(i, 2)) } else {
                    depth[r.string(i, 0), default: QueueDepth()].inFlight += Int(r.int(i, 2))
                }
            }
            counts.withLock { $0 = depth }
        }
        let local = listener
        wake.withLock { $0 = local }
    }

    public func onWake(_ handler: @escaping @Sendable (Set<String>) -> Void) { listener.setHandler(handler) }

    public var waitingAccepts: Int { writer.waiting }

    /// Group commits, accepts and statements of the accept writer so far (for benchmarks).
    public var commitStatistics: (commits: Int, operations: Int, roundTrips: Int) { writer.statistics }

    public func depth() -> [String: QueueDepth] { counts.withLock { $0 } }

    private func adjust(_ transport: String?, queued: Int = 0, inFlight: Int = 0) {
        guard let transport else { return }
        counts.withLock { c in
            var d = c[transport, default: QueueDepth()]
            d.queued = max(0, d.queued + queued)
            d.inFlight = max(0, d.inFlight + inFlight)
            c[transport] = d
        }
    }

    // MARK: Accepting

    public func enqueue(_ n: QueuedNotification, idempotencySince: Date) async throws -> EnqueueReceipt {
        let content = String(decoding: n.content.apiJSON, as: UTF8.self)
        let created = String(n.createdAt.millisecondsSince1970)
        let d = n.deliveries
        var added: [String: Int] = [:]
        for p in d where p.state == .queued { if let t = p.transport { added[t, default: 0] += 1 } }
        let since = String(idempotencySince.millisecondsSince1970), node = nodeID
        // The accept on its own: a key's path, or the fallback when a batch statement fails.
        let store: (PGConnection) throws -> (EnqueueReceipt, [String]) = { [added] db in
            let arrays = [PGArray.text(d.map(\.token)), PGArray.text(d.map(\.user)),
                          PGArray.text(d.map(\.transport)), PGArray.text(d.map(\.state.rawValue)), PGArray.text(d.map(\.reason)),
                          PGArray.text(d.map { $0.messageID.lowercasedString }), PGArray.text(d.map(\.fallback)),
                          PGArray.text(d.map(\.streamDevice))]
            if let key = n.idempotencyKey {
                // A key older than the window is free again.
                try db.execute("UPDATE notifications SET idempotency_key = NULL WHERE app = $1 AND idempotency_key = $2 AND created_at < $3",
                               [n.app, key, since])
            }
            let inserted = try db.execute("""
                WITH n AS (
                    INSERT INTO notifications (id, app, topic, content, idempotency_key, deliveries, created_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7)
                    ON CONFLICT (app, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING seq),
                d AS (
                    INSERT INTO deliveries (notification, token, "user", transport, state, attempts,
                                            next_attempt_at, last_reason, message_id, updated_at, fallback, stream_device, accepted_by)
                    SELECT n.seq, r.token, r.u, r.transport, r.state, 0,
                           CASE WHEN r.state = 'queued' THEN $7::bigint END, r.reason, r.message_id, $7::bigint, r.fallback, r.stream_device, $16
                    FROM n, unnest($8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])
                        WITH ORDINALITY AS r(token, u, transport, state, reason, message_id, fallback, stream_device, ord)
                    ORDER BY r.ord)
                SELECT seq FROM n
                """, [n.id, n.app, n.topic, content, n.idempotencyKey, String(d.count), created] + arrays + [node])
            if inserted.count == 0, let key = n.idempotencyKey {
                let first = try db.execute("SELECT id, deliveries FROM notifications WHERE app = $1 AND idempotency_key = $2", [n.app, key])
                guard first.count == 1 else { throw StoreError("queue: idempotency key \(key) conflicts but its notification is gone; retry") }
                return (EnqueueReceipt(id: first.string(0, 0), deliveries: Int(first.int(0, 1)), replayed: true), [])
            }
            return (EnqueueReceipt(id: n.id, deliveries: d.count, replayed: false), added.keys.sorted())
        }
        let receipt: EnqueueReceipt
        // Cached before the commit: this node's workers are woken by the commit itself and may
        // claim before this accept returns. Taken out again when nothing was stored under the id.
        let waiting = added.values.reduce(0, +)
        if waiting > 0 { contents.withLock { $0.insert(n.id, n.content, unclaimed: waiting) } }
        do {
            if n.idempotencyKey == nil {
                let plain = PGAcceptWriter.PlainAccept(
                    notification: [n.id, n.app, n.topic, content, String(d.count), created],
                    deliveries: d.map { [$0.token, $0.user, $0.transport, $0.state.rawValue, $0.reason, $0.messageID.lowercasedString, $0.fallback, $0.streamDevice] },
                    wake: added.keys.sorted())
                receipt = try await writer.accept(plain, result: EnqueueReceipt(id: n.id, deliveries: d.count, replayed: false), fallback: store)
            } else {
                receipt = try await writer.perform(store)
            }
        } catch {
            if waiting > 0 { contents.withLock { $0.remove(n.id) } }
            throw error
        }
        if receipt.replayed {
            if waiting > 0 { contents.withLock { $0.remove(n.id) } }
        } else {
            for (t, k) in added { adjust(t, queued: k) }
        }
        return receipt
    }

    public func receipt(app: String, idempotencyKey: String, since: Date) async throws -> EnqueueReceipt? {
        try await pool.run { db in
            let r = try db.execute("SELECT id, deliveries FROM notifications WHERE app = $1 AND idempotency_key = $2 AND created_at >= $3",
                                   [app, idempotencyKey, String(since.millisecondsSince1970)])
            return r.count == 0 ? nil : EnqueueReceipt(id: r.string(0, 0), deliveries: Int(r.int(0, 1)), replayed: true)
        }
    }

    // MARK: Working

    public func claim(transport: String, limit: Int, now: Date, leaseUntil: Date) async throws -> [ClaimedDelivery] {
        let node = nodeID, contents = self.contents
        let claimed: [ClaimedDelivery] = try await pool.run { db in
            let r = try db.execute("""
                WITH c AS (
                    UPDATE deliveries SET state = 'sent', parked = false, attempts = attempts + 1, lease_until = $4, updated_at = $2, claimed_by = $5
                    WHERE id IN (SELECT d.id FROM deliveries d WHERE d.state = 'queued' AND d.transport = $1 AND d.next_attempt_at <= $2
                                 AND (d.accepted_by IS NULL OR d.accepted_by = $5 OR d.next_attempt_at <= $6 OR \(Self.streamHere(node: "$5")))
                                 AND NOT \(Self.streamElsewhere(node: "$5"))
                                 ORDER BY d.next_attempt_at, d.id LIMIT $3 FOR UPDATE SKIP LOCKED)
                    RETURNING id, notification, token, "user", attempts, message_id, fallback, stream_device)
                SELECT c.id, c.token, c."user", NULL, c.attempts, c.message_id, n.seq, n.id, n.app, n.topic, n.content, n.created_at,
                       c.fallback, c.stream_device
                FROM c JOIN notifications n ON n.seq = c.notification ORDER BY c.id
                """, [transport, String(now.millisecondsSince1970), String(limit), String(leaseUntil.millisecondsSince1970), node,
                      String(now.addingTimeInterval(-Self.affinity).millisecondsSince1970)], prepared: true)
            return try Self.deliveries(r, transport: transport, cache: contents)
        }
        if !claimed.isEmpty { adjust(transport, queued: -claimed.count, inFlight: claimed.count) }
        return claimed
    }

    /// A delivery `d` whose device has a live stream open on another live node and none on this
    /// one (`node`, a parameter): that node's local transport writes it (``PostgresPresence``).
    /// No presence row names a push transport, so for those it is one index probe that finds nothing.
    static func streamElsewhere(node: String) -> String {
        """
        EXISTS (SELECT 1 FROM presence p WHERE p.transport = d.transport AND p.device = coalesce(d.stream_device, d.token) AND p.node <> \(node)
                AND p.seen >= now() - make_interval(secs => \(PostgresPresence.timeToLive))
                AND p.app = (SELECT n.app FROM notifications n WHERE n.seq = d.notification)
                AND NOT EXISTS (SELECT 1 FROM presence m WHERE m.app = p.app AND m.device = p.device AND m.node = \(node)))
        """
    }

    /// A delivery `d` whose device has a live stream open on this node (`node`, a parameter): this
    /// node claims it at once whichever node accepted it (see ``affinity``).
    static func streamHere(node: String) -> String {
        """
        EXISTS (SELECT 1 FROM presence m WHERE m.transport = d.transport AND m.device = coalesce(d.stream_device, d.token) AND m.node = \(node)
                AND m.app = (SELECT n.app FROM notifications n WHERE n.seq = d.notification))
        """
    }

    /// Rows `id, token, user, (unused), attempts, message_id, seq, nid, app, topic, content, created_at, fallback,
    /// stream_device`.
    private static func deliveries(_ r: PGRows, transport: String, cache: Locked<AcceptedContentCache>) throws -> [ClaimedDelivery] {
        var parsed: [Int64: NotificationContent] = [:]
        var result: [ClaimedDelivery] = []
        result.reserveCapacity(r.count)
        // Rows of this node's own accepts (first attempts) whose content is still cached.
        let cached: [Int: NotificationContent] = cache.withLock { c in
            var found: [Int: NotificationContent] = [:]
            for i in 0..<r.count where r.int(i, 4) == 1 { if let hit = c.claim(r.string(i, 7)) { found[i] = hit } }
            return found
        }
        for i in 0..<r.count {
            let seq = r.int(i, 6)
            let content: NotificationContent
            if let c = cached[i] ?? parsed[seq] { content = c } else {
                do {
                    content = try NotificationContent.fromAPIJSON(Array(r.string(i, 10).utf8))
                } catch {
                    throw StoreError("queue: notification \(r.string(i, 7)) has content this Herald cannot read: \(error)")
                }
                parsed[seq] = content
            }
            result.append(ClaimedDelivery(delivery: Delivery(
                id: r.int(i, 0), notificationID: r.string(i, 7), app: r.string(i, 8), topic: r.string(i, 9), token: r.string(i, 1),
                user: r[i, 2], transport: transport,
                attempt: Int(r.int(i, 4)), messageID: UUID(lowercasedString: r.string(i, 5)) ?? UUIDSource.random(),
                content: content, fallback: r[i, 12], streamDevice: r[i, 13]), acceptedAt: Date(millisecondsSince1970: r.int(i, 11))))
        }
        return result
    }

    public func interrupted(transport: String) async throws -> [ClaimedDelivery] { [] }

    public func complete(_ completions: [DeliveryCompletion], now: Date) async throws {
        guard !completions.isEmpty else { return }
        let c = completions
        // A parked delivery is stored `queued` with `parked` set.
        let waits: (DeliveryCompletion) -> Bool = { $0.state == .queued || $0.state == .parked }
        let params = [PGArray.ints(c.map { $0.id }), PGArray.ints(c.map { $0.attempt }),
                      PGArray.text(c.map { waits($0) ? DeliveryState.queued.rawValue : $0.state.rawValue }),
                      PGArray.text(c.map { $0.reason }), PGArray.text(c.map { $0.receipt }),
                      PGArray.ints(c.map { waits($0) ? ($0.retryAt ?? now).millisecondsSince1970 : nil }),
                      PGArray.ints(c.map { waits($0) && !$0.countsAttempt ? 1 : 0 }), String(now.millisecondsSince1970),
                      PGArray.text(c.map { $0.state == .parked ? "t" : "f" }), PGArray.text(c.map { $0.transport }),
                      PGArray.text(c.map { $0.historyEntry?.storedJSON })]
        // One statement for the batch; the fencing is in the WHERE clause.
        let reports = c.contains { $0.state != .queued }
        let changed = try await pool.run { db in
            let update = { try db.execute("""
                UPDATE deliveries d SET state = c.state, last_reason = c.reason, receipt = COALESCE(c.receipt, d.receipt),
                    lease_until = NULL, claimed_by = NULL, next_attempt_at = c.retry_at, updated_at = $8, attempts = d.attempts - c.give_back,
                    parked = c.parked::boolean, transport = COALESCE(c.transport, d.transport),
                    fallback = CASE WHEN c.transport IS NULL THEN d.fallback END,
                    history = CASE WHEN c.entry IS NULL THEN d.history
                                   WHEN d.history IS NULL THEN jsonb_build_array(c.entry::jsonb)
                                   WHEN jsonb_array_length(d.history) >= \(DeliveryAttempt.kept) THEN (d.history - 0) || jsonb_build_array(c.entry::jsonb)
                                   ELSE d.history || jsonb_build_array(c.entry::jsonb) END
                FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::int[], $9::text[], $10::text[], $11::text[])
                    AS c(id, attempt, state, reason, receipt, retry_at, give_back, parked, transport, entry)
                WHERE d.id = c.id AND d.attempts = c.attempt AND d.state = 'sent'
                RETURNING d.transport, d.state, CASE WHEN c.transport IS NULL THEN d.transport
                                                     ELSE (SELECT o.transport FROM deliveries o WHERE o.id = d.id) END, d.id
                """, params, prepared: true) }
            guard reports else { return try update() }
            // Final and parked states are reported: their events go in the same transaction (issue 38).
            return try db.transaction {
                let rows = try update()
                let byID = Dictionary(c.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                let written = (0..<rows.count).compactMap { i in byID[rows.int(i, 3)].map { (id: $0.id, state: $0.state, reason: $0.reason) } }
                try PostgresEvents.append(try PostgresEvents.deliveryEvents(written, now: now, db: db), db: db)
                return rows
            }
        }
        for i in 0..<changed.count {
            // Column 2 is the row's transport before the update (a reroute moves it to another
            // transport; only then is the old row looked up).
            adjust(changed[i, 2] ?? changed[i, 0], inFlight: -1)
            adjust(changed[i, 0], queued: changed.string(i, 1) == "queued" ? 1 : 0)
        }
    }

    public func unpark(transport: String, token: String, now: Date) async throws -> Int {
        let n = try await pool.run { db in
            try db.execute("""
                UPDATE deliveries SET next_attempt_at = $1, accepted_by = NULL WHERE parked AND transport = $2
                    AND ((token = $3 AND stream_device IS NULL) OR stream_device = $3) AND state = 'queued'
                RETURNING id
                """, [String(now.millisecondsSince1970), transport, token]).count
        }
        if n > 0 { try? await pool.run { db in _ = try db.execute("SELECT pg_notify($1, $2)", [PostgresSchema.channel, transport]) } }
        return n
    }

    public func expireParked(transport: String, app: String, keepPerUser: Int, now: Date) async throws -> Int {
        let reason = MemoryDeliveryQueue.inboxFull(keepPerUser)
        let n = try await pool.run { db in try db.transaction {
            let rows = try db.execute("""
                UPDATE deliveries SET state = 'expired', parked = false, next_attempt_at = NULL, updated_at = $1, last_reason = $2
                WHERE id IN (
                    SELECT id FROM (
                        SELECT d.id, row_number() OVER (PARTITION BY d."user" ORDER BY d.id DESC) AS rank
                        FROM deliveries d JOIN notifications n ON n.seq = d.notification
                        WHERE d.parked AND d.state = 'queued' AND d.transport = $3 AND n.app = $4) ranked
                    WHERE rank > $5)
                RETURNING id
                """, [String(now.millisecondsSince1970), reason, transport, app, String(keepPerUser)])
            // Their events, in the same transaction (issue 38).
            let expired = (0..<rows.count).map { (id: rows.int($0, 0), state: DeliveryState.expired, reason: Optional(reason)) }
            try PostgresEvents.append(try PostgresEvents.deliveryEvents(expired, now: now, db: db), db: db)
            return rows.count
        } }
        if n > 0 { adjust(transport, queued: -n) }
        return n
    }

    public func renewLeases(_ claims: [ClaimedDelivery], until: Date) async throws {
        guard !claims.isEmpty else { return }
        let params = [PGArray.ints(claims.map { $0.delivery.id }), PGArray.ints(claims.map { $0.delivery.attempt }),
                      String(until.millisecondsSince1970)]
        try await pool.run { db in
            try db.execute("""
                UPDATE deliveries d SET lease_until = $3 FROM unnest($1::bigint[], $2::int[]) AS c(id, attempt)
                WHERE d.id = c.id AND d.attempts = c.attempt AND d.state = 'sent'
                """, params, prepared: true)
        }
    }

    public func reclaimExpiredLeases(now: Date) async throws -> Int {
        let ms = String(now.millisecondsSince1970)
        let r: PGRows = try await pool.run { db in
            try db.transaction {
                // One node at a time; the others skip this round.
                guard try db.execute("SELECT pg_try_advisory_xact_lock($1)", [String(PostgresSchema.Lock.housekeeping.rawValue)]).string(0, 0) == "t" else {
                    return PGRows(rows: [], affected: 0)
                }
                let r = try db.execute("""
                    UPDATE deliveries SET state = 'queued', lease_until = NULL, claimed_by = NULL, accepted_by = NULL, next_attempt_at = $1, updated_at = $1,
                        last_reason = 'lease expired before the transport answered'
                    WHERE state = 'sent' AND lease_until <= $1 RETURNING transport
                    """, [ms])
                let transports = Set((0..<r.count).compactMap { r[$0, 0] })
                if !transports.isEmpty {
                    try db.execute("SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t", [PostgresSchema.channel, PGArray.text(transports.sorted())])
                }
                return r
            }
        }
        for i in 0..<r.count { adjust(r[i, 0], queued: 1, inFlight: -1) }
        return r.count
    }

    /// When ``claim(transport:limit:now:leaseUntil:)`` can next take something here: this node's
    /// own (and unowned) deliveries when due, other nodes' ``affinity`` later.
    public func nextDue(transport: String) async throws -> Date? {
        let node = nodeID, later = String(Int64(Self.affinity * 1000))
        return try await pool.run { db in
            // What another node's stream will take is not this node's to wait for.
            try db.execute("""
                SELECT LEAST(
                    (SELECT min(d.next_attempt_at) FROM deliveries d WHERE d.state = 'queued' AND d.transport = $1
                     AND (d.accepted_by IS NULL OR d.accepted_by = $2 OR \(Self.streamHere(node: "$2")))
                     AND NOT \(Self.streamElsewhere(node: "$2"))),
                    (SELECT min(d.next_attempt_at) FROM deliveries d WHERE d.state = 'queued' AND d.transport = $1
                     AND NOT \(Self.streamElsewhere(node: "$2"))) + $3::bigint)
                """, [transport, node, later], prepared: true)
                .optionalInt(0, 0).map { Date(millisecondsSince1970: $0) }
        }
    }

    // MARK: Reading and housekeeping

    public func status(notificationID: String) async throws -> NotificationStatus? {
        try await pool.run { db in
            let n = try db.execute("SELECT seq, app, created_at, idempotency_key FROM notifications WHERE id = $1", [notificationID])
            guard n.count == 1 else { return nil }
            let s = try db.execute("""
                SELECT id, token, "user", transport, CASE WHEN parked AND state = 'queued' THEN 'parked' ELSE state END,
                       attempts, last_reason, message_id, updated_at, next_attempt_at, receipt, history::text
                FROM deliveries WHERE notification = $1 ORDER BY id
                """, [n.string(0, 0)])
            let deliveries = (0..<s.count).map { i in
                DeliveryStatus(id: s.int(i, 0), token: s.string(i, 1), user: s[i, 2], transport: s[i, 3],
                               state: DeliveryState(rawValue: s.string(i, 4)) ?? .failed, attempts: Int(s.int(i, 5)),
                               lastReason: s[i, 6], messageID: s.string(i, 7), receipt: s[i, 10], updatedAt: Date(millisecondsSince1970: s.int(i, 8)),
                               nextAttemptAt: s.optionalInt(i, 9).map { Date(millisecondsSince1970: $0) },
                               history: DeliveryAttempt.history(stored: s[i, 11]))
            }
            return NotificationStatus(id: notificationID, app: n.string(0, 1), createdAt: Date(millisecondsSince1970: n.int(0, 2)),
                                      idempotencyKey: n[0, 3], deliveries: deliveries)
        }
    }

    public func prune(createdBefore cutoff: Date) async throws -> Int {
        let ms = String(cutoff.millisecondsSince1970)
        var total = 0
        // Chunks of 500 notifications, each its own short transaction under the housekeeping lock.
        while true {
            let (removed, more): (Int, Bool) = try await pool.run { db in
                try db.transaction {
                    guard try db.execute("SELECT pg_try_advisory_xact_lock($1)", [String(PostgresSchema.Lock.housekeeping.rawValue)]).string(0, 0) == "t" else {
                        return (0, false)
                    }
                    // The deliveries explicitly, in the same statement (no foreign key since schema step 5).
                    let r = try db.execute("""
                        WITH n AS (
                            DELETE FROM notifications WHERE seq IN (
                                SELECT seq FROM notifications n WHERE created_at < $1
                                AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification = n.seq AND d.state IN ('queued', 'sent'))
                                ORDER BY seq LIMIT 500)
                            RETURNING seq, deliveries),
                        d AS (DELETE FROM deliveries WHERE notification IN (SELECT seq FROM n))
                        SELECT deliveries FROM n
                        """, [ms])
                    return ((0..<r.count).reduce(0) { $0 + Int(r.int($1, 0)) }, r.count == 500)
                }
            }
            total += removed
            if !more { return total }
        }
    }

    public func ping() async throws {
        if writer.isClosed { throw StoreError("the queue is closed") }
        try await pool.run { db in _ = try db.execute("SELECT 1") }
    }

    public func close() async {
        writer.close()
        listener.stop()
    }
}
