import Synchronization

/// A mutex-protected value for state shared across threads and tasks.
///
/// A thin wrapper over `Synchronization.Mutex` that is a class, so it can be stored in `let`
/// properties of `Sendable` types and captured by closures.
public final class Locked<Value: ~Copyable>: Sendable {
    @usableFromInline let mutex: Mutex<Value>

    public init(_ value: consuming sending Value) {
        mutex = Mutex(value)
    }

    /// Runs `body` with exclusive access to the value.
    ///
    /// Inlinable so that callers in other modules get a specialised copy instead of a generic
    /// call that looks up type metadata at run time (measurable on the daemon's hot paths).
    @inlinable @discardableResult
    public func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws(E) -> sending R {
        try mutex.withLock(body)
    }
}

extension Locked where Value: Copyable & Sendable {
    /// A copy of the current value.
    public var value: Value { withLock { $0 } }
}
