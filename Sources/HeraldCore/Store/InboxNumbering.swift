import FoundationEssentials

/// Numbers a transport's deliveries in the inbox as they are claimed, inside the claim's own
/// transaction: the local path's one commit per batch.
///
/// A delivery to a live stream must be numbered in the inbox (committed) before it is written,
/// so that a client reconnecting with `Last-Event-ID` gets what it missed. Done apart from the
/// claim, that is two commits of the store's writer in front of every batch's writes (the claim,
/// then the inbox append). When the transport offers numbering (``InboxNumberingTransport``) and
/// the queue can number inside a claim (``InboxNumberingQueue``), the delivery engine claims,
/// numbers and marks the batch `sent` in one transaction, then hands the numbered events to
/// ``numbered(_:entries:)`` while it claims the next batch (one batch ahead at most, each batch's
/// call after the previous one's has returned); the transport's `deliver` later reports what
/// became of them (written, acknowledged, not connected) and the outcome is recorded as before.
///
/// - Important: a delivery counts as written only after its number is committed: a failed
///   claim numbers nothing and claims nothing (one transaction), and a crash after the commit
///   leaves the delivery `sent` with its number in the inbox, so the restart's second attempt
///   finds that number (the local transport's orphans) instead of taking a new one.
public protocol InboxNumbering: Sendable {
    /// The inbox entry of each delivery to number now, in order, or `nil` for one that is not
    /// numbered here (its device has no open stream on this node, or it is a later attempt that
    /// may hold a number already): those go through the transport's own path.
    ///
    /// - Important: runs inside the claim's transaction, on the store's writer thread (every
    ///   write of the daemon waits for it): it must be quick and must neither block nor await.
    func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?]

    /// The app's `inbox.maxPerUser` (the append keeps that many entries per (app, user)).
    func inboxMaxPerUser(_ app: String) -> Int

    /// Called once the claim has committed, with each delivery's numbered entry (`nil` where
    /// ``entries(for:now:)`` gave none), while the next claim may run. Calls come one at a time,
    /// in claim order (a batch's after the previous batch's has returned), so writing the events
    /// to their streams now gives each device its events in number order. The implementation
    /// remembers the results for the transport's `deliver` of the same deliveries.
    func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async
}

/// A transport that can have its deliveries numbered in the inbox at claim time (``InboxNumbering``).
public protocol InboxNumberingTransport: Transport {
    /// The numbering to use, or `nil` when this instance cannot (the CLI's local transport has
    /// no streams).
    var inboxNumbering: (any InboxNumbering)? { get }
}

/// A queue that can append a claimed batch's inbox entries in the claim's own transaction.
public protocol InboxNumberingQueue: DeliveryQueue {
    /// Claims as ``DeliveryQueue/claim(transport:limit:now:leaseUntil:)`` does and, in the same
    /// transaction, appends the entries `numbering` gives for the claimed deliveries to the inbox
    /// with ``InboxStore/append(_:maxPerUser:now:)``'s rules (numbers per (app, user), trimming).
    ///
    /// - Returns: the claimed deliveries and, per delivery, its numbered entry (or `nil`).
    /// - Throws: when the transaction failed: then nothing was claimed and nothing numbered.
    func claim(transport: String, limit: Int, now: Date, leaseUntil: Date, numbering: any InboxNumbering) async throws -> NumberedClaim
}

/// What ``InboxNumberingQueue/claim(transport:limit:now:leaseUntil:numbering:)`` returns.
public struct NumberedClaim: Sendable {
    public var claimed: [ClaimedDelivery]
    /// One per claimed delivery: its inbox entry, committed with the claim, or `nil`.
    public var entries: [InboxEntry?]

    public init(claimed: [ClaimedDelivery], entries: [InboxEntry?]) {
        precondition(claimed.count == entries.count, "one entry (or nil) per claimed delivery")
        self.claimed = claimed
        self.entries = entries
    }
}
