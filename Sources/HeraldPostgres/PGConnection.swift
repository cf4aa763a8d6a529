internal import CPostgres
import FoundationEssentials
internal import CLinux  // eventfd
import Glibc
import HeraldCore

/// A statement failed on a live connection: the server's message and SQLSTATE. A lost
/// connection throws ``StoreUnavailableError`` instead (the API answers 503 for it).
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    public var message: String
    /// SQLSTATE, when the server sent one.
    public var sqlState: String

    public var description: String { message }
}

/// Rows of one result, as text (libpq's text format), read into Swift at once.
struct PGRows: Sendable {
    var rows: [[String?]]
    /// Rows a command changed (`UPDATE`, `DELETE`, `INSERT`).
    var affected: Int

    var count: Int { rows.count }
    subscript(_ row: Int, _ column: Int) -> String? { rows[row][column] }
    func int(_ row: Int, _ column: Int) -> Int64 { Int64(rows[row][column] ?? "") ?? 0 }
    func optionalInt(_ row: Int, _ column: Int) -> Int64? { rows[row][column].flatMap { Int64($0) } }
    func string(_ row: Int, _ column: Int) -> String { rows[row][column] ?? "" }
}

/// One libpq connection. Not thread-safe, and not `Sendable`: each belongs to one thread (a
/// ``BlockingThread`` of the pool, the accept writer's, the listener's), kept in a
/// ``ThreadConfined`` bound to it or in that thread's own variables.
final class PGConnection {
    private var conn: OpaquePointer?
    private let conninfo: String
    /// The connection string without its password, for messages.
    let redacted: String
    /// Statements sent so far (round trips, preparations included), for benchmarks.
    private(set) var executed = 0
    /// Statements prepared in this session, by their SQL (see ``execute(_:_:prepared:)``).
    private var prepared: [String: String] = [:]
    /// Names given so far in this session (a forgotten statement's name is never reused).
    private var preparedNames = 0

    /// Connects (blocking: call on a thread you own).
    init(_ conninfo: String) throws {
        self.conninfo = conninfo
        redacted = Redact.connectionString(conninfo)
        try connect()
    }

    deinit { if let conn { PQfinish(conn) } }

    private func connect() throws {
        if let conn { PQfinish(conn) }
        prepared = [:]
        preparedNames = 0
        conn = PQconnectdb(conninfo)
        guard herald_pq_connection_ok(conn) != 0 else {
            let message = conn.map { String(cString: PQerrorMessage($0)) } ?? "out of memory"
            if let conn { PQfinish(conn) }
            conn = nil
            throw StoreUnavailableError("cannot connect to PostgreSQL (\(redacted)): \(message.trimmed); check storage.url and that the server runs")
        }
        // Quiet NOTICEs (CREATE … IF NOT EXISTS) rather than let libpq print them on stderr.
        _ = try? execute("SET client_min_messages = warning")
    }

    /// Whether the connection is up (as far as libpq knows).
    var isOpen: Bool { herald_pq_connection_ok(conn) != 0 }

