/// Mutual exclusion by key for async code: a holder takes a set of keys at once; holders with
/// disjoint sets run side by side, one that shares a key waits (first come, first served among
/// those it conflicts with). Waiters are suspended, never blocking a thread of the cooperative pool.
public final class KeyedAsyncLock<Key: Hashable & Sendable>: Sendable {
    private struct Waiter {
        var keys: Set<Key>
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var held: Set<Key> = []
        var waiters: [Waiter] = []
    }

    private let state = Locked(State())

    public init() {}

    /// Runs `body` while holding every key of `keys`.
    public func run<T: Sendable>(_ keys: Set<Key>, _ body: () async throws -> T) async rethrows -> T {
        await acquire(keys)
        defer { release(keys) }
        return try await body()
    }

    private func acquire(_ keys: Set<Key>) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                // Free, and no earlier waiter wants any of these keys (no overtaking).
                if s.held.isDisjoint(with: keys) && !s.waiters.contains(where: { !$0.keys.isDisjoint(with: keys) }) {
                    s.held.formUnion(keys)
                    return true
                }
                s.waiters.append(Waiter(keys: keys, continuation: c))
                return false
            }
            if now { c.resume() }
        }
    }

    private func release(_ keys: Set<Key>) {
        let ready: [CheckedContinuation<Void, Never>] = state.withLock { s in
            s.held.subtract(keys)
            var ready: [CheckedContinuation<Void, Never>] = []
            var blocked: Set<Key> = []
            var still: [Waiter] = []
            for w in s.waiters {
                if s.held.isDisjoint(with: w.keys) && blocked.isDisjoint(with: w.keys) {
                    s.held.formUnion(w.keys)
                    ready.append(w.continuation)
                } else {
                    blocked.formUnion(w.keys)
                    still.append(w)
                }
            }
            s.waiters = still
            return ready
        }
        for c in ready { c.resume() }
    }
}
