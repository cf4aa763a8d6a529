import Glibc

/// A thread's identity (`pthread_self`), compared with `pthread_equal`.
public struct ThreadID: Sendable, Equatable, CustomStringConvertible {
    private let raw: pthread_t

    private init(_ raw: pthread_t) { self.raw = raw }

    /// The calling thread.
    public static var current: ThreadID { ThreadID(pthread_self()) }

    /// Whether the calling thread is this one.
    public var isCurrent: Bool { pthread_equal(raw, pthread_self()) != 0 }

    public static func == (a: ThreadID, b: ThreadID) -> Bool { pthread_equal(a.raw, b.raw) != 0 }

    public var description: String { "thread \(raw)" }
}

/// A value that is not thread-safe (a SQLite or libpq connection, a cache of the writer's),
/// kept by a `Sendable` owner but touched only on the thread it belongs to, and checked on every
/// access: touching it from another thread traps, in debug and release builds alike (as
/// swift-nio's `NIOLoopBound` checks its event loop).
///
/// A value made on one thread and handed to a worker is created unconfined and confined once
/// (``confine(to:)``) before anything else can reach it; until then any thread may use it.
public final class ThreadConfined<Value>: @unchecked Sendable {
    private var stored: Value
    private var owner: ThreadID?

    /// Wraps `value`, confined to `owner` (`nil`: not yet, see ``confine(to:)``).
    public init(_ value: Value, to owner: ThreadID? = nil) {
        stored = value
        self.owner = owner
    }

    /// Confines the value to `thread` from now on.
    /// - Important: call it once, before the value is shared (the setting itself is not locked).
    public func confine(to thread: ThreadID) {
        precondition(owner == nil || owner == thread, "ThreadConfined: already confined to another thread")
        owner = thread
    }

    /// The value; traps when called from a thread other than its owner.
    public var value: Value {
        get {
            check()
            return stored
        }
        _modify {
            check()
            yield &stored
        }
    }

    @inline(__always)
    private func check() {
        if let owner, !owner.isCurrent {
            preconditionFailure("a thread-confined value was touched from \(ThreadID.current), not from its \(owner)")
        }
    }
}
