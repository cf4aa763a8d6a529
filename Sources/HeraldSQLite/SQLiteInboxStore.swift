import FoundationEssentials
import Glibc
import HeraldCore

/// The inbox log in the SQLite file (tables `inbox` and `inbox_sequences`).
///
/// Appends and prunes go through the queue's group-commit writer (``SQLiteGroupCommitWriter``,
/// its connection and thread, each operation in a savepoint of its own), so they share the
/// queue's transactions and fsyncs instead of contending with it for SQLite's write lock (two
/// writer connections on one file took turns through the busy handler's sleeps: a 10,000-stream
/// broadcast took p99 0.7 s). Replays and counters are read on a connection on a thread of its
/// own. Nothing runs on Swift's cooperative pool.
final class SQLiteInboxStore: InboxStore, Sendable {
    private let writer: SQLiteGroupCommitWriter
    /// Whether ``close()`` closes the writer (not when it is the queue's).
    private let ownsWriter: Bool
    /// The reader connection, confined to its own thread.
    private let reader: ThreadConfined<SQLiteDatabase>
    private let readerThread = BlockingThread(name: "herald-inbox-read")
    /// Statements of the writer thread, prepared once; confined to that thread.
    private let writerStatements = ThreadConfined(Statements())
    private var statements: Statements {
        get { writerStatements.value }
        _modify { yield &writerStatements.value }
    }

    /// Opens the inbox in the database at `path` (migrating it).
    init(path: String, synchronous: SQLiteStorageConfiguration.Synchronous = .full, busyTimeout: TimeInterval = 5) throws {
        if path == ":memory:" {
            throw StoreError("the inbox needs a database file (a reader connection runs beside the writer); \":memory:\" cannot be shared")
        }
        let level = synchronous.rawValue.uppercased()
        let db = try SQLiteDatabase(path: path, synchronous: level, busyTimeout: busyTimeout)
        try HeraldSchema.migrations.apply(to: db)
        reader = ThreadConfined(try SQLiteDatabase(path: path, synchronous: level, busyTimeout: busyTimeout), to: readerThread.thread)
        writer = SQLiteGroupCommitWriter(db: db, maxBatch: 64) { _, _ in }
        ownsWriter = true
        writerStatements.confine(to: writer.thread)
    }

    /// The inbox on the queue's writer (the daemon's case): `writer` has migrated the file.
    init(sharing writer: SQLiteGroupCommitWriter, configuration: SQLiteStorageConfiguration) throws {
        self.writer = writer
        ownsWriter = false
        reader = ThreadConfined(try SQLiteDatabase(path: configuration.path, synchronous: configuration.synchronous.rawValue.uppercased(),
                                                   busyTimeout: configuration.busyTimeout), to: readerThread.thread)
        writerStatements.confine(to: writer.thread)
    }

    convenience init(configuration: SQLiteStorageConfiguration) throws {
        try self.init(path: configuration.path, synchronous: configuration.synchronous, busyTimeout: configuration.busyTimeout)
    }

    /// Finishes queued writes and stops both threads.
    func close() {
        if ownsWriter { writer.close() }
        readerThread.stop()
    }

    func append(_ entries: [InboxEntry.New], maxPerUser: @Sendable (String) -> Int, now: Date) async throws -> [InboxEntry] {
        guard !entries.isEmpty else { return [] }
        // Grouped by (app, user) here, off the writer thread: each group takes its numbers with one upsert.
        let groups = InboxGroups(entries, maxPerUser: maxPerUser)
        return try await writer.perform { [self] db in
            var seqs = [Int64](repeating: 0, count: entries.count)
            for group in groups.groups {
                let last = try db.withStatementReused(statements.bump(db)) { s in
                    s.bind(1, group.app).bind(2, group.user).bind(3, Int64(group.indexes.count))
                    guard try s.step() else { throw StoreError("inbox: the sequence upsert returned no row") }
                    return s.int64(0)
                }
                let first = last - Int64(group.indexes.count) + 1
                let keepAbove = last - Int64(group.keep)
                for (k, i) in group.indexes.enumerated() {
                    let seq = first + Int64(k)
                    seqs[i] = seq
                    guard seq > keepAbove else { continue }   // dropped at once: more in this call than the app keeps
                    let e = entries[i]
                    try db.withStatementReused(statements.insert(db)) { s in
                        s.bind(1, e.app).bind(2, e.user).bind(3, seq).bind(4, e.device).bind(5, e.notificationID)
                            .bind(6, blob: e.event).bind(7, e.createdAt.millisecondsSince1970)
                        try s.run()
                    }
                }
                if keepAbove >= 1 {
                    try db.withStatementReused(statements.trim(db)) { s in
                        s.bind(1, group.app).bind(2, group.user).bind(3, keepAbove)
                        try s.run()
                    }
                }
            }
            let numbered = entries.enumerated().map { $0.element.numbered(seqs[$0.offset]) }
            return (numbered, {})
        }
    }

