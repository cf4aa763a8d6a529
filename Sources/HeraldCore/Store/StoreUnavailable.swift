/// The database cannot be reached right now (a server stopped, a network failed): nothing was
/// written, and the same call may succeed later. The API answers 503 with `Retry-After` for it
/// rather than 500.
public struct StoreUnavailableError: Error, CustomStringConvertible, Sendable {
    /// What failed, without secrets (connection strings are redacted).
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A queue that can tell the daemon when another node enqueued work (PostgreSQL's
/// `LISTEN/NOTIFY`), so workers need not wait for their next poll.
public protocol QueueWakeSource: Sendable {
    /// Calls `handler` with the transports that have new work; set once, before work starts.
    func onWake(_ handler: @escaping @Sendable (Set<String>) -> Void)
}
