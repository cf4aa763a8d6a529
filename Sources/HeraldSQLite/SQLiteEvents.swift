import FoundationEssentials
import Glibc
import HeraldCore

/// Writes to and reads from the event outbox (table `events`, schema step 9) and the webhooks'
/// cursors (`webhook_cursors`). The appends run inside the transaction of the write they report.
enum SQLiteEvents {
    /// Appends `event` on `db`, inside the caller's transaction.
    static func append(_ event: EventRecord, db: SQLiteDatabase) throws {
        try db.withStatement("INSERT INTO events (id, type, app, created_at, data) VALUES (?, ?, ?, ?, ?)") { s in
            s.bind(1, event.id).bind(2, event.type).bind(3, event.app).bind(4, event.createdAt.millisecondsSince1970).bind(5, event.data)
            try s.run()
        }
    }

    /// Appends the event of delivery `id` reaching `state` (final, or parked), reading what the
    /// event tells from the row just written; nothing for a state no event reports.
    static func appendDelivery(id: Int64, state: DeliveryState, reason: String?, now: Date, db: SQLiteDatabase) throws {
        guard let type = EventType(delivery: state) else { return }
        let found: (String, DeliveryEventFacts)? = try db.withStatement("""
            SELECT n.app, n.id, d.message_id, d.user, d.token, d.transport, d.attempts, d.receipt, n.idempotency_key
            FROM deliveries d JOIN notifications n ON n.seq = d.notification WHERE d.id = ?
            """) { s in
            s.bind(1, id)
            guard try s.step() else { return nil }
            return (s.string(0), DeliveryEventFacts(notification: s.string(1), delivery: s.string(2), user: s.optionalString(3),
                                                    device: s.string(4), route: s.optionalString(5), attempts: Int(s.int64(6)),
                                                    reason: reason, receipt: s.optionalString(7), idempotencyKey: s.optionalString(8)))
        }
        guard let (app, facts) = found else { return }
        try append(EventRecord(type: type.rawValue, createdAt: now, app: app, data: facts.json()), db: db)
    }

    /// Events after `sequence`, oldest first.
    static func events(after sequence: Int64, limit: Int, db: SQLiteDatabase) throws -> [EventRecord] {
        try db.withStatement("SELECT seq, id, type, app, created_at, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?") { s in
            s.bind(1, sequence).bind(2, Int64(limit))
            var out: [EventRecord] = []
            while try s.step() {
                out.append(EventRecord(sequence: s.int64(0), id: s.string(1), type: s.string(2), createdAt: Date(millisecondsSince1970: s.int64(4)),
                                       app: s.string(3), data: s.string(5)))
            }
            return out
        }
    }

    /// The last event's sequence (0 when none was ever stored).
    static func lastSequence(db: SQLiteDatabase) throws -> Int64 {
        try db.withStatement("SELECT max(seq) FROM (SELECT max(seq) AS seq FROM events UNION ALL SELECT seq FROM sqlite_sequence WHERE name = 'events')") { s in
            guard try s.step() else { return 0 }
            return s.optionalInt64(0) ?? 0
        }
    }

    /// Takes or renews the lease of `webhook` for `node`; its cursor when `node` holds it.
    /// A webhook seen for the first time starts after the last stored event.
    static func lease(webhook: String, node: String, now: Date, until: Date, db: SQLiteDatabase) throws -> Int64? {
        let last = try lastSequence(db: db)
        try db.withStatement("INSERT INTO webhook_cursors (webhook, acknowledged) VALUES (?, ?) ON CONFLICT (webhook) DO NOTHING") { s in
            s.bind(1, webhook).bind(2, last)
            try s.run()
        }
        try db.withStatement("""
            UPDATE webhook_cursors SET holder = ?2, lease_until = ?3
            WHERE webhook = ?1 AND (holder IS NULL OR holder = ?2 OR lease_until IS NULL OR lease_until <= ?4)
            """) { s in
            s.bind(1, webhook).bind(2, node).bind(3, until.millisecondsSince1970).bind(4, now.millisecondsSince1970)
            try s.run()
        }
        guard db.changes > 0 else { return nil }
        return try cursor(webhook: webhook, db: db)
    }

    /// Moves the cursor of `webhook` forward to `sequence` while `node` holds its lease.
    static func acknowledge(webhook: String, node: String, through sequence: Int64, db: SQLiteDatabase) throws -> Bool {
        try db.withStatement("""
            UPDATE webhook_cursors SET acknowledged = max(acknowledged, ?3) WHERE webhook = ?1 AND holder = ?2
            """) { s in
            s.bind(1, webhook).bind(2, node).bind(3, sequence)
            try s.run()
        }
        return db.changes > 0
    }

    /// Gives the lease of `webhook` up (a node stopping).
    static func release(webhook: String, node: String, db: SQLiteDatabase) throws {
        try db.withStatement("UPDATE webhook_cursors SET holder = NULL, lease_until = NULL WHERE webhook = ? AND holder = ?") { s in
            s.bind(1, webhook).bind(2, node)
            try s.run()
        }
    }

