import Foundation
import HeraldAPNs
import HeraldCore
@testable import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// Fan-out look-ups that arrive together share a query, and each gets exactly its own rows.
struct CoalescingTokenStoreTests {
    /// The SQLite store, slowed down and counting its `devices` queries.
    final class CountingStore: TokenStore {
        let base: SQLiteTokenStore
        let queries = Locked<[[String]]>([])
        init(_ base: SQLiteTokenStore) { self.base = base }

        func devices(app: String, users: [String], includeInvalidated: Bool) async throws -> [Device] {
            queries.withLock { $0.append(users) }
            try await Task.sleep(nanoseconds: 20_000_000)
            return try await base.devices(app: app, users: users, includeInvalidated: includeInvalidated)
        }
        func register(_ r: DeviceRegistration, at now: Date) async throws -> RegistrationResult { try await base.register(r, at: now) }
        func unregister(app: String, token: String) async throws -> Bool { try await base.unregister(app: app, token: token) }
        func device(app: String, token: String) async throws -> Device? { try await base.device(app: app, token: token) }
        func listDevices(app: String?, user: String?, limit: Int?) async throws -> [Device] {
            try await base.listDevices(app: app, user: user, limit: limit)
        }
        func invalidate(app: String, token: String, at time: Date, reason: String) async throws -> InvalidationResult {
            try await base.invalidate(app: app, token: token, at: time, reason: reason)
        }
        func prune(invalidatedBefore cutoff: Date) async throws -> Int { try await base.prune(invalidatedBefore: cutoff) }
    }

    @Test func concurrentLookupsShareQueriesAndGetTheirOwnRows() async throws {
        let sqlite = try SQLiteTokenStore(path: ":memory:")
        let t0 = Date(timeIntervalSince1970: 1_767_225_600)
        // user0…user19 with 1…3 devices each; "café" in two normalisations are two users to SQLite.
        for u in 0..<20 {
            for k in 0...(u % 3) {
                _ = try await sqlite.register(DeviceRegistration(app: "a", token: TestDaemon.token(u * 8 + k + 1), user: "user\(u)",
                                                                 transport: "t", environment: .production), at: t0 + Double(k))
            }
        }
        _ = try await sqlite.register(DeviceRegistration(app: "a", token: TestDaemon.token(500), user: "caf\u{E9}", transport: "t", environment: .production), at: t0)
        _ = try await sqlite.register(DeviceRegistration(app: "a", token: TestDaemon.token(501), user: "cafe\u{301}", transport: "t", environment: .production), at: t0)
        let counting = CountingStore(sqlite)
        let store = CoalescingTokenStore(counting)

        let asks: [[String]] = (0..<40).map { i in i == 38 ? ["caf\u{E9}"] : i == 39 ? ["cafe\u{301}"] : ["user\(i % 20)", "user\((i * 7) % 20)"] }
        let answers = try await withThrowingTaskGroup(of: (Int, [Device]).self) { group in
            for (i, users) in asks.enumerated() {
                group.addTask { (i, try await store.devices(app: "a", users: users, includeInvalidated: false)) }
            }
            return try await group.reduce(into: [Int: [Device]]()) { $0[$1.0] = $1.1 }
        }
        for (i, users) in asks.enumerated() {
            let alone = try await sqlite.devices(app: "a", users: users, includeInvalidated: false)
            #expect(answers[i] == alone, "lookup \(i) for \(users)")
        }
        #expect(answers[38]?.map(\.token) == [TestDaemon.token(500)])
        #expect(answers[39]?.map(\.token) == [TestDaemon.token(501)])
        let queries = counting.queries.withLock { $0 }
        #expect(queries.count < asks.count / 2, "\(queries.count) queries for \(asks.count) look-ups")
        #expect(try await store.devices(app: "a", users: [], includeInvalidated: false).isEmpty)
    }
}
