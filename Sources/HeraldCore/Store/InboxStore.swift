import FoundationEssentials

/// One notification as written to one device's live stream: the inbox keeps it so that a
/// client reconnecting with `Last-Event-ID: <seq>` (or `?since=<seq>`) gets what it missed.
public struct InboxEntry: Sendable, Equatable {
    public var app: String
    public var user: String
    /// The device's normalised hex id (an APNs token or an installation id).
    public var device: String
    /// The SSE `id:`: strictly increasing per (app, user), assigned by ``InboxStore/append(_:maxPerUser:now:)``.
    public var seq: Int64
    /// The notification's id (`GET /v1/notifications/{id}`).
    public var notificationID: String
    /// The event's `data:` JSON (one line), stored and returned byte for byte as given.
    public var event: [UInt8]
    public var createdAt: Date

    public init(app: String, user: String, device: String, seq: Int64, notificationID: String, event: [UInt8], createdAt: Date) {
        self.app = app
        self.user = user
        self.device = device
        self.seq = seq
        self.notificationID = notificationID
        self.event = event
        self.createdAt = createdAt
    }

    /// An entry to append: everything but the sequence number, which the store assigns.
    public struct New: Sendable, Equatable {
        public var app: String
        public var user: String
        /// The device's normalised hex id.
        public var device: String
        public var notificationID: String
        /// The event's `data:` JSON (one line).
        public var event: [UInt8]
        public var createdAt: Date

        public init(app: String, user: String, device: String, notificationID: String, event: [UInt8], createdAt: Date) {
            self.app = app
            self.user = user
            self.device = device
            self.notificationID = notificationID
            self.event = event
            self.createdAt = createdAt
        }

        /// This entry with its sequence number.
        public func numbered(_ seq: Int64) -> InboxEntry {
            InboxEntry(app: app, user: user, device: device, seq: seq, notificationID: notificationID, event: event, createdAt: createdAt)
        }
    }
}

/// The inbox log: every event written to a device's stream, numbered per (app, user), kept for
/// the app's `inbox.ttl` and at most `inbox.maxPerUser` entries per (app, user), for replay.
///
/// Implemented by each storage driver (``OpenStorage/inbox``), in the same database as the queue,
/// so several nodes sharing one database share one numbering.
public protocol InboxStore: Sendable {
    /// Appends `entries` in one transaction and returns them numbered, in the order given.
    ///
    /// Each entry gets the next number of its (app, user) counter, so numbers are strictly
    /// increasing per (app, user) in append order, across restarts and across nodes sharing one
    /// database; a number is never given twice, even after the entries holding it were dropped.
    /// The entries are committed (durable) when this returns. Then, per (app, user) touched, only
    /// the newest `maxPerUser(app)` entries are kept (the oldest are dropped; an entry numbered
    /// but dropped at once is still returned, so the caller can write it to the live stream).
    ///
    /// - Important: a reader that saw number `n` committed sees every number below `n` of that
    ///   (app, user) committed too (appends to one (app, user) are serialised), so a replay
    ///   `after: n` followed by live events has no gap.
    /// - Parameters:
    ///   - maxPerUser: the app's `inbox.maxPerUser`, by app id (at least 1 is kept).
    ///   - now: the caller's clock at the append (tests inject one; drivers take no wall clock of their own).
    /// - Throws: ``StoreUnavailableError`` when the database cannot be reached; nothing was appended.
    func append(_ entries: [InboxEntry.New], maxPerUser: @Sendable (String) -> Int, now: Date) async throws -> [InboxEntry]

    /// The entries of one device with `seq > after`, oldest first, at most `limit`.
    func entries(app: String, user: String, device: String, after: Int64, limit: Int) async throws -> [InboxEntry]

    /// The entry of one notification for one device, when the inbox holds it (a delivery sent
    /// again after a restart finds the number it was given before).
    func entry(app: String, user: String, device: String, notificationID: String) async throws -> InboxEntry?

    /// The highest number given so far for (app, user), 0 when none: a client with no
    /// `Last-Event-ID` starts live from here.
    func lastSequence(app: String, user: String) async throws -> Int64

    /// Deletes the entries of `app` created before `cutoff` (the app's `inbox.ttl` ago); returns
    /// how many. The counters are kept, so numbers are not reused.
    func prune(app: String, createdBefore cutoff: Date) async throws -> Int
}
