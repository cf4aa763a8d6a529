import FoundationEssentials
import Glibc
import HeraldCore

/// A delivery row to insert, its text prepared before it reaches the writer thread.
struct DeliveryRow: Sendable {
    var token: String
    var user: String?
    var transport: String?
    var state: String
    var queued: Bool
    var reason: String?
    var messageID: String
    var fallback: String?
    var streamDevice: String?
    /// Set for a delivery claimed at accept (``InboxNumberingQueue/numberAtAccept(transport:_:)``):
    /// stored `sent`, attempt 1, leased until then.
    var leaseUntil: Int64?

    init(_ d: PlannedDelivery) {
        token = d.token
        user = d.user
        transport = d.transport
        state = d.state.rawValue
        queued = d.state == .queued
        reason = d.reason
        messageID = d.messageID.lowercasedString
        fallback = d.fallback
        streamDevice = d.streamDevice
    }

    /// Claims the row at accept: `sent`, attempt 1, leased until `leaseUntil`.
    mutating func claim(leaseUntil: Int64) {
        state = DeliveryState.sent.rawValue
        self.leaseUntil = leaseUntil
    }
}

/// The queue writer's frequent statements, kept at hand rather than looked up by their SQL
/// text for every use. Each comes back reset, its bindings cleared.
///
/// - Important: only for the writer thread's connection.
struct WriterStatements {
    /// Parameters per row of ``insertDeliveries(_:_:)``.
    static let deliveryColumns: Int32 = 13
    /// Most rows in one `INSERT` (a notification's deliveries go in chunks of this size).
    static let maxRowsPerInsert = 16

    private var notification: SQLiteStatement?
    private var deliveries: [SQLiteStatement?] = Array(repeating: nil, count: maxRowsPerInsert + 1)
    private var dueDeliveries: SQLiteStatement?
    private var sent: SQLiteStatement?
    private var finished: SQLiteStatement?
    private var retried: SQLiteStatement?
    private var renewed: SQLiteStatement?
    private var transportByID: SQLiteStatement?

    mutating func insertNotification(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&notification, db, """
            INSERT INTO notifications (id, app, topic, content, idempotency_key, deliveries, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """)
    }

    /// `INSERT INTO deliveries` of `rows` rows (1…``maxRowsPerInsert``), ``deliveryColumns``
    /// parameters each: notification, token, user, transport, state,
    /// next_attempt_at, last_reason, message_id, updated_at, fallback, stream_device, attempts, lease_until.
    /// Rows get consecutive ids (`id INTEGER PRIMARY KEY`: each row takes the largest id plus
    /// one, and nothing else writes between the rows of one statement).
    mutating func insertDeliveries(_ rows: Int, _ db: SQLiteDatabase) throws -> SQLiteStatement {
        let values = Array(repeating: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", count: rows).joined(separator: ", ")
        return try Self.reuse(&deliveries[rows], db, """
            INSERT INTO deliveries (notification, token, user, transport, state,
                                    next_attempt_at, last_reason, message_id, updated_at, fallback, stream_device, attempts, lease_until)
            VALUES \(values)
            """)
    }

    /// Due deliveries, oldest first: `?1` transport, `?2` now, `?3` limit.
    mutating func due(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&dueDeliveries, db, """
            SELECT id, notification, token, user, attempts, message_id, fallback, stream_device FROM deliveries
            WHERE state = 'queued' AND transport = ?1 AND next_attempt_at <= ?2 ORDER BY next_attempt_at, id LIMIT ?3
            """)
    }

    /// Claims one delivery: `?1` lease until, `?2` now, `?3` id.
    mutating func markSent(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&sent, db, "UPDATE deliveries SET state = 'sent', parked = 0, attempts = attempts + 1, lease_until = ?1, updated_at = ?2 WHERE id = ?3")
    }

    /// A final outcome: `?1` state, `?2` reason, `?3` the platform's receipt (`NULL` keeps it), `?4` now, `?5` id, `?6` attempt,
    /// `?7` the attempt to append to the history (``appendHistory(_:)``; `NULL` appends none).
    mutating func finish(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&finished, db, """
            UPDATE deliveries SET state = ?1, last_reason = ?2, receipt = COALESCE(?3, receipt), lease_until = NULL,
                next_attempt_at = NULL, updated_at = ?4, history = \(Self.appendHistory("?7"))
            WHERE id = ?5 AND attempts = ?6 AND state = 'sent'
            """)
    }

    /// Back to the queue: `?1` reason, `?2` due, `?3` now, `?4` id, `?5` attempt, `?6` 1 to give
    /// the attempt back (it did not count), else 0; `?7` 1 to park; `?8` the fallback transport
    /// taking over (`NULL` keeps the transport; a fallback is used once); `?9` the attempt to
    /// append to the history (`NULL` appends none).
    mutating func retry(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&retried, db, """
            UPDATE deliveries SET state = 'queued', last_reason = ?1, lease_until = NULL, next_attempt_at = ?2, updated_at = ?3,
                attempts = attempts - ?6, parked = ?7, transport = COALESCE(?8, transport),
                fallback = CASE WHEN ?8 IS NULL THEN fallback END, history = \(Self.appendHistory("?9"))
            WHERE id = ?4 AND attempts = ?5 AND state = 'sent'
            """)
    }

    /// Extends a claim's lease: `?1` lease until, `?2` id, `?3` attempt.
    mutating func renew(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&renewed, db, """
            UPDATE deliveries SET lease_until = ?1 WHERE id = ?2 AND attempts = ?3 AND state = 'sent' AND lease_until IS NOT NULL
            """)
    }

    /// A delivery's transport: `?1` id.
    mutating func transport(_ db: SQLiteDatabase) throws -> SQLiteStatement {
        try Self.reuse(&transportByID, db, "SELECT transport FROM deliveries WHERE id = ?1")
    }

    /// The `history` column with the attempt in `parameter` (a JSON object) appended, keeping
    /// the last ``DeliveryAttempt/kept``: one expression of the same `UPDATE`, no extra statement.
    static func appendHistory(_ parameter: String) -> String {
        """
        CASE WHEN \(parameter) IS NULL THEN history
             WHEN history IS NULL THEN json_array(json(\(parameter)))
             WHEN json_array_length(history) >= \(DeliveryAttempt.kept) THEN json_insert(json_remove(history, '$[0]'), '$[#]', json(\(parameter)))
             ELSE json_insert(history, '$[#]', json(\(parameter))) END
        """
    }

    private static func reuse(_ slot: inout SQLiteStatement?, _ db: SQLiteDatabase, _ sql: @autoclosure () -> String) throws -> SQLiteStatement {
        if let s = slot {
            s.reset()
            return s
        }
        let s = try db.statement(sql())
        slot = s
        return s
    }
}
