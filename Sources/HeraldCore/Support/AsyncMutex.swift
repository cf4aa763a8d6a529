/// A first-come, first-served lock for async code: one holder at a time, waiters suspended
/// (never blocking a thread of the cooperative pool).
public final class AsyncMutex: Sendable {
    private struct State {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())

    public init() {}

    /// Runs `body` while holding the lock.
    public func run<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                if !s.held { s.held = true; return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    private func release() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { s in
            if s.waiters.isEmpty { s.held = false; return nil }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}
