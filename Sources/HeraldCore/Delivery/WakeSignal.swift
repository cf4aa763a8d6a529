import FoundationEssentials
import Glibc

/// A level-triggered wake-up for async waiters: ``notify()`` wakes every waiter, or the next
/// one to wait when nobody is waiting yet (so a wake-up is never lost). Waiting is cancellable.
public final class WakeSignal: Sendable {
    public init() {}

    private struct State {
        var pending = false
        var nextID: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Locked(State())

    /// Wakes every waiter, or the next one to wait.
    public func notify() {
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { s in
            if s.waiters.isEmpty { s.pending = true; return [] }
            let all = Array(s.waiters.values)
            s.waiters.removeAll()
            return all
        }
        for w in waiters { w.resume() }
    }

    /// Returns after a ``notify()`` (or at once when one is pending), or when the task is cancelled.
    public func wait() async {
        let id: UInt64 = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow: Bool = state.withLock { s in
                    if s.pending || Task.isCancelled {
                        s.pending = false
                        return true
                    }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }

    /// Waits for a ``notify()`` or until `deadline` on `clock`, whichever comes first.
    public func wait(until deadline: Date, clock: any WallClock) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait() }
            group.addTask { try? await clock.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }
}
