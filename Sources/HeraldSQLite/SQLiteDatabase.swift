internal import CSQLite
import FoundationEssentials
import Glibc

/// A SQLite error with the database's own message.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public var code: Int32
    public var message: String
    /// What Herald was doing ("open var/herald.db", "register device").
    public var operation: String

    public var description: String { "\(operation): \(message) (SQLite code \(code))" }
}

/// One SQLite connection with a statement cache.
///
/// Not thread-safe, and not `Sendable`: an owner keeps it in a ``ThreadConfined`` bound to the
/// one thread that uses it (the token store's, a reader's, the group-commit writer's), which
/// checks the thread on every access. Opened in WAL mode with the configured `synchronous`
/// level and busy timeout.
public final class SQLiteDatabase {
    private var handle: OpaquePointer?
    private var cache: [String: SQLiteStatement] = [:]
    public let path: String

    /// Opens (creating) the database file, its folder included.
    public init(path: String, synchronous: String = "FULL", busyTimeout: TimeInterval = 5) throws(SQLiteError) {
        self.path = path
        if path != ":memory:" {
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(db)
            throw SQLiteError(code: rc, message: message, operation: "open \(path)")
        }
        handle = db
        sqlite3_busy_timeout(db, Int32(busyTimeout * 1000))
        sqlite3_extended_result_codes(db, 1)
        try execute("PRAGMA journal_mode=WAL", operation: "enable WAL")
        try execute("PRAGMA synchronous=\(synchronous)", operation: "set synchronous")
        try execute("PRAGMA foreign_keys=ON", operation: "enable foreign keys")
    }

    deinit {
        cache.removeAll()
        if let handle { sqlite3_close_v2(handle) }
    }

    /// Runs SQL without results (may hold several statements).
    public func execute(_ sql: String, operation: String) throws(SQLiteError) {
        resetActiveStatements()
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? lastMessage
            sqlite3_free(errorMessage)
            throw SQLiteError(code: rc, message: message, operation: operation)
        }
    }

    /// Runs `body` with the cached statement for `sql` and resets it afterwards.
    ///
    /// Prefer this to ``statement(_:)``: a statement left mid-iteration keeps a read
    /// transaction open, and the connection then keeps seeing an old snapshot of the file.
    public func withStatement<T>(_ sql: String, _ body: (SQLiteStatement) throws -> T) throws -> T {
        let s = try statement(sql)
        defer { s.reset() }
        return try body(s)
    }

    /// A cached prepared statement for `sql`, reset and with bindings cleared.
    ///
    /// - Important: step it to the end or reset it (``SQLiteStatement/reset()``) when done;
    ///   see ``withStatement(_:_:)``.
    public func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        resetActiveStatements()
        if let cached = cache[sql] {
            cached.reset()
            return cached
        }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            throw SQLiteError(code: rc, message: lastMessage, operation: "prepare \(sql.prefix(60))")
        }
        let statement = SQLiteStatement(stmt, database: self)
        cache[sql] = statement
        return statement
    }

    /// Runs `body` in a transaction (`BEGIN IMMEDIATE`, so writers queue at the start rather
    /// than failing at commit); rolls back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE", operation: "begin transaction")
        do {
            let result = try body()
            try execute("COMMIT", operation: "commit")
            return result
        } catch {
            try? execute("ROLLBACK", operation: "rollback")
            throw error
        }
    }

    /// Resets cached statements left on a row. A statement that stopped at `SQLITE_ROW` keeps
    /// its read transaction open: reads would see an old snapshot and the next write would
    /// fail with SQLITE_BUSY_SNAPSHOT once another connection (the daemon's queue, the CLI)
    /// has committed. Every operation starts by fetching a statement, so none outlives it.
    private func resetActiveStatements() {
        for statement in cache.values { statement.resetIfBusy() }
    }

    /// Rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// Row id of the last insert.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    var lastMessage: String { handle.map { String(cString: sqlite3_errmsg($0)) } ?? "no database" }

    /// `PRAGMA user_version`: the schema version.
    public func userVersion() throws(SQLiteError) -> Int {
        do {
            return try withStatement("PRAGMA user_version") { s in
                _ = try s.step()
                return Int(s.int64(0))
            }
        } catch let error as SQLiteError {
            throw error
        } catch {
            throw SQLiteError(code: SQLITE_ERROR, message: "\(error)", operation: "read schema version")
        }
    }
}

