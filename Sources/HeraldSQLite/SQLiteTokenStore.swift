import FoundationEssentials
import Glibc
import HeraldCore

/// The token store in a SQLite file (WAL mode, migrated on open, prepared statements).
///
/// One connection on a thread of its own (``BlockingThread``): each operation is a few prepared
/// statements and takes microseconds, but a commit may fsync and a writer may wait up to
/// `busyTimeout` for another process (the daemon and the CLI may share the file), and neither
/// may hold a thread of Swift's cooperative pool.
public final class SQLiteTokenStore: TokenStore, Sendable {
    /// The connection, confined to ``thread`` once opened and migrated.
    private let connection: ThreadConfined<SQLiteDatabase>
    private let thread = BlockingThread(name: "herald-sqlite-store")
    private let version: Int
    var db: SQLiteDatabase { connection.value }

    /// Opens (creating and migrating) the store at `path` (`":memory:"` for a private in-memory one).
    public init(path: String, synchronous: SQLiteStorageConfiguration.Synchronous = .full, busyTimeout: TimeInterval = 5) throws {
        let db = try SQLiteDatabase(path: path, synchronous: synchronous.rawValue.uppercased(), busyTimeout: busyTimeout)
        try HeraldSchema.migrations.apply(to: db)
        version = try db.userVersion()
        connection = ThreadConfined(db, to: thread.thread)
    }

    /// Opens the store a configuration names.
    public convenience init(configuration: SQLiteStorageConfiguration) throws {
        try self.init(path: configuration.path, synchronous: configuration.synchronous, busyTimeout: configuration.busyTimeout)
    }

    /// The schema version of the open database (as migrated when it opened).
    public func schemaVersion() throws -> Int { version }

