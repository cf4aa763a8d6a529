import FoundationEssentials
import Glibc

/// An OS thread of its own for blocking work (SQLite calls that may fsync or wait for a lock
/// for up to `busyTimeout`), reached from async code through a continuation, so a slow disk
/// never occupies Swift's cooperative pool (two threads on a two-core machine).
///
/// Jobs run one at a time, in order. The thread ends when ``stop()`` is called or the last
/// reference to the ``BlockingThread`` goes away.
public final class BlockingThread: Sendable {
    private final class Jobs: @unchecked Sendable {
        let lock = ConditionLock()
        var pending: [() -> Void] = []
        var head = 0
        var stopped = false
    }

    private let jobs = Jobs()

    /// Starts the thread (named `name`, as `top -H` shows it).
    public init(name: String) {
        let jobs = self.jobs
        OSThread.start(name: name, stackSize: 256 * 1024) {
            while true {
                jobs.lock.lock()
                while jobs.head == jobs.pending.count && !jobs.stopped { jobs.lock.wait() }
                if jobs.head == jobs.pending.count {
                    jobs.lock.unlock()
                    return
                }
                let job = jobs.pending[jobs.head]
                jobs.head += 1
                if jobs.head == jobs.pending.count {
                    jobs.pending.removeAll(keepingCapacity: true)
                    jobs.head = 0
                }
                jobs.lock.unlock()
                job()
            }
        }
    }

    deinit { stop() }

    /// Lets the thread end once the jobs already handed over have run.
    public func stop() {
        jobs.lock.withLock {
            jobs.stopped = true
            jobs.lock.signal()
        }
    }

    /// Runs `body` on the thread and returns its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted: Bool = jobs.lock.withLock {
                if jobs.stopped { return false }
                jobs.pending.append { continuation.resume(with: Result { try body() }) }
                jobs.lock.signal()
                return true
            }
            if !accepted { continuation.resume(throwing: StoreError("the store's thread was stopped")) }
        }
    }
}
