import Foundation
@testable import HeraldPostgres
import HeraldTestKit
import Testing

/// The libpq connection itself: array parameters and prepared statements.
struct PGConnectionTests {
    func connection() async throws -> PGConnection {
        try await PGConnection(try PostgresServer.shared().createDatabase())
    }

    @Test func textArraysCarryQuotesBackslashesBracesAndNulls() async throws {
        let db = try await connection()
        let values: [String?] = [#"a"b"#, #"back\slash"#, "{x,y}", "NULL", nil, "", " spaced ", "é 🎉", #"\""#]
        let r = try db.execute("SELECT v FROM unnest($1::text[]) WITH ORDINALITY AS t(v, i) ORDER BY i", [PGArray.text(values)])
        #expect((0..<r.count).map { r[$0, 0] } == values)
        #expect(PGArray.text([]) == "{}")
    }

    @Test func aPreparedStatementIsPreparedOnceAndAgainAfterTheServerDropsItsPlan() async throws {
        let db = try await connection()
        try db.execute("CREATE TABLE t (a INTEGER)")
        try db.execute("INSERT INTO t VALUES (1)")
        let before = db.executed
        for _ in 0..<3 { #expect(try db.execute("SELECT * FROM t WHERE a = $1", ["1"], prepared: true).count == 1) }
        // One preparation, three executions.
        #expect(db.executed - before == 4)
        // The table changes shape: the prepared statement's result type no longer holds.
        try db.execute("ALTER TABLE t ADD COLUMN b TEXT")
        #expect {
            try db.execute("SELECT * FROM t WHERE a = $1", ["1"], prepared: true)
        } throws: { ($0 as? PostgresError)?.sqlState == "0A000" }
        // The next call prepares it again and sees the new column.
        let r = try db.execute("SELECT * FROM t WHERE a = $1", ["1"], prepared: true)
        #expect(r.count == 1 && r.rows[0].count == 2)
    }
}
