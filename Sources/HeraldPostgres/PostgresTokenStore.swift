import FoundationEssentials
import HeraldCore

/// The token store in PostgreSQL (table `devices`), on the driver's connection pool. Same
/// rules as the SQLite store: registering clears an invalidation; an invalidation older than
/// the last registration is ignored (Apple's timestamp rule).
final class PostgresTokenStore: TokenStore, Sendable {
    let pool: PGPool

    init(pool: PGPool) { self.pool = pool }

    private static let columns = "app, token, \"user\", transport, attributes, created_at, updated_at, invalidated_at, invalidation_reason"

    private static func devices(_ r: PGRows) -> [Device] {
        (0..<r.count).map { i in
            Device(app: r.string(i, 0), token: r.string(i, 1), user: r.string(i, 2), transport: r.string(i, 3),
                   attributes: DeviceAttributes(json: r[i, 4]),
                   createdAt: Date(millisecondsSince1970: r.int(i, 5)), updatedAt: Date(millisecondsSince1970: r.int(i, 6)),
                   invalidatedAt: r.optionalInt(i, 7).map { Date(millisecondsSince1970: $0) }, invalidationReason: r[i, 8])
        }
    }

    public func register(_ r: DeviceRegistration, at now: Date) async throws -> RegistrationResult {
        try await pool.run { db in
            // One statement: the previous owner (the statement's snapshot) and the upsert;
            // `xmax = 0` on the returned row says it was inserted, not updated. With a bound, the
            // user's other devices beyond the newest `maxPerUser - 1` (in the statement's
            // snapshot, which is the user's devices before this registration) are deleted by the
            // same statement (`$7`: NULL for no bound). Registrations of one user racing in
            // separate transactions each see the devices before both, so the user may be one over
            // the bound per racing registration until the next one trims it: bounded all the same.
            let rows = try db.execute("""
                WITH previous AS (SELECT "user" FROM devices WHERE app = $1 AND token = $2),
                removed AS (
                    DELETE FROM devices WHERE app = $1 AND "user" = $3 AND $7::bigint IS NOT NULL AND token IN (
                        SELECT token FROM devices WHERE app = $1 AND "user" = $3 AND token <> $2
                        ORDER BY updated_at DESC, token DESC OFFSET greatest($7::bigint - 1, 0))
                    RETURNING token, updated_at),
                upsert AS (
                    INSERT INTO devices (app, token, "user", transport, attributes, created_at, updated_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $6)
                    ON CONFLICT (app, token) DO UPDATE SET
                        "user" = excluded."user", transport = excluded.transport, attributes = excluded.attributes,
                        updated_at = excluded.updated_at, invalidated_at = NULL, invalidation_reason = NULL
                    RETURNING \(Self.columns), (xmax = 0) AS inserted)
                SELECT upsert.*, (SELECT "user" FROM previous),
                       (SELECT json_agg(token ORDER BY updated_at, token)::text FROM removed) FROM upsert
                """, [r.app, r.token, r.user, r.transport, r.attributes.json, String(now.millisecondsSince1970), r.maxPerUser.map(String.init)])
            guard let device = Self.devices(rows).first else { throw StoreError("register device: the row vanished after writing it") }
            let removed = rows[0, 11].flatMap { try? JSONValue.parse($0) }?.arrayValue?.compactMap(\.stringValue) ?? []
            if rows[0, 9] == "t" { return RegistrationResult(change: .created, device: device, removed: removed) }
            if let p = rows[0, 10], p != r.user { return RegistrationResult(change: .moved, device: device, previousUser: p, removed: removed) }
            return RegistrationResult(change: .updated, device: device, removed: removed)
        }
    }

    public func unregister(app: String, token: String) async throws -> Bool {
        try await pool.run { db in
            try db.transaction {
                let rows = try db.execute("DELETE FROM devices WHERE app = $1 AND token = $2 RETURNING \"user\"", [app, token])
                guard rows.count > 0 else { return false }
                // Its event, in the same transaction (issue 38).
                try PostgresEvents.append([.deviceRemoved(app: app, token: token, user: rows[0, 0], reason: "removed through the API", now: Date())], db: db)
                return true
            }
        }
    }

    public func device(app: String, token: String) async throws -> Device? {
        try await pool.run { db in
            Self.devices(try db.execute("SELECT \(Self.columns) FROM devices WHERE app = $1 AND token = $2", [app, token])).first
        }
    }

    public func devices(app: String, users: [String], includeInvalidated: Bool) async throws -> [Device] {
        guard !users.isEmpty else { return [] }
        let filter = includeInvalidated ? "" : "AND invalidated_at IS NULL"
        let list = PGArray.text(users)
        return try await pool.run { db in
            Self.devices(try db.execute("""
                SELECT \(Self.columns) FROM devices WHERE app = $1 AND "user" = ANY($2::text[]) \(filter)
                ORDER BY "user", updated_at DESC, token
                """, [app, list], prepared: true))
        }
    }

    public func devices(app: String, tokens: [String]) async throws -> [Device] {
        guard !tokens.isEmpty else { return [] }
        let list = PGArray.text(tokens)
        return try await pool.run { db in
            Self.devices(try db.execute("SELECT \(Self.columns) FROM devices WHERE app = $1 AND token = ANY($2::text[])", [app, list]))
        }
    }

    public func listDevices(app: String?, user: String?, limit: Int?) async throws -> [Device] {
        try await pool.run { db in
            Self.devices(try db.execute("""
                SELECT \(Self.columns) FROM devices
                WHERE ($1::text IS NULL OR app = $1) AND ($2::text IS NULL OR "user" = $2)
                ORDER BY app, "user", updated_at DESC, token LIMIT $3::bigint
                """, [app, user, limit.map(String.init)]))
        }
    }

    public func invalidate(app: String, token: String, at time: Date, reason: String) async throws -> InvalidationResult {
        let ms = String(time.millisecondsSince1970)
        return try await pool.run { db in try db.transaction {
            let rows = try db.execute("""
                WITH marked AS (
                    UPDATE devices SET invalidated_at = $3, invalidation_reason = $4
                    WHERE app = $1 AND token = $2 AND invalidated_at IS NULL AND updated_at <= $3 RETURNING 1)
                SELECT (SELECT count(*) FROM marked),
                       (SELECT invalidated_at IS NOT NULL FROM devices WHERE app = $1 AND token = $2)
                """, [app, token, ms, reason])
            if rows.int(0, 0) > 0 {
                // Its event, in the same transaction (issue 38).
                try PostgresEvents.append([.deviceRetired(app: app, token: token, at: time, reason: reason, now: Date())], db: db)
                return .invalidated
            }
            switch rows[0, 1] {
            case nil: return .unknown
            case "t": return .alreadyInvalid
            default: return .keptReRegistered
            }
        } }
    }

    public func prune(invalidatedBefore cutoff: Date) async throws -> Int {
        try await pool.run { db in
            try db.execute("DELETE FROM devices WHERE invalidated_at IS NOT NULL AND invalidated_at < $1",
                           [String(cutoff.millisecondsSince1970)]).affected
        }
    }
}