    /// Runs `body` on the store's own thread, the only one that touches the connection.
    func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await thread.run(body)
    }

    private static let columns = "app, token, user, transport, attributes, created_at, updated_at, invalidated_at, invalidation_reason"

    private static func device(from s: SQLiteStatement) -> Device {
        Device(app: s.string(0), token: s.string(1), user: s.string(2), transport: s.string(3),
               attributes: DeviceAttributes(json: s.optionalString(4)),
               createdAt: Date(millisecondsSince1970: s.int64(5)), updatedAt: Date(millisecondsSince1970: s.int64(6)),
               invalidatedAt: s.optionalInt64(7).map { Date(millisecondsSince1970: $0) },
               invalidationReason: s.optionalString(8))
    }

    private func fetchDevice(app: String, token: String) throws -> Device? {
        try db.withStatement("SELECT \(Self.columns) FROM devices WHERE app = ? AND token = ?") { s in
            s.bind(1, app).bind(2, token)
            return try s.step() ? Self.device(from: s) : nil
        }
    }

    public func register(_ r: DeviceRegistration, at now: Date) async throws -> RegistrationResult {
        try await onThread { [self] in
            try db.transaction {
                let previous = try fetchDevice(app: r.app, token: r.token)
                let nowMs = now.millisecondsSince1970
                try db.withStatement("""
                    INSERT INTO devices (app, token, user, transport, attributes, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app, token) DO UPDATE SET
                        user = excluded.user, transport = excluded.transport, attributes = excluded.attributes,
                        updated_at = excluded.updated_at, invalidated_at = NULL, invalidation_reason = NULL
                    """) { s in
                    s.bind(1, r.app).bind(2, r.token).bind(3, r.user).bind(4, r.transport).bind(5, r.attributes.json)
                        .bind(6, nowMs).bind(7, nowMs)
                    try s.run()
                }
                guard let device = try fetchDevice(app: r.app, token: r.token) else {
                    throw StoreError("register device: the row vanished after writing it")
                }
                let removed = try r.maxPerUser.map { try removeBeyond($0, app: r.app, user: r.user, keeping: r.token) } ?? []
                switch previous {
                case nil: return RegistrationResult(change: .created, device: device, removed: removed)
                case let p? where p.user != r.user: return RegistrationResult(change: .moved, device: device, previousUser: p.user, removed: removed)
                default: return RegistrationResult(change: .updated, device: device, removed: removed)
                }
            }
        }
    }

    /// Removes the user's devices beyond the `max` most recently registered, `keeping` (the one
    /// just registered) always among those kept; returns their tokens, least recently registered
    /// first. Runs inside ``register(_:at:)``'s transaction (index `devices_by_user`).
    private func removeBeyond(_ max: Int, app: String, user: String, keeping token: String) throws -> [String] {
        try db.withStatement("""
            DELETE FROM devices WHERE app = ?1 AND user = ?2 AND token IN (
                SELECT token FROM devices WHERE app = ?1 AND user = ?2
                ORDER BY token = ?3 DESC, updated_at DESC, token DESC LIMIT -1 OFFSET ?4)
            RETURNING token, updated_at
            """) { s in
            s.bind(1, app).bind(2, user).bind(3, token).bind(4, Int64(Swift.max(1, max)))
            var removed: [(token: String, at: Int64)] = []
            while try s.step() { removed.append((s.string(0), s.int64(1))) }
            return removed.sorted { ($0.at, $0.token) < ($1.at, $1.token) }.map(\.token)
        }
    }

    public func unregister(app: String, token: String) async throws -> Bool {
        try await onThread { [self] in
            try db.transaction {
                let user = try db.withStatement("DELETE FROM devices WHERE app = ? AND token = ? RETURNING user") { s in
                    s.bind(1, app).bind(2, token)
                    return try s.step() ? s.string(0) : nil
                }
                guard let user else { return false }
                // Its event, in the same transaction (issue 38).
                try SQLiteEvents.append(.deviceRemoved(app: app, token: token, user: user, reason: "removed through the API", now: Date()), db: db)
                return true
            }
        }
    }

    public func device(app: String, token: String) async throws -> Device? {
        try await onThread { [self] in try fetchDevice(app: app, token: token) }
    }

    public func devices(app: String, users: [String], includeInvalidated: Bool) async throws -> [Device] {
        guard !users.isEmpty else { return [] }
        let filter = includeInvalidated ? "" : "AND invalidated_at IS NULL"
        let userList = Self.jsonArray(users)
        return try await onThread { [self] in
            try db.withStatement("""
                SELECT \(Self.columns) FROM devices
                WHERE app = ? AND user IN (SELECT value FROM json_each(?)) \(filter)
                ORDER BY user, updated_at DESC, token
                """) { s in
                s.bind(1, app).bind(2, userList)
                var result: [Device] = []
                while try s.step() { result.append(Self.device(from: s)) }
                return result
            }
        }
    }

    public func devices(app: String, tokens: [String]) async throws -> [Device] {
        guard !tokens.isEmpty else { return [] }
        let tokenList = Self.jsonArray(tokens)
        return try await onThread { [self] in
            try db.withStatement("""
                SELECT \(Self.columns) FROM devices WHERE app = ? AND token IN (SELECT value FROM json_each(?))
                """) { s in
                s.bind(1, app).bind(2, tokenList)
                var result: [Device] = []
                while try s.step() { result.append(Self.device(from: s)) }
                return result
            }
        }
    }

    /// A JSON array of strings: one statement takes any number of values through `json_each(?)`.
    private static func jsonArray(_ values: [String]) -> String {
        var list = JSONWriter(capacity: values.count * 24)
        list.raw(UInt8(ascii: "["))
        for (i, v) in values.enumerated() {
            if i > 0 { list.raw(UInt8(ascii: ",")) }
            list.string(v)
        }
        list.raw(UInt8(ascii: "]"))
        return list.string
    }

    public func listDevices(app: String?, user: String?, limit: Int?) async throws -> [Device] {
        try await onThread { [self] in
            try db.withStatement("""
                SELECT \(Self.columns) FROM devices
                WHERE (?1 IS NULL OR app = ?1) AND (?2 IS NULL OR user = ?2)
                ORDER BY app, user, updated_at DESC, token LIMIT ?3
                """) { s in
                s.bind(1, app).bind(2, user).bind(3, Int64(limit ?? -1))
                var result: [Device] = []
                while try s.step() { result.append(Self.device(from: s)) }
                return result
            }
        }
    }

    public func invalidate(app: String, token: String, at time: Date, reason: String) async throws -> InvalidationResult {
        try await onThread { [self] in
            try db.transaction {
                let ms = time.millisecondsSince1970
                try db.withStatement("""
                    UPDATE devices SET invalidated_at = ?, invalidation_reason = ?
                    WHERE app = ? AND token = ? AND invalidated_at IS NULL AND updated_at <= ?
                    """) { s in
                    s.bind(1, ms).bind(2, reason).bind(3, app).bind(4, token).bind(5, ms)
                    try s.run()
                }
                if db.changes > 0 {
                    // Its event, in the same transaction (issue 38).
                    try SQLiteEvents.append(.deviceRetired(app: app, token: token, at: time, reason: reason, now: Date()), db: db)
                    return .invalidated
                }
                guard let device = try fetchDevice(app: app, token: token) else { return .unknown }
                return device.invalidatedAt != nil ? .alreadyInvalid : .keptReRegistered
            }
        }
    }

    public func prune(invalidatedBefore cutoff: Date) async throws -> Int {
        try await onThread { [self] in
            try db.withStatement("DELETE FROM devices WHERE invalidated_at IS NOT NULL AND invalidated_at < ?") { s in
                s.bind(1, cutoff.millisecondsSince1970)
                try s.run()
            }
            return db.changes
        }
    }
}
