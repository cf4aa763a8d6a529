import FoundationEssentials
import Glibc

/// `server`: the daemon (`herald serve`): queue bounds and backpressure, workers per transport,
/// leases, retention, idempotency window, connection limits and the shutdown deadline.
///
/// Every key is optional; defaults suit a single machine. See `docs/configuration.md`.
public struct ServerConfiguration: Sendable, Equatable {
    /// Per-transport overrides under `server.transports.<name>`.
    public struct TransportTuning: Sendable, Equatable {
        public var concurrency: Int?
        public var deadline: TimeInterval?
        public var maxQueued: Int?
        public init(concurrency: Int? = nil, deadline: TimeInterval? = nil, maxQueued: Int? = nil) {
            self.concurrency = concurrency
            self.deadline = deadline
            self.maxQueued = maxQueued
        }
    }

    /// Unfinished deliveries one transport may have before the API answers 503. Default 100000.
    public var maxQueuedPerTransport: Int = 100_000
    /// Accepted requests waiting for their commit before the API answers 503. Default 10000.
    public var maxPendingAccepts: Int = 10_000
    /// Seconds sent in `Retry-After` with a 503. Default 1.
    public var retryAfter: Int = 1
    /// Batches in flight at once per transport. Default 4.
    public var concurrency: Int = 4
    /// A batch a transport holds longer than this is logged as slow and its lease renewed until
    /// the transport answers (it is never sent a second time meanwhile). Default 30 s.
    public var transportDeadline: TimeInterval = 30
    /// While a transport is paused (credentials or setup refused), how often one delivery is
    /// sent to see whether it was fixed. Default 60 s; a SIGHUP tries at once.
    public var probeInterval: TimeInterval = 60
    /// After a batch smaller than the batch size, how long a worker waits before claiming
    /// again, so deliveries gather into fuller batches. Default 5 ms; 0 disables.
    public var batchLinger: TimeInterval = 0.005
    /// How long a claim holds a delivery before another worker may take it. Default 120 s;
    /// must exceed every transport deadline.
    public var lease: TimeInterval = 120
    /// How long finished notifications are kept (for `GET /v1/notifications/{id}`). Default 7 days.
    public var retention: TimeInterval = 7 * 86_400
    /// How often finished rows are pruned and expired leases reclaimed. Default 60 s.
    public var maintenanceInterval: TimeInterval = 60
    /// How long an `idempotency_key` answers with the first receipt. Default 24 h.
    public var idempotencyWindow: TimeInterval = 86_400
    /// Most notifications written in one group commit. Default 2000.
    public var maxCommitBatch: Int = 2000
    /// How long SIGTERM waits for in-flight requests and batches. Default 10 s.
    public var shutdownDeadline: TimeInterval = 10
    /// Most open HTTP connections. Default 1024.
    public var connectionLimit: Int = 1024
    /// Idle HTTP connections are closed after this long. Default 60 s.
    public var connectionTimeout: TimeInterval = 60
    /// A request's headers must be complete this long after its connection opened (on a reused
    /// connection, after its request line), or the connection is closed. Default 10 s.
    public var headerTimeout: TimeInterval = 10
    /// A request's body must be complete this long after its headers, or the connection is
    /// closed. Default 10 s.
    public var bodyTimeout: TimeInterval = 10
    /// Connections one client address may hold (streams aside; loopback exempt); 0 for no limit.
    /// Default 256.
    public var connectionsPerAddress: Int = 256
    /// Overrides by transport name.
    public var transports: [String: TransportTuning] = [:]

    public init() {}

    /// Concurrency for `transport` (its override, else ``concurrency``).
    public func concurrency(for transport: String) -> Int { transports[transport]?.concurrency ?? concurrency }
    /// Deadline for `transport` (its override, else ``transportDeadline``).
    public func deadline(for transport: String) -> TimeInterval { transports[transport]?.deadline ?? transportDeadline }
    /// Backlog bound for `transport` (its override, else ``maxQueuedPerTransport``).
    public func maxQueued(for transport: String) -> Int { transports[transport]?.maxQueued ?? maxQueuedPerTransport }

    init(node: JSONNode?, transports defined: [String: TransportSpec]) {
        guard let node else { return }
        if let n = node.int("maxQueuedPerTransport", in: 1...100_000_000) { maxQueuedPerTransport = n }
        if let n = node.int("maxPendingAccepts", in: 1...10_000_000) { maxPendingAccepts = n }
        if let n = node.int("retryAfter", in: 1...3600) { retryAfter = n }
        if let n = node.int("concurrency", in: 1...256) { concurrency = n }
        if let d = node.duration("transportDeadline", minimum: 0.01) { transportDeadline = d }
        if let d = node.duration("lease", minimum: 0.1) { lease = d }
        if let d = node.duration("probeInterval", minimum: 0.01) { probeInterval = d }
        if let d = node.duration("batchLinger", minimum: 0) { batchLinger = min(d, 1) }
        if let d = node.duration("retention", minimum: 0) { retention = d }
        if let d = node.duration("maintenanceInterval", minimum: 0.01) { maintenanceInterval = d }
        if let d = node.duration("idempotencyWindow", minimum: 0) { idempotencyWindow = d }
        if let n = node.int("maxCommitBatch", in: 1...100_000) { maxCommitBatch = n }
        if let d = node.duration("shutdownDeadline", minimum: 0) { shutdownDeadline = d }
        if let n = node.int("connectionLimit", in: 1...1_000_000) { connectionLimit = n }
        if let d = node.duration("connectionTimeout", minimum: 1) { connectionTimeout = d }
        if let d = node.duration("headerTimeout", minimum: 0.1) { headerTimeout = d }
        if let d = node.duration("bodyTimeout", minimum: 0.1) { bodyTimeout = d }
        if let n = node.int("connectionsPerAddress", in: 0...1_000_000) { connectionsPerAddress = n }
        if let section = node.child("transports") {
            for (name, t) in section.members() {
                guard case .object = t.value else { t.error("expected an object with concurrency, deadline, maxQueued"); continue }
                if defined[name] == nil {
                    let known = defined.keys.sorted().joined(separator: ", ")
                    t.error("no transport \"\(name)\" is defined; defined: \(known.isEmpty ? "none" : known)")
                }
                transports[name] = TransportTuning(concurrency: t.int("concurrency", in: 1...256),
                                                   deadline: t.duration("deadline", minimum: 0.01),
                                                   maxQueued: t.int("maxQueued", in: 1...100_000_000))
            }
        }
        let longest = ([transportDeadline] + transports.values.compactMap(\.deadline)).max()!
        if lease <= longest {
            node.error(at: "lease", "must be longer than the longest transport deadline (\(longest) s): a slow batch's lease is renewed only from its deadline on")
        }
    }
}
