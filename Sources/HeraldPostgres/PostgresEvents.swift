import FoundationEssentials
import Glibc
import HeraldCore

/// The event outbox on PostgreSQL (tables `events`, `events_sequence` and `webhook_cursors`, schema step 10).
///
/// An event is inserted without a number, in the transaction of the change it reports (no lock:
/// deliveries never wait for the outbox). Readers number the committed ones (``number(_:)``) in
/// a transaction that holds one advisory lock (``PostgresSchema/Lock/events``) to its commit, so
/// numbers become visible in increasing order on every node and a reader that saw `seq` N never
/// finds a smaller one later (a sequence alone hands out numbers in one order and commits them
/// in another).
enum PostgresEvents {
    /// Numbers the committed events that have no number yet, in insertion order (up to 10,000).
    static func number(_ db: PGConnection) throws {
        guard try db.execute("SELECT 1 FROM events WHERE seq IS NULL LIMIT 1", prepared: true).count > 0 else { return }
        try db.transaction {
            _ = try db.execute("SELECT pg_advisory_xact_lock($1)", [String(PostgresSchema.Lock.events.rawValue)])
            _ = try db.execute("""
                WITH p AS (SELECT pos, row_number() OVER (ORDER BY pos) AS rn FROM events WHERE seq IS NULL ORDER BY pos LIMIT 10000),
                     b AS (SELECT last FROM events_sequence),
                     u AS (UPDATE events e SET seq = b.last + p.rn FROM p, b WHERE e.pos = p.pos RETURNING 1)
                UPDATE events_sequence SET last = last + (SELECT count(*) FROM u)
                """, prepared: true)
        }
    }

    /// Appends `events`, unnumbered (inside the caller's transaction).
    static func append(_ events: [EventRecord], db: PGConnection) throws {
        guard !events.isEmpty else { return }
        _ = try db.execute("""
            INSERT INTO events (id, type, app, created_at, data)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[])
            """, [PGArray.text(events.map(\.id)), PGArray.text(events.map(\.type)), PGArray.text(events.map(\.app)),
                  PGArray.ints(events.map { $0.createdAt.millisecondsSince1970 }), PGArray.text(events.map(\.data))], prepared: true)
    }

    /// The events of deliveries `ids` that reached `states` (final, or parked), read from their rows.
    static func deliveryEvents(_ changes: [(id: Int64, state: DeliveryState, reason: String?)], now: Date, db: PGConnection) throws -> [EventRecord] {
        let reported = changes.filter { EventType(delivery: $0.state) != nil }
        guard !reported.isEmpty else { return [] }
        let rows = try db.execute("""
            SELECT d.id, n.app, n.id, d.message_id, d."user", d.token, d.transport, d.attempts, d.receipt, n.idempotency_key
            FROM deliveries d JOIN notifications n ON n.seq = d.notification WHERE d.id = ANY($1::bigint[])
            """, [PGArray.ints(reported.map(\.id))], prepared: true)
        var byID: [Int64: (String, DeliveryEventFacts)] = [:]
        for i in 0..<rows.count {
            byID[rows.int(i, 0)] = (rows.string(i, 1), DeliveryEventFacts(
                notification: rows.string(i, 2), delivery: rows.string(i, 3), user: rows[i, 4], device: rows.string(i, 5),
                route: rows[i, 6], attempts: Int(rows.int(i, 7)), reason: nil, receipt: rows[i, 8], idempotencyKey: rows[i, 9]))
        }
        return reported.compactMap { c in
            guard var (app, facts) = byID[c.id], let type = EventType(delivery: c.state) else { return nil }
            facts.reason = c.reason
            return EventRecord(type: type.rawValue, createdAt: now, app: app, data: facts.json())
        }
    }
}

/// The event outbox over a pool of the driver's (the daemon's, closed with its storage) or of its own (the CLI's).
final class PostgresEventOutbox: EventOutbox, Sendable {
    let pool: PGPool
    private let ownsPool: Bool

    init(pool: PGPool, ownsPool: Bool) {
        self.pool = pool
        self.ownsPool = ownsPool
    }

    func close() async { if ownsPool { await pool.close() } }

    func append(_ events: [EventRecord]) async throws {
        guard !events.isEmpty else { return }
        try await pool.run { db in
            try PostgresEvents.append(events, db: db)
        }
    }

    func events(after sequence: Int64, limit: Int) async throws -> [EventRecord] {
        try await pool.run { db in
            try PostgresEvents.number(db)
            let rows = try db.execute("SELECT seq, id, type, app, created_at, data FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                                      [String(sequence), String(limit)], prepared: true)
            return (0..<rows.count).map { i in
                EventRecord(sequence: rows.int(i, 0), id: rows.string(i, 1), type: rows.string(i, 2),
                            createdAt: Date(millisecondsSince1970: rows.int(i, 4)), app: rows.string(i, 3), data: rows.string(i, 5))
            }
        }
    }

    func leaseWebhook(_ webhook: String, node: String, now: Date, until: Date) async throws -> Int64? {
        try await pool.run { db in
            try PostgresEvents.number(db)
            _ = try db.execute("""
                INSERT INTO webhook_cursors (webhook, acknowledged)
                VALUES ($1, (SELECT last FROM events_sequence)) ON CONFLICT (webhook) DO NOTHING
                """, [webhook])
            let rows = try db.execute("""
                UPDATE webhook_cursors SET holder = $2, lease_until = $3
                WHERE webhook = $1 AND (holder IS NULL OR holder = $2 OR lease_until IS NULL OR lease_until <= $4)
                RETURNING acknowledged
                """, [webhook, node, String(until.millisecondsSince1970), String(now.millisecondsSince1970)])
            return rows.count > 0 ? rows.int(0, 0) : nil
        }
    }

    func acknowledge(webhook: String, node: String, through sequence: Int64) async throws -> Bool {
        try await pool.run { db in
            try db.execute("""
                UPDATE webhook_cursors SET acknowledged = GREATEST(acknowledged, $3) WHERE webhook = $1 AND holder = $2
                """, [webhook, node, String(sequence)]).affected > 0
        }
    }

    func releaseWebhook(_ webhook: String, node: String) async throws {
        try await pool.run { db in
            _ = try db.execute("UPDATE webhook_cursors SET holder = NULL, lease_until = NULL WHERE webhook = $1 AND holder = $2", [webhook, node])
        }
    }

    func webhookCursor(_ webhook: String) async throws -> Int64? {
        try await pool.run { db in
            let rows = try db.execute("SELECT acknowledged FROM webhook_cursors WHERE webhook = $1", [webhook])
            return rows.count > 0 ? rows.int(0, 0) : nil
        }
    }

    func pruneEvents(createdBefore cutoff: Date) async throws -> Int {
        var total = 0
        while true {
            let n = try await pool.run { db in
                try db.execute("DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE created_at < $1 ORDER BY seq LIMIT 5000)",
                               [String(cutoff.millisecondsSince1970)]).affected
            }
            total += n
            if n < 5000 { return total }
        }
    }
}
