import FoundationEssentials
import Glibc

/// One OS thread of its own for blocking work (SQLite calls that may fsync, libpq round trips),
/// and the queue that feeds it. Jobs are handed over from any thread and run on this one, in
/// the order they came, in batches of at most `maxBatch` (all that arrived meanwhile), so a
/// slow disk or server never occupies Swift's cooperative pool.
///
/// Its life is an explicit state machine, as swift-nio's `NIOThreadPool`'s: `running` takes
/// jobs; `closing` takes none and the thread finishes those already queued; `finished` means
/// the thread has returned. The one ``BlockingThread``, the SQLite group-commit writer and the
/// PostgreSQL accept writer are all this type.
///
/// The thread holds the worker (and its closures) until it finishes, never the other way round
/// through an unowned reference: an owner calls ``close()`` (or ``stop()``) and may go away at
/// any time after.
public final class BlockingWorker<Job>: @unchecked Sendable {
    /// What the thread does, fixed before it starts (no callback is set afterwards).
    public struct Body {
        /// Runs one batch of jobs, in the order they were submitted.
        public var run: ([Job]) -> Void
        /// With no job waiting: seconds until ``tick`` should run (`nil`: sleep until a job comes or the worker closes).
        public var idle: () -> Double?
        /// Runs when the wait that ``idle`` asked for ended with no job.
        public var tick: () -> Void
        /// Runs once on the thread before any job (thread priority, say).
        public var started: () -> Void
        /// Runs once on the thread after the last job (close what the thread owns).
        public var finished: () -> Void

        /// A body that runs `run` for each batch and nothing else.
        public init(run: @escaping ([Job]) -> Void, idle: @escaping () -> Double? = { nil }, tick: @escaping () -> Void = {},
                    started: @escaping () -> Void = {}, finished: @escaping () -> Void = {}) {
            self.run = run
            self.idle = idle
            self.tick = tick
            self.started = started
            self.finished = finished
        }
    }

    private enum State {
        /// Taking jobs.
        case running
        /// No new jobs; the thread runs those queued, then finishes.
        case closing
        /// The thread has returned.
        case finished
    }

    /// What the thread and the submitters share, under `lock`. The thread holds this, not the
    /// worker, so an owner's last reference going away stops the thread (``deinit``).
    private final class Core: @unchecked Sendable {
        let lock = ConditionLock()
        var state = State.running
        var pending: [(job: Job, counted: Bool)] = []
        var counted = 0
        let maxBatch: Int
        let body: Body

        init(maxBatch: Int, body: Body) {
            self.maxBatch = max(1, maxBatch)
            self.body = body
        }

        func loop() {
            body.started()
            while true {
                lock.lock()
                var ticked = false
                while pending.isEmpty, case .running = state {
                    guard let seconds = body.idle() else { lock.wait(); continue }
                    if seconds > 0 { _ = lock.wait(seconds: seconds) }
                    if pending.isEmpty, case .running = state { ticked = true; break }
                }
                if ticked {
                    lock.unlock()
                    body.tick()
                    continue
                }
                if pending.isEmpty {
                    lock.unlock()
                    body.finished()
                    lock.withLock {
                        state = .finished
                        lock.broadcast()
                    }
                    return
                }
                let take = min(maxBatch, pending.count)
                let batch = pending.prefix(take).map(\.job)
                counted -= pending.prefix(take).reduce(0) { $0 + ($1.counted ? 1 : 0) }
                pending.removeFirst(take)
                lock.unlock()
                body.run(batch)
            }
        }

        func beginClosing() {
            if case .running = state { state = .closing }
            lock.broadcast()
        }
    }

    private let core: Core

    /// The thread the jobs run on (for ``ThreadConfined`` values that belong to it).
    public let thread: ThreadID

    /// Starts the thread (named `name`, as `top -H` shows it) and returns once it runs.
    /// - Parameter maxBatch: most jobs handed to one ``Body/run`` call.
    public init(name: String, maxBatch: Int = .max, stackSize: Int? = 256 * 1024, body: Body) {
        let core = Core(maxBatch: maxBatch, body: body)
        self.core = core
        let handshake = Handshake()
        OSThread.start(name: name, stackSize: stackSize) {
            handshake.set(ThreadID.current)
            core.loop()
        }
        thread = handshake.wait()
    }

    /// Lets the thread end once the jobs already handed over have run (an owner that forgot
    /// ``close()`` leaves no thread behind).
    deinit { stop() }

    /// Jobs waiting for the thread.
    public var waiting: Int { core.lock.withLock { core.pending.count } }

    /// Jobs submitted with `counted: true` that the thread has not taken yet (accepts waiting
    /// for their commit, say).
    public var countedWaiting: Int { core.lock.withLock { core.counted } }

    /// Whether ``close()`` or ``stop()`` was called (new jobs are refused).
    public var isClosed: Bool {
        core.lock.withLock {
            if case .running = core.state { return false }
            return true
        }
    }

    /// Hands `job` to the thread.
    /// - Returns: `false` when the worker is closing or finished (the job will never run: the
    ///   caller tells whoever waits for it).
    @discardableResult
    public func submit(_ job: Job, counted isCounted: Bool = false) -> Bool {
        core.lock.lock()
        defer { core.lock.unlock() }
        guard case .running = core.state else { return false }
        core.pending.append((job, isCounted))
        if isCounted { core.counted += 1 }
        core.lock.signal()
        return true
    }

    /// Stops taking jobs and returns at once; the thread finishes those queued, then ends.
    public func stop() {
        core.lock.withLock { core.beginClosing() }
    }

    /// Stops taking jobs, and waits until the thread has run those queued and ended.
    /// - Important: never call it from the worker's own thread (it would wait for itself).
    public func close() {
        precondition(!thread.isCurrent, "BlockingWorker.close() called on its own thread")
        core.lock.lock()
        core.beginClosing()
        while true {
            if case .finished = core.state { break }
            core.lock.wait()
        }
        core.lock.unlock()
    }
}

/// The new thread's identity, handed back to the thread that started it.
private final class Handshake: @unchecked Sendable {
    private let lock = ConditionLock()
    private var id: ThreadID?

    func set(_ value: ThreadID) {
        lock.withLock {
            id = value
            lock.signal()
        }
    }

    func wait() -> ThreadID {
        lock.lock()
        defer { lock.unlock() }
        while id == nil { lock.wait() }
        return id!
    }
}

/// How one group-commit transaction of a storage writer (SQLite's, PostgreSQL's) ended.
///
/// A writer first runs a batch without a savepoint per operation; when one operation fails,
/// it runs the batch again with each operation isolated, so only the failing one is refused.
public enum WriterBatchOutcome {
    /// Committed: what to run now for each operation that succeeded, and how many statements it took.
    case committed([() -> Void], statements: Int)
    /// Nothing was written and every operation has been told why.
    case abandoned
    /// An operation failed without isolation; nothing was written and nobody was told.
    case retryIsolated
}
