import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

@Suite struct SQLiteTokenStoreTests {
    let app = "com.example.app"
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func token(_ n: Int) -> String { String(format: "%064x", n) }

    func registration(_ n: Int, user: String, transport: String = "apns", environment: APNsEnvironment = .production) -> DeviceRegistration {
        DeviceRegistration(app: app, token: token(n), user: user, transport: transport, environment: environment)
    }

    func makeStore() throws -> (SQLiteTokenStore, TemporaryDirectory) {
        let dir = try TemporaryDirectory()
        return (try SQLiteTokenStore(path: dir.file("sub/herald.db")), dir)
    }

    @Test func createsAMigratedWALFile() throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        #expect(try store.schemaVersion() == HeraldSchema.migrations.steps.count)
        #expect(FileManager.default.fileExists(atPath: dir.file("sub/herald.db")))
        let db = try SQLiteDatabase(path: dir.file("sub/herald.db"))
        let mode = try db.withStatement("PRAGMA journal_mode") { s in
            _ = try s.step()
            return s.string(0)
        }
        #expect(mode == "wal")
        // Opening again migrates nothing and keeps the version.
        let again = try SQLiteTokenStore(path: dir.file("sub/herald.db"))
        #expect(try again.schemaVersion() == HeraldSchema.migrations.steps.count)
    }

    @Test func refusesADatabaseFromANewerHerald() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try SQLiteDatabase(path: dir.file("h.db"))
        try db.execute("PRAGMA user_version = 999", operation: "test")
        #expect(throws: SQLiteError.self) { try SQLiteTokenStore(path: dir.file("h.db")) }
        do { _ = try SQLiteTokenStore(path: dir.file("h.db")) } catch {
            #expect("\(error)".contains("schema version 999, newer than this Herald knows"))
        }
    }

    @Test func migrationsApplyInOrderOnce() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let db = try SQLiteDatabase(path: dir.file("m.db"))
        let migrations = SQLiteMigrations(["CREATE TABLE a (x INTEGER)", "ALTER TABLE a ADD COLUMN y TEXT"])
        try migrations.apply(to: db)
        try migrations.apply(to: db)
        #expect(try db.userVersion() == 2)
        try db.execute("INSERT INTO a (x, y) VALUES (1, 'ok')", operation: "test")
        let broken = SQLiteMigrations(["CREATE TABLE a (x INTEGER)", "ALTER TABLE a ADD COLUMN y TEXT", "THIS IS NOT SQL"])
        #expect(throws: SQLiteError.self) { try broken.apply(to: db) }
        #expect(try db.userVersion() == 2)
    }

    @Test func registerCreatesUpdatesAndMoves() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        let created = try await store.register(registration(1, user: "alice"), at: t0)
        #expect(created.change == .created)
        #expect(created.device.createdAt == t0 && created.device.updatedAt == t0)
        let updated = try await store.register(registration(1, user: "alice", environment: .sandbox), at: t0.addingTimeInterval(5))
        #expect(updated.change == .updated)
        #expect(updated.device.environment == .sandbox)
        #expect(updated.device.createdAt == t0)
        #expect(updated.device.updatedAt == t0.addingTimeInterval(5))
        let moved = try await store.register(registration(1, user: "bob"), at: t0.addingTimeInterval(9))
        #expect(moved.change == .moved)
        #expect(moved.previousUser == "alice")
        #expect(try await store.devices(app: app, users: ["alice"], includeInvalidated: true).isEmpty)
        #expect(try await store.devices(app: app, users: ["bob"], includeInvalidated: true).map(\.token) == [token(1)])
    }

    @Test func tokensAreUniquePerAppNotGlobally() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        _ = try await store.register(registration(1, user: "alice"), at: t0)
        var other = registration(1, user: "zed")
        other.app = "com.other"
        #expect(try await store.register(other, at: t0).change == .created)
        #expect(try await store.device(app: app, token: token(1))?.user == "alice")
        #expect(try await store.device(app: "com.other", token: token(1))?.user == "zed")
    }

    @Test func devicesOfManyUsersInOneCall() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        for n in 0..<300 {
            _ = try await store.register(registration(n, user: "user\(n % 100)"), at: t0.addingTimeInterval(Double(n)))
        }
        let users = (0..<100).filter { $0 % 2 == 0 }.map { "user\($0)" } + ["nobody", "it's \"quoted\""]
        let devices = try await store.devices(app: app, users: users, includeInvalidated: false)
        #expect(devices.count == 150)
        let user0 = devices.filter { $0.user == "user0" }
        #expect(user0.map(\.token) == [token(200), token(100), token(0)])  // most recent first
        #expect(try await store.devices(app: app, users: [], includeInvalidated: false).isEmpty)
        #expect(try await store.listDevices(app: app, user: "user1", limit: nil).count == 3)
        #expect(try await store.listDevices(app: nil, user: nil, limit: 5).count == 5)
    }

    @Test func invalidationFollowsApplesTimestampRule() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        _ = try await store.register(registration(1, user: "alice"), at: t0)
        _ = try await store.register(registration(2, user: "alice"), at: t0.addingTimeInterval(100))
        _ = try await store.register(registration(3, user: "alice"), at: t0.addingTimeInterval(50))
        let apple = t0.addingTimeInterval(50)
        #expect(try await store.invalidate(app: app, token: token(1), at: apple, reason: "Unregistered") == .invalidated)
        #expect(try await store.invalidate(app: app, token: token(2), at: apple, reason: "Unregistered") == .keptReRegistered)
        #expect(try await store.invalidate(app: app, token: token(3), at: apple, reason: "Unregistered") == .invalidated)  // same instant: invalid
        #expect(try await store.invalidate(app: app, token: token(1), at: apple, reason: "Unregistered") == .alreadyInvalid)
        #expect(try await store.invalidate(app: app, token: token(9), at: apple, reason: "Unregistered") == .unknown)
        let dead = try #require(try await store.device(app: app, token: token(1)))
        #expect(dead.invalidatedAt == apple && dead.invalidationReason == "Unregistered" && !dead.isActive)
        #expect(try await store.devices(app: app, users: ["alice"], includeInvalidated: false).map(\.token) == [token(2)])
        #expect(try await store.devices(app: app, users: ["alice"], includeInvalidated: true).count == 3)
        // Registering again revives the device.
        _ = try await store.register(registration(1, user: "alice"), at: t0.addingTimeInterval(200))
        #expect(try await store.device(app: app, token: token(1))?.isActive == true)
    }

    @Test func pruneRemovesOnlyOldInvalidations() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        for n in 1...3 { _ = try await store.register(registration(n, user: "u"), at: t0) }
        _ = try await store.invalidate(app: app, token: token(1), at: t0.addingTimeInterval(10), reason: "Unregistered")
        _ = try await store.invalidate(app: app, token: token(2), at: t0.addingTimeInterval(1000), reason: "Unregistered")
        #expect(try await store.prune(invalidatedBefore: t0.addingTimeInterval(500)) == 1)
        #expect(try await store.device(app: app, token: token(1)) == nil)
        #expect(try await store.device(app: app, token: token(2)) != nil)
        #expect(try await store.device(app: app, token: token(3)) != nil)
    }

    @Test func unregister() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        _ = try await store.register(registration(1, user: "u"), at: t0)
        #expect(try await store.unregister(app: app, token: token(1)))
        #expect(try await store.unregister(app: app, token: token(1)) == false)
    }

    @Test func concurrentWritersFromManyTasks() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<200 {
                group.addTask { _ = try await store.register(registration(n, user: "u\(n % 7)"), at: t0) }
            }
            try await group.waitForAll()
        }
        #expect(try await store.listDevices(app: app, user: nil, limit: nil).count == 200)
    }

    @Test func twoProcessesShareTheFile() async throws {
        let (store, dir) = try makeStore()
        defer { dir.remove() }
        let second = try SQLiteTokenStore(path: dir.file("sub/herald.db"))
        _ = try await store.register(registration(1, user: "u"), at: t0)
        #expect(try await second.device(app: app, token: token(1))?.user == "u")
    }

    /// A store call waiting for SQLite's lock (up to busyTimeout) must not hold a thread of Swift's
    /// cooperative pool: here every pool thread has such a call, and the task that releases the
    /// lock needs a pool thread to run. With the calls on the store's own thread it runs at once
    /// and every call succeeds; on the pool the calls would time out with SQLITE_BUSY first (after
    /// 20 s: long enough that a loaded machine never fails the good case).
    @Test func callsWaitingForTheLockLeaveTheCooperativePoolFree() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("herald.db")
        let store = try SQLiteTokenStore(path: path, synchronous: .normal, busyTimeout: 20)
        // Another connection, used by this task and then by the one child task that releases it.
        nonisolated(unsafe) let holder = try SQLiteDatabase(path: path, synchronous: "NORMAL", busyTimeout: 0)
        try holder.execute("BEGIN IMMEDIATE", operation: "hold the write lock")
        let calls = ProcessInfo.processInfo.activeProcessorCount + 2
        let released = Locked(false)
        let results = await withTaskGroup(of: Bool.self) { group in
            for n in 0..<calls {
                group.addTask {
                    (try? await store.register(registration(n, user: "u"), at: t0)) != nil
                }
            }
            group.addTask {
                try? await Task.sleep(nanoseconds: 300_000_000)
                try? holder.execute("COMMIT", operation: "release the write lock")
                released.withLock { $0 = true }
                return true
            }
            var all: [Bool] = []
            for await ok in group { all.append(ok) }
            return all
        }
        #expect(released.value)
        #expect(results.allSatisfy { $0 }, "store calls failed while the lock holder could not run")
        #expect(try await store.listDevices(app: app, user: "u", limit: nil).count == calls)
    }
}