    /// The cursor of `webhook`, `nil` when it never sent.
    static func cursor(webhook: String, db: SQLiteDatabase) throws -> Int64? {
        try db.withStatement("SELECT acknowledged FROM webhook_cursors WHERE webhook = ?") { s in
            s.bind(1, webhook)
            return try s.step() ? s.int64(0) : nil
        }
    }

    /// Deletes events created before `cutoff`; returns how many.
    static func prune(createdBefore cutoff: Date, db: SQLiteDatabase) throws -> Int {
        try db.withStatement("DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE created_at < ? ORDER BY seq LIMIT 5000)") { s in
            s.bind(1, cutoff.millisecondsSince1970)
            try s.run()
        }
        return db.changes
    }
}

extension SQLiteDeliveryQueue: EventOutbox {
    public func append(_ events: [EventRecord]) async throws {
        guard !events.isEmpty else { return }
        try await writer.perform { db in
            for e in events { try SQLiteEvents.append(e, db: db) }
            return ((), {})
        }
    }

    public func events(after sequence: Int64, limit: Int) async throws -> [EventRecord] {
        try await read { db in try SQLiteEvents.events(after: sequence, limit: limit, db: db) }
    }

    public func leaseWebhook(_ webhook: String, node: String, now: Date, until: Date) async throws -> Int64? {
        try await writer.perform { db in (try SQLiteEvents.lease(webhook: webhook, node: node, now: now, until: until, db: db), {}) }
    }

    public func acknowledge(webhook: String, node: String, through sequence: Int64) async throws -> Bool {
        try await writer.perform { db in (try SQLiteEvents.acknowledge(webhook: webhook, node: node, through: sequence, db: db), {}) }
    }

    public func releaseWebhook(_ webhook: String, node: String) async throws {
        try await writer.perform { db in (try SQLiteEvents.release(webhook: webhook, node: node, db: db), {}) }
    }

    public func webhookCursor(_ webhook: String) async throws -> Int64? {
        try await read { db in try SQLiteEvents.cursor(webhook: webhook, db: db) }
    }

    public func pruneEvents(createdBefore cutoff: Date) async throws -> Int {
        var total = 0
        // Chunks of 5,000, each its own write, so outcomes are never held up for long.
        while true {
            let n = try await writer.perform { db in (try SQLiteEvents.prune(createdBefore: cutoff, db: db), {}) }
            total += n
            if n < 5000 { return total }
        }
    }
}

/// The event outbox on a connection of its own, for the CLI (`herald webhooks list`) beside a
/// running daemon: it writes nothing to the queue (opening the queue would void the daemon's
/// claims).
public final class SQLiteEventStore: EventOutbox, Sendable {
    private let connection: ThreadConfined<SQLiteDatabase>
    private let thread = BlockingThread(name: "herald-sqlite-events")

    /// Opens (creating and migrating) the database at `path`.
    public init(path: String, busyTimeout: TimeInterval = 5) throws {
        let db = try SQLiteDatabase(path: path, synchronous: "FULL", busyTimeout: busyTimeout)
        try HeraldSchema.migrations.apply(to: db)
        connection = ThreadConfined(db, to: thread.thread)
    }

    private func onThread<T: Sendable>(_ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        try await thread.run { [connection] in try body(connection.value) }
    }

    public func append(_ events: [EventRecord]) async throws {
        try await onThread { db in try db.transaction { for e in events { try SQLiteEvents.append(e, db: db) } } }
    }

    public func events(after sequence: Int64, limit: Int) async throws -> [EventRecord] {
        try await onThread { db in try SQLiteEvents.events(after: sequence, limit: limit, db: db) }
    }

    public func leaseWebhook(_ webhook: String, node: String, now: Date, until: Date) async throws -> Int64? {
        try await onThread { db in try db.transaction { try SQLiteEvents.lease(webhook: webhook, node: node, now: now, until: until, db: db) } }
    }

    public func acknowledge(webhook: String, node: String, through sequence: Int64) async throws -> Bool {
        try await onThread { db in try db.transaction { try SQLiteEvents.acknowledge(webhook: webhook, node: node, through: sequence, db: db) } }
    }

    public func releaseWebhook(_ webhook: String, node: String) async throws {
        try await onThread { db in try db.transaction { try SQLiteEvents.release(webhook: webhook, node: node, db: db) } }
    }

    public func webhookCursor(_ webhook: String) async throws -> Int64? {
        try await onThread { db in try SQLiteEvents.cursor(webhook: webhook, db: db) }
    }

    public func pruneEvents(createdBefore cutoff: Date) async throws -> Int {
        try await onThread { db in try db.transaction { try SQLiteEvents.prune(createdBefore: cutoff, db: db) } }
    }

    public func close() async {}
}