/// A prepared statement. Bind parameters (1-based), step, read columns (0-based).
public final class SQLiteStatement {
    private let stmt: OpaquePointer
    private unowned let database: SQLiteDatabase

    init(_ stmt: OpaquePointer, database: SQLiteDatabase) {
        self.stmt = stmt
        self.database = database
    }

    deinit { sqlite3_finalize(stmt) }

    /// Ends the current execution (releasing its read snapshot) and clears the bindings.
    public func reset() {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    func resetIfBusy() {
        if sqlite3_stmt_busy(stmt) != 0 { sqlite3_reset(stmt) }
    }

    @discardableResult
    public func bind(_ index: Int32, _ value: String?) -> Self {
        if let value {
            var value = value
            value.withUTF8 { buffer in
                _ = buffer.withMemoryRebound(to: CChar.self) {
                    herald_sqlite3_bind_text_transient(stmt, index, $0.baseAddress, Int32($0.count))
                }
            }
        } else {
            sqlite3_bind_null(stmt, index)
        }
        return self
    }

    @discardableResult
    public func bind(_ index: Int32, _ value: Int64?) -> Self {
        if let value { sqlite3_bind_int64(stmt, index, value) } else { sqlite3_bind_null(stmt, index) }
        return self
    }

    @discardableResult
    public func bind(_ index: Int32, _ value: Int?) -> Self { bind(index, value.map(Int64.init)) }

    @discardableResult
    public func bind(_ index: Int32, _ value: Double?) -> Self {
        if let value { sqlite3_bind_double(stmt, index, value) } else { sqlite3_bind_null(stmt, index) }
        return self
    }

    @discardableResult
    public func bind(_ index: Int32, blob: [UInt8]?) -> Self {
        if let blob {
            blob.withUnsafeBytes { _ = herald_sqlite3_bind_blob_transient(stmt, index, $0.baseAddress, Int32($0.count)) }
        } else {
            sqlite3_bind_null(stmt, index)
        }
        return self
    }

    /// Advances; `true` while there is a row.
    public func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(stmt)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw SQLiteError(code: rc, message: database.lastMessage, operation: "step")
        }
    }

    /// Steps to completion (for statements without results).
    public func run() throws(SQLiteError) {
        while try step() {}
    }

    public func isNull(_ column: Int32) -> Bool { sqlite3_column_type(stmt, column) == SQLITE_NULL }
    public func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(stmt, column) }
    public func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    public func double(_ column: Int32) -> Double { sqlite3_column_double(stmt, column) }
    public func string(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(stmt, column) else { return "" }
        let count = Int(sqlite3_column_bytes(stmt, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }
    public func optionalString(_ column: Int32) -> String? { isNull(column) ? nil : string(column) }
    public func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(stmt, column))
        guard count > 0, let p = sqlite3_column_blob(stmt, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: count))
    }
}

/// Ordered schema migrations, applied once each, tracked by `PRAGMA user_version`.
public struct SQLiteMigrations: Sendable {
    /// Each entry moves the schema from version `index` to `index + 1`.
    public var steps: [String]

    public init(_ steps: [String]) { self.steps = steps }

    /// Applies what is missing, each step in its own transaction. Refuses a database newer
    /// than this binary knows.
    public func apply(to db: SQLiteDatabase) throws {
        let current = try db.userVersion()
        if current > steps.count {
            throw SQLiteError(code: SQLITE_ERROR, message: "the database has schema version \(current), newer than this Herald knows (\(steps.count)); upgrade Herald",
                              operation: "migrate \(db.path)")
        }
        for version in current..<steps.count {
            try db.transaction {
                try db.execute(steps[version], operation: "migrate to schema version \(version + 1)")
                try db.execute("PRAGMA user_version = \(version + 1)", operation: "record schema version")
            }
        }
    }
}
