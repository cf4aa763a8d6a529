import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import HeraldCore

/// One writer thread that owns a SQLite connection and runs every write it is handed,
/// batching whatever arrived meanwhile into one transaction (group commit).
///
/// Concurrent callers each pay a share of one fsync instead of one each. One failing operation
/// does not undo the others (the batch is then run again with a savepoint around each); every
/// result is delivered only after the shared `COMMIT` succeeded.
final class SQLiteGroupCommitWriter: Sendable {
    /// One unit of work: runs inside the batch transaction and returns what to do once the
    /// batch is committed. Throwing rolls back only this operation.
    struct Operation {
        var isAccept: Bool
        var run: (SQLiteDatabase) throws -> () -> Void
        var fail: (any Error) -> Void
    }

    /// Commit statistics, for metrics and benchmarks.
    struct Statistics: Sendable {
        var commits: Int = 0
        var operations: Int = 0
    }

    private let worker: BlockingWorker<Operation>
    private let stats: Locked<Statistics>

    /// Starts the writer thread, which owns `db` from now on.
    /// - Parameter onRollback: called on the writer thread whenever writes were rolled back (an
    ///   operation or a whole batch), so caches filled during the transaction can be dropped.
    init(db: SQLiteDatabase, maxBatch: Int, onRollback: @escaping () -> Void = {},
         observe: @escaping @Sendable (Int, Double) -> Void) {
        let stats = Locked(Statistics())
        self.stats = stats
        let confined = ThreadConfined(db)
        let batches = Batches(db: confined, stats: stats, observe: observe, onRollback: onRollback)
        worker = BlockingWorker(name: "herald-sqlite-writer", maxBatch: maxBatch, body: .init(
            run: { batches.run($0) },
            // Everyone waits for this thread: ask for a larger CPU share (best effort; needs
            // CAP_SYS_NICE, silently ignored without it).
            started: { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0 /* on Linux: the calling thread */, -10) }))
        confined.confine(to: worker.thread)
    }

    /// The writer's thread (values used only inside operations can be confined to it).
    var thread: ThreadID { worker.thread }

    /// Accept operations (enqueues) waiting for their commit.
    var waitingAccepts: Int { worker.countedWaiting }

    var statistics: Statistics { stats.withLock { $0 } }

    /// Whether ``close()`` was called (new work is refused).
    var isClosed: Bool { worker.isClosed }

    /// Queues an operation; it runs on the writer thread.
    func submit(_ operation: Operation) {
        if !worker.submit(operation, counted: operation.isAccept) {
            operation.fail(StoreError("the queue is closed"))
        }
    }

    /// Runs `body` on the writer thread in a transaction and returns its result.
    func perform<T: Sendable>(isAccept: Bool = false, _ body: @escaping (SQLiteDatabase) throws -> (T, () -> Void)) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit(Operation(isAccept: isAccept, run: { db in
                let (value, after) = try body(db)
                return {
                    after()
                    continuation.resume(returning: value)
                }
            }, fail: { continuation.resume(throwing: $0) }))
        }
    }

    /// Stops taking work, finishes what is queued, and stops the thread.
    func close() {
        worker.close()
    }
}

/// What the writer thread does with a batch: one transaction, savepoints when one fails.
private struct Batches {
    let db: ThreadConfined<SQLiteDatabase>
    let stats: Locked<SQLiteGroupCommitWriter.Statistics>
    let observe: @Sendable (Int, Double) -> Void
    let onRollback: () -> Void

    typealias Operation = SQLiteGroupCommitWriter.Operation

    func run(_ batch: [Operation]) {
        runBatch(batch)
    }

    private func runBatch(_ batch: [Operation]) {
        let start = DispatchTime.now().uptimeNanoseconds
        // Operations rarely fail, so the batch first runs without a savepoint per operation (two
        // more statements each). When one fails, that transaction is rolled back and the batch
        // runs again with each operation under its own savepoint, so only the failing one is refused.
        var outcome = transaction(batch, isolated: false)
        if case .retryIsolated = outcome { outcome = transaction(batch, isolated: true) }
        guard case .committed(let done, _) = outcome else { return }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        stats.withLock {
            $0.commits += 1
            $0.operations += batch.count
        }
        observe(batch.count, seconds)
        for after in done { after() }
    }

    /// Runs `batch` in one transaction. `isolated`: each operation under its own savepoint; a
    /// failing one is told at once and the others go on.
    private func transaction(_ batch: [Operation], isolated: Bool) -> WriterBatchOutcome {
        let db = self.db.value
        do {
            try db.statement("BEGIN IMMEDIATE").run()
        } catch {
            for op in batch { op.fail(error) }
            return .abandoned
        }
        var done: [(after: () -> Void, fail: (any Error) -> Void)] = []
        done.reserveCapacity(batch.count)
        for op in batch {
            if !isolated {
                do {
                    done.append((try op.run(db), op.fail))
                } catch {
                    rollback()
                    return .retryIsolated
                }
                continue
            }
            do {
                try db.statement("SAVEPOINT op").run()
                do {
                    let after = try op.run(db)
                    try db.statement("RELEASE op").run()
                    done.append((after, op.fail))
                } catch {
                    try? db.statement("ROLLBACK TO op").run()
                    try? db.statement("RELEASE op").run()
                    onRollback()
                    op.fail(error)
                }
            } catch {
                op.fail(error)
            }
        }
        do {
            try db.statement("COMMIT").run()
        } catch {
            rollback()
            for d in done { d.fail(error) }
            return .abandoned
        }
        return .committed(done.map(\.after), statements: done.count)
    }

    private func rollback() {
        try? db.value.execute("ROLLBACK", operation: "rollback queue transaction")
        onRollback()
    }
}
