import FoundationEssentials
import HeraldCore

/// The inbox log in PostgreSQL (tables `inbox` and `inbox_sequences`), on the driver's pool.
///
/// An append is one statement (one round trip, its own transaction): it takes the numbers of
/// every (app, user) in the call with one multi-row upsert on the counter table, inserts the
/// entries and trims each (app, user) to its app's `maxPerUser`. The upsert locks each counter
/// row until the statement commits, so nodes appending for one user at once are serialised on
/// that row and never get the same number; rows are locked in (app, user) order, so two calls
/// touching the same users cannot deadlock.
///
/// - Important: the trim sees the statement's snapshot. When two nodes append for one user at
///   the same moment, the second does not see (so does not trim) the first one's new entries:
///   that user may hold a few entries over `maxPerUser` until the next append for them (or the
///   TTL prune) drops them. Numbering is exact regardless.
final class PostgresInboxStore: InboxStore, Sendable {
    private let pool: PGPool

    init(pool: PGPool) { self.pool = pool }

    /// `$1…$7`: text arrays of app, user, device, notification id, event (hex), then created_at
    /// (bigint[]) and the app's maxPerUser (int[]), one element per entry. Returns each entry's
    /// position (1-based) and number.
    private static let appendSQL = """
        WITH input AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::int[])
                WITH ORDINALITY AS t(app, usr, device, notification, event, created_at, keep, ord)
        ),
        counts AS (
            SELECT app, usr, count(*) AS n, min(keep) AS keep FROM input GROUP BY app, usr
        ),
        bumped AS (
            INSERT INTO inbox_sequences AS s (app, "user", seq)
            SELECT app, usr, n FROM counts ORDER BY app, usr
            ON CONFLICT (app, "user") DO UPDATE SET seq = s.seq + excluded.seq
            RETURNING s.app, s."user", s.seq
        ),
        limits AS (
            SELECT b.app, b."user" AS usr, b.seq - c.n AS before, b.seq - c.keep AS drop_through
            FROM bumped b JOIN counts c ON c.app = b.app AND c.usr = b."user"
        ),
        numbered AS (
            SELECT i.ord, i.app, i.usr, i.device, i.notification, i.event, i.created_at, l.drop_through,
                   l.before + row_number() OVER (PARTITION BY i.app, i.usr ORDER BY i.ord) AS seq
            FROM input i JOIN limits l ON l.app = i.app AND l.usr = i.usr
        ),
        inserted AS (
            INSERT INTO inbox (app, "user", seq, device, notification, event, created_at)
            SELECT app, usr, seq, device, notification, decode(event, 'hex'), created_at FROM numbered WHERE seq > drop_through
        ),
        trimmed AS (
            DELETE FROM inbox x USING limits l WHERE x.app = l.app AND x."user" = l.usr AND x.seq <= l.drop_through
        )
        SELECT ord, seq FROM numbered
        """

    func append(_ entries: [InboxEntry.New], maxPerUser: @Sendable (String) -> Int, now: Date) async throws -> [InboxEntry] {
        guard !entries.isEmpty else { return [] }
        var keep: [String: Int] = [:]
        for e in entries where keep[e.app] == nil { keep[e.app] = max(1, maxPerUser(e.app)) }
        let parameters: [String?] = [
            PGArray.text(entries.map(\.app)), PGArray.text(entries.map(\.user)), PGArray.text(entries.map(\.device)),
            PGArray.text(entries.map(\.notificationID)), Self.hexArray(entries.map(\.event)),
            PGArray.ints(entries.map { $0.createdAt.millisecondsSince1970 }), PGArray.ints(entries.map { keep[$0.app]! }),
        ]
        let rows = try await pool.run { db in try db.execute(Self.appendSQL, parameters) }
        guard rows.count == entries.count else {
            throw StoreError("inbox append: \(rows.count) numbers for \(entries.count) entries")
        }
        var seqs = [Int64](repeating: 0, count: entries.count)
        for r in 0..<rows.count {
            let position = Int(rows.int(r, 0)) - 1
            guard seqs.indices.contains(position) else { throw StoreError("inbox append: position \(position + 1) out of range") }
            seqs[position] = rows.int(r, 1)
        }
        return entries.enumerated().map { $0.element.numbered(seqs[$0.offset]) }
    }

    /// A PostgreSQL array literal of the hex of each of `values` (`{"7b22…","…"}`): hex needs no
    /// escaping, so the literal is written byte by byte in one pass.
    static func hexArray(_ values: [[UInt8]]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        let size = values.reduce(2) { $0 + $1.count * 2 + 3 }
        return String(unsafeUninitializedCapacity: size) { out in
            var i = 0
            out[i] = UInt8(ascii: "{"); i += 1
            for (k, value) in values.enumerated() {
                if k > 0 { out[i] = UInt8(ascii: ","); i += 1 }
                out[i] = UInt8(ascii: "\""); i += 1
                for b in value {
                    out[i] = digits[Int(b >> 4)]
                    out[i + 1] = digits[Int(b & 0x0f)]
                    i += 2
                }
                out[i] = UInt8(ascii: "\""); i += 1
            }
            out[i] = UInt8(ascii: "}"); i += 1
            return i
        }
    }

    func entries(app: String, user: String, device: String, after: Int64, limit: Int) async throws -> [InboxEntry] {
        guard limit > 0 else { return [] }
        let rows = try await pool.run { db in
            try db.execute("""
                SELECT seq, notification, encode(event, 'hex'), created_at FROM inbox
                WHERE app = $1 AND "user" = $2 AND device = $3 AND seq > $4 ORDER BY seq LIMIT $5
                """, [app, user, device, String(after), String(limit)])
        }
        return (0..<rows.count).map { r in
            InboxEntry(app: app, user: user, device: device, seq: rows.int(r, 0), notificationID: rows.string(r, 1),
                       event: DeviceToken.bytes(ofHex: rows.string(r, 2)), createdAt: Date(millisecondsSince1970: rows.int(r, 3)))
        }
    }

    func entry(app: String, user: String, device: String, notificationID: String) async throws -> InboxEntry? {
        let rows = try await pool.run { db in
            try db.execute("""
                SELECT seq, encode(event, 'hex'), created_at FROM inbox
                WHERE app = $1 AND "user" = $2 AND device = $3 AND notification = $4 ORDER BY seq LIMIT 1
                """, [app, user, device, notificationID])
        }
        guard rows.count > 0 else { return nil }
        return InboxEntry(app: app, user: user, device: device, seq: rows.int(0, 0), notificationID: notificationID,
                          event: DeviceToken.bytes(ofHex: rows.string(0, 1)), createdAt: Date(millisecondsSince1970: rows.int(0, 2)))
    }

    func lastSequence(app: String, user: String) async throws -> Int64 {
        let rows = try await pool.run { db in
            try db.execute(#"SELECT seq FROM inbox_sequences WHERE app = $1 AND "user" = $2"#, [app, user])
        }
        return rows.count == 0 ? 0 : rows.int(0, 0)
    }

    func prune(app: String, createdBefore cutoff: Date) async throws -> Int {
        try await pool.run { db in
            try db.execute("DELETE FROM inbox WHERE app = $1 AND created_at < $2", [app, String(cutoff.millisecondsSince1970)]).affected
        }
    }
}
