/// Mutual exclusion by key for async code: a holder takes a set of keys at once; holders with
/// disjoint sets run side by side, one that shares a key waits (first come, first served among
/// those it conflicts with). A holder may also take every key (``runAll(_:)``): it waits for
/// the holders before it and everyone after it waits for it, and it costs nothing per key, where
/// taking a set costs a hash of each of its keys three times. Waiters are suspended, never
/// blocking a thread of the cooperative pool.
public final class KeyedAsyncLock<Key: Hashable & Sendable>: Sendable {
    /// What a holder takes: some keys, or all of them.
    private enum Claim {
        case keys(Set<Key>)
        case all

        /// Whether this claim and one over `keys` (or all keys) cannot be held together.
        func conflicts(with other: Claim) -> Bool {
            switch (self, other) {
            case (.all, _), (_, .all): return true
            case (.keys(let a), .keys(let b)): return !a.isDisjoint(with: b)
            }
        }
    }

    private struct Waiter {
        var claim: Claim
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var held: Set<Key> = []
        /// A holder of every key is inside (then `held` is empty).
        var heldAll = false
        var waiters: [Waiter] = []

        /// Whether `claim` can be granted next to what is held now.
        func free(for claim: Claim) -> Bool {
            if heldAll { return false }
            switch claim {
            case .all: return held.isEmpty
            case .keys(let keys): return held.isDisjoint(with: keys)
            }
        }

        mutating func take(_ claim: Claim) {
            switch claim {
            case .all: heldAll = true
            case .keys(let keys): held.formUnion(keys)
            }
        }
    }

    private let state = Locked(State())

    public init() {}

    /// Runs `body` while holding every key of `keys`.
    public func run<T: Sendable>(_ keys: Set<Key>, _ body: () async throws -> T) async rethrows -> T {
        await acquire(.keys(keys))
        defer { release(.keys(keys)) }
        return try await body()
    }

    /// Runs `body` while holding every key there is: after the holders that came before it,
    /// before any that comes after it.
    public func runAll<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire(.all)
        defer { release(.all) }
        return try await body()
    }

    private func acquire(_ claim: Claim) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                // Free, and no earlier waiter wants any of these keys (no overtaking).
                if s.free(for: claim) && !s.waiters.contains(where: { $0.claim.conflicts(with: claim) }) {
                    s.take(claim)
                    return true
                }
                s.waiters.append(Waiter(claim: claim, continuation: c))
                return false
            }
            if now { c.resume() }
        }
    }

    private func release(_ claim: Claim) {
        let ready: [CheckedContinuation<Void, Never>] = state.withLock { s in
            switch claim {
            case .all: s.heldAll = false
            case .keys(let keys): s.held.subtract(keys)
            }
            var ready: [CheckedContinuation<Void, Never>] = []
            // What the waiters still waiting ahead want: a later one may not overtake them.
            var blocked: Set<Key> = []
            var blockedAll = false
            var still: [Waiter] = []
            for w in s.waiters {
                let behind: Bool
                switch w.claim {
                case .all: behind = blockedAll || !blocked.isEmpty
                case .keys(let keys): behind = blockedAll || !blocked.isDisjoint(with: keys)
                }
                if !behind && s.free(for: w.claim) {
                    s.take(w.claim)
                    ready.append(w.continuation)
                } else {
                    switch w.claim {
                    case .all: blockedAll = true
                    case .keys(let keys): blocked.formUnion(keys)
                    }
                    still.append(w)
                }
            }
            s.waiters = still
            return ready
        }
        for c in ready { c.resume() }
    }
}