    /// Runs one statement with text parameters (`$1`, `$2`, …) and returns its rows. A lost
    /// connection is reopened first, once, when the previous call found it down.
    ///
    /// `prepared`: the statement is prepared once per session (one more round trip, the first
    /// time) and then only executed: the server neither parses nor analyses it again, and may
    /// keep its plan. For the statements run many times a second (accepts, claims, outcomes).
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = [], prepared: Bool = false) throws -> PGRows {
        if !isOpen { try connect() }
        var name: String?
        if prepared {
            name = self.prepared[sql]
            if name == nil {
                let fresh = "herald_\(preparedNames)"
                preparedNames += 1
                executed += 1
                try check(PQprepare(conn, fresh, sql, Int32(parameters.count), nil)).close()
                self.prepared[sql] = fresh
                name = fresh
            }
        }
        executed += 1
        let result: OpaquePointer? = withCStrings(parameters) { values in
            if let name { PQexecPrepared(conn, name, Int32(parameters.count), values, nil, nil, 0) } else {
                PQexecParams(conn, sql, Int32(parameters.count), nil, values, nil, nil, 0)
            }
        }
        let checked: Checked
        do { checked = try check(result) } catch let error as PostgresError where name != nil {
            // A statement the server no longer has, or whose plan a schema change invalidated: prepare it again next time.
            if error.sqlState == "26000" || error.sqlState == "0A000" { self.prepared[sql] = nil }
            throw error
        }
        defer { checked.close() }
        return checked.rows()
    }

    /// A result that succeeded; ``close()`` frees it.
    private struct Checked {
        let result: OpaquePointer
        let kind: Int32

        func close() { PQclear(result) }

        func rows() -> PGRows {
            let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
            guard kind == 1 else { return PGRows(rows: [], affected: affected) }
            let n = PQntuples(result), columns = PQnfields(result)
            var rows: [[String?]] = []
            rows.reserveCapacity(Int(n))
            for r in 0..<n {
                var row: [String?] = []
                row.reserveCapacity(Int(columns))
                for c in 0..<columns {
                    row.append(PQgetisnull(result, r, c) == 1 ? nil : String(cString: PQgetvalue(result, r, c)))
                }
                rows.append(row)
            }
            return PGRows(rows: rows, affected: affected)
        }
    }

    /// The result when it succeeded; otherwise frees it and throws (``StoreUnavailableError`` for a lost connection).
    private func check(_ result: OpaquePointer?) throws -> Checked {
        guard let result else { throw lost("no result") }
        let kind = herald_pq_result_kind(result)
        if kind == 0 {
            defer { PQclear(result) }
            let message = String(cString: PQresultErrorMessage(result)).trimmed
            let state = String(cString: herald_pq_sqlstate(result))
            if !isOpen || state.hasPrefix("08") || state == "57P01" || state == "57P02" || state == "57P03" { throw lost(message) }
            throw PostgresError(message: "PostgreSQL: \(message)", sqlState: state)
        }
        return Checked(result: result, kind: kind)
    }

    /// Runs `body` in a transaction (`BEGIN` … `COMMIT`; `ROLLBACK` when it throws).
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            if isOpen { _ = try? execute("ROLLBACK") }
            throw error
        }
    }

    private func lost(_ detail: String) -> StoreUnavailableError {
        StoreUnavailableError("PostgreSQL is unavailable (\(redacted)): \(detail); retry when it is back")
    }

    // MARK: LISTEN

    /// Waits up to `timeout` ms for notifications on a `LISTEN`ing connection, or until `wake`
    /// is signalled; returns the notifications' payloads.
    func waitForNotifications(timeoutMilliseconds: Int32, wake: PGWakeSignal? = nil) throws -> [String] {
        if !isOpen { throw lost("connection closed") }
        // Notifications that came in during this connection's last statement are already read.
        let early = notifications()
        if !early.isEmpty { return early }
        let ready = wake.map { herald_pq_wait_readable_or(conn, $0.fd, timeoutMilliseconds) } ?? herald_pq_wait_readable(conn, timeoutMilliseconds)
        if ready < 0 { throw lost("poll failed") }
        if PQconsumeInput(conn) == 0 || !isOpen { throw lost(String(cString: PQerrorMessage(conn)).trimmed) }
        return notifications()
    }

    /// The payloads of the notifications libpq has read.
    private func notifications() -> [String] {
        var payloads: [String] = []
        while let n = PQnotifies(conn) {
            payloads.append(String(cString: n.pointee.extra))
            PQfreemem(n)
        }
        return payloads
    }

    /// The server's version string (`SHOW server_version`).
    func serverVersion() throws -> String {
        try execute("SHOW server_version").string(0, 0)
    }
}

/// Calls `body` with C strings for `strings` (`NULL` for `nil`), valid during the call.
private func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0)! } }
    defer { for p in pointers { free(p) } }
    return pointers.withUnsafeMutableBufferPointer { buffer in
        body(buffer.map { $0.map { UnsafePointer($0) } })
    }
}

extension String {
    var trimmed: String {
        var s = Substring(self)
        while let l = s.last, l.isWhitespace { s.removeLast() }
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        return String(s)
    }
}

/// Encodes values as a PostgreSQL array literal (`{"a","b",NULL}`), for `unnest($1::text[])`:
/// one parameter carries any number of rows.
/// Interrupts a thread waiting in ``PGConnection/waitForNotifications(timeoutMilliseconds:wake:)`` (an eventfd).
final class PGWakeSignal: Sendable {
    let fd: Int32

    init() { fd = herald_eventfd() }
    deinit { close(fd) }

    /// Makes the wait return (now, or at once when it starts).
    func signal() { herald_eventfd_signal(fd) }
}

enum PGArray {
    static func text(_ values: [String?]) -> String {
        // Bytes, not unicode scalars: only `"` and `\` need escaping, both ASCII (appending scalar
        // by scalar to a String was about 7 % of a node's CPU in bench_storage).
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (i, v) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let v else { out.append(contentsOf: "NULL".utf8); continue }
            out.append(UInt8(ascii: "\""))
            for byte in v.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    static func ints<I: BinaryInteger>(_ values: [I?]) -> String {
        "{" + values.map { $0.map { String($0) } ?? "NULL" }.joined(separator: ",") + "}"
    }
}