    func entries(app: String, user: String, device: String, after: Int64, limit: Int) async throws -> [InboxEntry] {
        guard limit > 0 else { return [] }
        return try await readerThread.run { [reader] in
            try reader.value.withStatement("""
                SELECT seq, notification, event, created_at FROM inbox
                WHERE app = ?1 AND user = ?2 AND device = ?3 AND seq > ?4 ORDER BY seq LIMIT ?5
                """) { s in
                s.bind(1, app).bind(2, user).bind(3, device).bind(4, after).bind(5, Int64(limit))
                var result: [InboxEntry] = []
                while try s.step() {
                    result.append(InboxEntry(app: app, user: user, device: device, seq: s.int64(0), notificationID: s.string(1),
                                             event: s.blob(2), createdAt: Date(millisecondsSince1970: s.int64(3))))
                }
                return result
            }
        }
    }

    func entry(app: String, user: String, device: String, notificationID: String) async throws -> InboxEntry? {
        try await readerThread.run { [reader] in
            try reader.value.withStatement("""
                SELECT seq, event, created_at FROM inbox WHERE app = ?1 AND user = ?2 AND device = ?3 AND notification = ?4
                ORDER BY seq LIMIT 1
                """) { s in
                s.bind(1, app).bind(2, user).bind(3, device).bind(4, notificationID)
                guard try s.step() else { return nil }
                return InboxEntry(app: app, user: user, device: device, seq: s.int64(0), notificationID: notificationID,
                                  event: s.blob(1), createdAt: Date(millisecondsSince1970: s.int64(2)))
            }
        }
    }

    func lastSequence(app: String, user: String) async throws -> Int64 {
        try await readerThread.run { [reader] in
            try reader.value.withStatement("SELECT seq FROM inbox_sequences WHERE app = ?1 AND user = ?2") { s in
                s.bind(1, app).bind(2, user)
                return try s.step() ? s.int64(0) : 0
            }
        }
    }

    func prune(app: String, createdBefore cutoff: Date) async throws -> Int {
        try await writer.perform { db in
            let n = try db.withStatement("DELETE FROM inbox WHERE app = ?1 AND created_at < ?2") { s in
                s.bind(1, app).bind(2, cutoff.millisecondsSince1970)
                try s.run()
                return db.changes
            }
            return (n, {})
        }
    }

    /// The writer's statements, prepared on first use.
    private struct Statements {
        private var bumpStatement: SQLiteStatement?
        private var insertStatement: SQLiteStatement?
        private var trimStatement: SQLiteStatement?

        /// Takes `?3` numbers for (`?1` app, `?2` user); returns the last one taken.
        mutating func bump(_ db: SQLiteDatabase) throws -> SQLiteStatement {
            try Self.reuse(&bumpStatement, db, """
                INSERT INTO inbox_sequences (app, user, seq) VALUES (?1, ?2, ?3)
                ON CONFLICT (app, user) DO UPDATE SET seq = seq + excluded.seq RETURNING seq
                """)
        }

        mutating func insert(_ db: SQLiteDatabase) throws -> SQLiteStatement {
            try Self.reuse(&insertStatement, db, """
                INSERT INTO inbox (app, user, seq, device, notification, event, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                """)
        }

        /// Drops the entries of (`?1` app, `?2` user) numbered `?3` or below.
        mutating func trim(_ db: SQLiteDatabase) throws -> SQLiteStatement {
            try Self.reuse(&trimStatement, db, "DELETE FROM inbox WHERE app = ?1 AND user = ?2 AND seq <= ?3")
        }

        private static func reuse(_ slot: inout SQLiteStatement?, _ db: SQLiteDatabase, _ sql: String) throws -> SQLiteStatement {
            if let s = slot { return s }
            let s = try db.statement(sql)
            slot = s
            return s
        }
    }
}

/// The entries of one append grouped by (app, user), in order of first appearance, with the
/// number of entries each app keeps per user.
struct InboxGroups: Sendable {
    struct Group: Sendable {
        var app: String
        var user: String
        /// Positions in the appended array, in order.
        var indexes: [Int]
        /// The app's `inbox.maxPerUser` (at least 1).
        var keep: Int
    }

    var groups: [Group] = []

    init(_ entries: [InboxEntry.New], maxPerUser: (String) -> Int) {
        var position: [Key: Int] = [:]
        var keep: [String: Int] = [:]
        for (i, e) in entries.enumerated() {
            let key = Key(app: e.app, user: e.user)
            if let g = position[key] {
                groups[g].indexes.append(i)
                continue
            }
            let k: Int
            if let known = keep[e.app] { k = known } else {
                k = max(1, maxPerUser(e.app))
                keep[e.app] = k
            }
            position[key] = groups.count
            groups.append(Group(app: e.app, user: e.user, indexes: [i], keep: k))
        }
    }

    private struct Key: Hashable {
        var app: String
        var user: String
    }
}

extension SQLiteDatabase {
    /// Runs `body` with a statement kept by its owner, resetting it afterwards (see ``withStatement(_:_:)``).
    fileprivate func withStatementReused<T>(_ statement: SQLiteStatement, _ body: (SQLiteStatement) throws -> T) throws -> T {
        defer { statement.reset() }
        return try body(statement)
    }
}
