import FoundationEssentials
import Glibc

/// An OS thread of its own for blocking work (SQLite calls that may fsync or wait for a lock
/// for up to `busyTimeout`, libpq round trips), reached from async code through a
/// continuation, so a slow disk never occupies Swift's cooperative pool (two threads on a
/// two-core machine). A ``BlockingWorker`` whose jobs are closures.
///
/// Jobs run one at a time, in order. The thread ends when ``stop()`` is called or the last
/// reference to the ``BlockingThread`` goes away.
public final class BlockingThread: Sendable {
    private let worker: BlockingWorker<() -> Void>

    /// Starts the thread (named `name`, as `top -H` shows it).
    public init(name: String) {
        worker = BlockingWorker(name: name, body: .init(run: { jobs in for job in jobs { job() } }))
    }

    /// The thread the jobs run on (for ``ThreadConfined`` values that belong to it).
    public var thread: ThreadID { worker.thread }

    /// Lets the thread end once the jobs already handed over have run.
    public func stop() { worker.stop() }

    /// Runs `body` on the thread and returns its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = worker.submit { continuation.resume(with: Result { try body() }) }
            if !accepted { continuation.resume(throwing: StoreError("the store's thread was stopped")) }
        }
    }
}
