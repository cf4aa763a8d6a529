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
/// The queue's accepts can number too (``InboxNumberingQueue/numberAtAccept(transport:_:)``):
/// then a delivery to a device with an open stream is claimed by the accept that stores it, and
/// nothing is claimed after the 202 for it.
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

    /// Called on the store's writer thread right after the commit of a batch this numbering
    /// numbered (a claim's, or an accept's: ``InboxNumberingQueue/numberAtAccept(transport:_:)``),
    /// one batch at a time in commit order: where the delivery engine lines the batches up for
    /// ``numbered(_:entries:)``, so a device's events are written in number order whichever path
    /// numbered them. Must be quick and must neither block nor await. The default does nothing.
    func committed(_ batch: NumberedClaim)
}

extension InboxNumbering {
    public func committed(_ batch: NumberedClaim) {}
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

    /// From now on (until ``stopNumberingAtAccept(transport:_:)``), ``DeliveryQueue/enqueue(_:idempotencySince:)``
    /// claims at accept the deliveries of `transport` that `numbering` numbers: in the accept's
    /// own transaction they are stored `sent` (attempt 1, leased as `numbering` says); right
    /// after its commit their inbox entries are appended in batches of `numbering.batchSize`,
    /// each in a writer operation of its own, and each batch goes to
    /// ``InboxNumbering/committed(_:)`` once its entries are committed, in commit order with the
    /// numbered claims. The engine then writes and records them as a claimed batch, with no
    /// claim of its own: no row is read back and none is marked a second time. A batch whose
    /// append fails is handed over without numbers (the transport's own path numbers them).
    ///
    /// - Important: the rest of the accept is unchanged: a delivery `numbering` does not number
    ///   is stored `queued`; a numbering that fails (a wrong count of entries) is ignored and the
    ///   accept goes on with every delivery `queued`; a failed accept stores and numbers nothing
    ///   (one transaction). A crash after the commit leaves the taken deliveries `sent`,
    ///   with their numbers or (before their batch's append) without: a later attempt finds a
    ///   number or takes one, as after a numbered claim.
    func numberAtAccept(transport: String, _ numbering: AcceptNumbering)

    /// Accepts stop numbering for `transport`, if `numbering` is still the one they use (a
    /// reload's new worker may have replaced it).
    ///
    /// - Important: returns once no accept can hand `numbering` a batch any more: every accept
    ///   that numbered with it has committed and called ``InboxNumbering/committed(_:)``, and
    ///   later ones store their deliveries `queued`.
    func stopNumberingAtAccept(transport: String, _ numbering: AcceptNumbering) async
}

/// A transport's numbering as the delivery engine lends it to accepts
/// (``InboxNumberingQueue/numberAtAccept(transport:_:)``).
public struct AcceptNumbering: Sendable {
    /// Numbers the deliveries an accept may take; its ``InboxNumbering/committed(_:)`` receives them.
    public var numbering: any InboxNumbering
    /// The lease of a delivery taken at accept, from the accept's time (read at each accept).
    public var lease: @Sendable () -> TimeInterval
    /// Most deliveries numbered and handed over at once (an accept's are numbered in batches of
    /// this size, each in its own commit after the accept's, so the first batch's writes overlap
    /// the next batch's numbering).
    public var batchSize: @Sendable () -> Int
    /// Tells one lending from another (``InboxNumberingQueue/stopNumberingAtAccept(transport:_:)``).
    public let id = UUIDSource.random()

    public init(numbering: any InboxNumbering, lease: @escaping @Sendable () -> TimeInterval,
                batchSize: @escaping @Sendable () -> Int = { 500 }) {
        self.numbering = numbering
        self.lease = lease
        self.batchSize = batchSize
    }
}

/// What ``InboxNumberingQueue/claim(transport:limit:now:leaseUntil:numbering:)`` returns.
public struct NumberedClaim: Sendable {
    public var claimed: [ClaimedDelivery]
    /// One per claimed delivery: its inbox entry, committed with the claim, or `nil`.
    public var entries: [InboxEntry?]
    /// Claimed by an accept (``InboxNumberingQueue/numberAtAccept(transport:_:)``), not by a claim.
    public var atAccept: Bool

    public init(claimed: [ClaimedDelivery], entries: [InboxEntry?], atAccept: Bool = false) {
        precondition(claimed.count == entries.count, "one entry (or nil) per claimed delivery")
        self.claimed = claimed
        self.entries = entries
        self.atAccept = atAccept
    }
}
