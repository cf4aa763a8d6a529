import FoundationEssentials
import Glibc
import HeraldCore

/// A token store that answers concurrent fan-out look-ups (``devices(app:users:includeInvalidated:)``)
/// with one query for all of them; everything else goes straight to the wrapped store.
///
/// Each look-up of the SQLite store opens a read transaction, and since the queue commits
/// hundreds of times a second that transaction finds its page cache stale and reads the pages
/// again: tens of microseconds, mostly the same for one user as for fifty. Requests that
/// arrive while a query runs wait for the next one, which reads the union of their users; each
/// gets exactly the rows it asked for, in the store's order. Every look-up still starts after
/// its request arrived, so it sees everything committed before.
final class CoalescingTokenStore: TokenStore {
    private struct Key: Hashable {
        var app: String
        var includeInvalidated: Bool
    }

    /// A user id compared byte for byte, as SQLite compares it (`String`'s `==` would equate
    /// differently normalised forms of the same text).
    private struct User: Hashable {
        var bytes: [UInt8]
        init(_ user: String) { bytes = Array(user.utf8) }
        var string: String { String(decoding: bytes, as: UTF8.self) }
    }

    private struct Waiter {
        var key: Key
        var users: Set<User>
        var continuation: CheckedContinuation<[Device], any Error>
    }

    private struct State {
        var waiting: [Waiter] = []
        var running = false
    }

    let base: any TokenStore
    private let state = Locked(State())
    /// The drains running (at most one at a time), awaited by ``finish()``.
    private let drains = OwnedTasks()

    init(_ base: any TokenStore) { self.base = base }

    func devices(app: String, users: [String], includeInvalidated: Bool) async throws -> [Device] {
        guard !users.isEmpty else { return [] }
        let key = Key(app: app, includeInvalidated: includeInvalidated)
        return try await withCheckedThrowingContinuation { continuation in
            let lead: Bool = state.withLock { s in
                s.waiting.append(Waiter(key: key, users: Set(users.map(User.init)), continuation: continuation))
                if s.running { return false }
                s.running = true
                return true
            }
            if lead { drains.spawn { [self] in await drain() } }
        }
    }

    /// Waits for the look-ups in flight to be answered (the daemon calls it when it stops,
    /// after its HTTP server, so no new one comes).
    func finish() async {
        await drains.finish()
    }

    /// Runs queries until nobody waits.
    private func drain() async {
        while true {
            let batch: [Waiter] = state.withLock { s in
                if s.waiting.isEmpty { s.running = false }
                defer { s.waiting.removeAll(keepingCapacity: true) }
                return s.waiting
            }
            if batch.isEmpty { return }
            var groups: [Key: [Waiter]] = [:]
            for w in batch { groups[w.key, default: []].append(w) }
            for (key, waiters) in groups {
                let users = waiters.count == 1 ? waiters[0].users : waiters.reduce(into: Set<User>()) { $0.formUnion($1.users) }
                do {
                    let found = try await base.devices(app: key.app, users: users.map(\.string), includeInvalidated: key.includeInvalidated)
                    for w in waiters {
                        w.continuation.resume(returning: waiters.count == 1 ? found : found.filter { w.users.contains(User($0.user)) })
                    }
                } catch {
                    for w in waiters { w.continuation.resume(throwing: error) }
                }
            }
        }
    }

    // MARK: Passed through

    func register(_ registration: DeviceRegistration, at now: Date) async throws -> RegistrationResult {
        try await base.register(registration, at: now)
    }

    func unregister(app: String, token: String) async throws -> Bool {
        try await base.unregister(app: app, token: token)
    }

    func device(app: String, token: String) async throws -> Device? {
        try await base.device(app: app, token: token)
    }

    func devices(app: String, tokens: [String]) async throws -> [Device] {
        try await base.devices(app: app, tokens: tokens)
    }

    func listDevices(app: String?, user: String?, limit: Int?) async throws -> [Device] {
        try await base.listDevices(app: app, user: user, limit: limit)
    }

    func invalidate(app: String, token: String, at time: Date, reason: String) async throws -> InvalidationResult {
        try await base.invalidate(app: app, token: token, at: time, reason: reason)
    }

    func prune(invalidatedBefore cutoff: Date) async throws -> Int {
        try await base.prune(invalidatedBefore: cutoff)
    }
}
