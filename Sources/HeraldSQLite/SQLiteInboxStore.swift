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
        // Grouped by (app, user) here, off the writer thread: each group takes its numbers in one
        // multi-row upsert of the counters, and the entries go in multi-row inserts.
        let groups = InboxGroups(entries, maxPerUser: maxPerUser)
        return try await writer.perform { [self] db in
            (try append(entries, groups: groups, db: db), {})
        }
    }

    /// Appends `entries` inside the writer's current transaction (the queue's numbered claim
    /// calls it in its own operation); runs on the writer thread.
    func appendInTransaction(_ entries: [InboxEntry.New], maxPerUser: (String) -> Int, db: SQLiteDatabase) throws -> [InboxEntry] {
        guard !entries.isEmpty else { return [] }
        return try append(entries, groups: InboxGroups(entries, maxPerUser: maxPerUser), db: db)
    }

    /// ``appendInTransaction(_:maxPerUser:db:)`` without the trim: the entries past each user's
    /// `maxPerUser` that this append makes the oldest are left for ``trim(_:db:)`` in a later
    /// operation (the accept's numbering hands its events over first; see
    /// ``SQLiteDeliveryQueue``). Meanwhile the inbox holds them too: a replay may send one
    /// more old entry, never fewer.
    func appendDeferringTrim(_ entries: [InboxEntry.New], maxPerUser: (String) -> Int, db: SQLiteDatabase) throws
        -> (entries: [InboxEntry], trims: [Trim]) {
        guard !entries.isEmpty else { return ([], []) }
        return try append(entries, groups: InboxGroups(entries, maxPerUser: maxPerUser), db: db, deferringTrims: true)
    }

    /// The entries of one (app, user) to drop: every number up to `keepAbove`.
    struct Trim: Sendable {
        var app: String
        var user: String
        var keepAbove: Int64
    }

    /// Drops what `trims` name (on the writer thread, inside its transaction). A trim that an
    /// append of the same user has overtaken drops nothing it should keep: `keepAbove` only grows.
    func trim(_ trims: [Trim], db: SQLiteDatabase) throws {
        for t in trims {
            try db.withStatementReused(statements.trim(db)) { s in
                s.bind(1, t.app).bind(2, t.user).bind(3, t.keepAbove)
                try s.run()
            }
        }
    }

    private func append(_ entries: [InboxEntry.New], groups: InboxGroups, db: SQLiteDatabase) throws -> [InboxEntry] {
        try append(entries, groups: groups, db: db, deferringTrims: false).entries
    }

    /// The append's statements: numbers per (app, user) in multi-row upserts, entries in
    /// multi-row inserts, then the trim (or, `deferringTrims`, the trims to run later). On the
    /// writer thread, inside its transaction.
    private func append(_ entries: [InboxEntry.New], groups: InboxGroups, db: SQLiteDatabase, deferringTrims: Bool) throws
        -> (entries: [InboxEntry], trims: [Trim]) {
        var seqs = [Int64](repeating: 0, count: entries.count)
        var lastByGroup = [Int64](repeating: 0, count: groups.groups.count)
        // The counters: one upsert per chunk of groups; RETURNING's row order is SQLite's,
        // so each row is matched to its group by (app, user).
        var next = 0
        while next < groups.groups.count {
            let chunk = next..<min(next + Statements.maxCounterRows, groups.groups.count)
            let s = try statements.bump(chunk.count, db)
            defer { s.reset() }
            var p: Int32 = 1
            var position: [InboxGroups.Key: Int] = [:]
            position.reserveCapacity(chunk.count)
            for (k, g) in zip(chunk, groups.groups[chunk]) {
                s.bind(p, g.app).bind(p + 1, g.user).bind(p + 2, Int64(g.indexes.count))
                position[InboxGroups.Key(app: g.app, user: g.user)] = k
                p += 3
            }
            var returned = 0
            while try s.step() {
                guard let k = position[InboxGroups.Key(app: s.string(0), user: s.string(1))] else {
                    throw StoreError("inbox: the sequence upsert returned a user it was not given")
                }
                lastByGroup[k] = s.int64(2)
                returned += 1
            }
            guard returned == chunk.count else { throw StoreError("inbox: the sequence upsert returned \(returned) rows for \(chunk.count) users") }
            next = chunk.upperBound
        }
        // The entries kept, numbered; then the oldest past each group's limit dropped.
        var kept: [Int] = []
        kept.reserveCapacity(entries.count)
        var trims: [Trim] = []
        for (g, group) in groups.groups.enumerated() {
            let last = lastByGroup[g]
            let first = last - Int64(group.indexes.count) + 1
            let keepAbove = last - Int64(group.keep)
            for (k, i) in group.indexes.enumerated() {
                let seq = first + Int64(k)
                seqs[i] = seq
                if seq > keepAbove { kept.append(i) }   // else dropped at once: more in this call than the app keeps
            }
            if keepAbove >= 1 { trims.append(Trim(app: group.app, user: group.user, keepAbove: keepAbove)) }
        }
        next = 0
        while next < kept.count {
            let chunk = kept[next..<min(next + Statements.maxEntryRows, kept.count)]
            let s = try statements.insert(chunk.count, db)
            defer { s.reset() }
            var p: Int32 = 1
            for i in chunk {
                let e = entries[i]
                s.bind(p, e.app).bind(p + 1, e.user).bind(p + 2, seqs[i]).bind(p + 3, e.device).bind(p + 4, e.notificationID)
                    .bind(p + 5, blob: e.event).bind(p + 6, e.createdAt.millisecondsSince1970)
                p += 7
            }
            try s.run()
            next += chunk.count
        }
        if !deferringTrims { try trim(trims, db: db) }
        return (entries.enumerated().map { $0.element.numbered(seqs[$0.offset]) }, deferringTrims ? trims : [])
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
        /// Most (app, user) counters in one upsert (3 parameters each).
        static let maxCounterRows = 250
        /// Most entries in one insert (7 parameters each).
        static let maxEntryRows = 100

        private var bumpStatements: [SQLiteStatement?] = Array(repeating: nil, count: maxCounterRows + 1)
        private var insertStatements: [SQLiteStatement?] = Array(repeating: nil, count: maxEntryRows + 1)
        private var trimStatement: SQLiteStatement?

        /// Takes numbers for `rows` (app, user) counters (each pair once): per row `app`, `user`
        /// and how many; returns `app`, `user` and `seq`, the last number taken.
        mutating func bump(_ rows: Int, _ db: SQLiteDatabase) throws -> SQLiteStatement {
            let values = Array(repeating: "(?, ?, ?)", count: rows).joined(separator: ", ")
            return try Self.reuse(&bumpStatements[rows], db, """
                INSERT INTO inbox_sequences (app, user, seq) VALUES \(values)
                ON CONFLICT (app, user) DO UPDATE SET seq = seq + excluded.seq RETURNING app, user, seq
                """)
        }

        /// Inserts `rows` entries: per row app, user, seq, device, notification, event, created_at.
        mutating func insert(_ rows: Int, _ db: SQLiteDatabase) throws -> SQLiteStatement {
            let values = Array(repeating: "(?, ?, ?, ?, ?, ?, ?)", count: rows).joined(separator: ", ")
            return try Self.reuse(&insertStatements[rows], db, """
                INSERT INTO inbox (app, user, seq, device, notification, event, created_at) VALUES \(values)
                """)
        }

        /// Drops the entries of (`?1` app, `?2` user) numbered `?3` or below.
        mutating func trim(_ db: SQLiteDatabase) throws -> SQLiteStatement {
            try Self.reuse(&trimStatement, db, "DELETE FROM inbox WHERE app = ?1 AND user = ?2 AND seq <= ?3")
        }

        private static func reuse(_ slot: inout SQLiteStatement?, _ db: SQLiteDatabase, _ sql: @autoclosure () -> String) throws -> SQLiteStatement {
            if let s = slot { return s }
            let s = try db.statement(sql())
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
        position.reserveCapacity(entries.count)
        groups.reserveCapacity(entries.count)
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

    struct Key: Hashable {
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
