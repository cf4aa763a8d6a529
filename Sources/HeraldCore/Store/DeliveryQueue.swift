import Dispatch
import FoundationEssentials
import Glibc

/// The daemon's durable outbox: notifications and their deliveries, claimed by workers with a
/// lease, completed with an outcome, retried on schedule, pruned after a retention.
///
/// The SQLite queue (`HeraldSQLite.SQLiteDeliveryQueue`) implements it today; a PostgreSQL
/// queue can follow without touching the daemon. Implementations must be safe to call from
/// many tasks at once, and ``enqueue(_:idempotencySince:)`` must have made the notification
/// durable before it returns.
///
/// Delivery states move `queued → sent → (delivered | failed | invalid_token | rejected |
/// expired)`, or `sent → queued` for a retry or a paused transport. A `sent` row whose claim was lost (a crash) is
/// ambiguous: the transport may or may not have accepted it; see ``interrupted(transport:)``.
public protocol DeliveryQueue: Sendable {
    /// Stores a notification with its deliveries in one transaction.
    ///
    /// When the notification has an idempotency key already stored for the same app at or
    /// after `idempotencySince`, nothing is stored and the first receipt comes back with
    /// ``EnqueueReceipt/replayed`` set.
    func enqueue(_ notification: QueuedNotification, idempotencySince: Date) async throws -> EnqueueReceipt

    /// The receipt of an earlier notification with this idempotency key, when within the window.
    func receipt(app: String, idempotencyKey: String, since: Date) async throws -> EnqueueReceipt?

    /// Claims up to `limit` deliveries of `transport` that are due at `now` (oldest first),
    /// marks them `sent` with a lease until `leaseUntil`, and counts the attempt.
    /// The returned ``Delivery/attempt`` is the claim's fencing token for ``complete(_:now:)``.
    func claim(transport: String, limit: Int, now: Date, leaseUntil: Date) async throws -> [ClaimedDelivery]

    /// Deliveries of `transport` that an earlier run of the daemon claimed and never completed
    /// (it crashed or was killed): the transport may have accepted them. The caller confirms or
    /// re-queues each through ``complete(_:now:)``.
    func interrupted(transport: String) async throws -> [ClaimedDelivery]

    /// Records outcomes. A completion whose attempt no longer matches the row (the lease ran
    /// out and the delivery was claimed again) is ignored.
    func complete(_ completions: [DeliveryCompletion], now: Date) async throws

    /// Extends the lease of claims still held by a transport (the worker calls it while a batch
    /// is out, so a slow but live transport never has its deliveries claimed twice). A claim
    /// whose attempt no longer matches is left alone.
    func renewLeases(_ claims: [ClaimedDelivery], until: Date) async throws

    /// Makes the parked deliveries of one device on `transport` due now (its stream opened);
    /// returns how many. `token` is the stream's device: a delivery matches by its
    /// ``Delivery/streamKey`` (its `streamDevice`, else its token).
    func unpark(transport: String, token: String, now: Date) async throws -> Int

    /// Ends as `expired` the oldest parked deliveries of `transport` for `app` beyond
    /// `keepPerUser` per user (the inbox's size bound); returns how many.
    func expireParked(transport: String, app: String, keepPerUser: Int, now: Date) async throws -> Int

    /// Returns deliveries whose lease ran out in this run to the queue; returns how many.
    func reclaimExpiredLeases(now: Date) async throws -> Int

    /// When the next queued delivery of `transport` is due (`nil` when none is queued).
    func nextDue(transport: String) async throws -> Date?

    /// A notification and the state of each of its deliveries.
    func status(notificationID: String) async throws -> NotificationStatus?

    /// Accepts waiting to be made durable (the API refuses new ones past
    /// `server.maxPendingAccepts`); 0 for a queue that commits each accept at once.
    var waitingAccepts: Int { get }

    /// Unfinished deliveries per transport (kept in memory; cheap).
    func depth() -> [String: QueueDepth]

    /// Deletes notifications created before `cutoff` whose deliveries are all final, with
    /// their deliveries; returns how many deliveries went.
    func prune(createdBefore cutoff: Date) async throws -> Int

    /// Checks with a cheap query that the queue can still read its database (`/readyz` calls
    /// it on every probe); throws what is wrong, such as a closed queue or a damaged file.
    func ping() async throws

    /// Finishes pending writes and closes the queue.
    func close() async
}

/// A delivery taken from the queue, with when its notification was accepted (for latency).
public struct ClaimedDelivery: Sendable {
    public var delivery: Delivery
    public var acceptedAt: Date

    public init(delivery: Delivery, acceptedAt: Date) {
        self.delivery = delivery
        self.acceptedAt = acceptedAt
    }
}

/// A notification fanned out and ready to be stored.
public struct QueuedNotification: Sendable {
    /// Public id (lower-case UUID).
    public var id: String
    public var app: String
    /// The app's bundle id when the notification was accepted (`apns-topic` before suffixes).
    public var topic: String
    public var content: NotificationContent
    public var idempotencyKey: String?
    public var createdAt: Date
    public var deliveries: [PlannedDelivery]

    public init(id: String, app: String, topic: String, content: NotificationContent, idempotencyKey: String?,
                createdAt: Date, deliveries: [PlannedDelivery]) {
        self.id = id
        self.app = app
        self.topic = topic
        self.content = content
        self.idempotencyKey = idempotencyKey
        self.createdAt = createdAt
        self.deliveries = deliveries
    }

    /// The notification of a fan-out plan: queued deliveries plus the devices already final.
    public init(plan: DispatchPlan, idempotencyKey: String?, createdAt: Date) {
        var planned = plan.deliveries.map {
            PlannedDelivery(token: $0.token, user: $0.user, transport: $0.transport,
                            messageID: $0.messageID, state: .queued, reason: nil, fallback: $0.fallback,
                            streamDevice: $0.streamDevice)
        }
        for r in plan.reports {
            planned.append(PlannedDelivery(token: r.token, user: r.user, transport: r.transport,
                                           messageID: UUIDSource.random(), state: r.outcome, reason: r.reason))
        }
        self.init(id: plan.notificationID, app: plan.app.id, topic: plan.app.topic, content: plan.content,
                  idempotencyKey: idempotencyKey, createdAt: createdAt, deliveries: planned)
    }
}

/// One device of a notification to store.
public struct PlannedDelivery: Sendable, Equatable {
    public var token: String
    public var user: String?
    /// `nil` when no transport can carry the device (then `state` is final).
    public var transport: String?
    /// The delivery's id, the same on every attempt (``Delivery/messageID``).
    public var messageID: UUID
    /// `.queued`, or a final state for a device refused before sending.
    public var state: DeliveryState
    public var reason: String?
    /// See ``Delivery/fallback``.
    public var fallback: String?
    /// See ``Delivery/streamDevice``.
    public var streamDevice: String?

    public init(token: String, user: String?, transport: String?, messageID: UUID,
                state: DeliveryState = .queued, reason: String? = nil, fallback: String? = nil, streamDevice: String? = nil) {
        self.token = token
        self.user = user
        self.transport = transport
        self.messageID = messageID
        self.state = state
        self.reason = reason
        self.fallback = fallback
        self.streamDevice = streamDevice
    }
}

/// What the API answers for an accepted notification (and again for a replay).
public struct EnqueueReceipt: Sendable, Equatable {
    public var id: String
    /// Deliveries stored (one per device).
    public var deliveries: Int
    /// Whether this is the answer to an earlier request with the same idempotency key.
    public var replayed: Bool
    /// The devices final at accept time (content their route refused, no route, an address no
    /// route takes), set by the accept path from its plan; empty on a replayed answer.
    public var refused: [DeliveryReport]

    public init(id: String, deliveries: Int, replayed: Bool, refused: [DeliveryReport] = []) {
        self.id = id
        self.deliveries = deliveries
        self.replayed = replayed
        self.refused = refused
    }
}

/// What to record for one claimed delivery: a final state, or back to `queued`.
public struct DeliveryCompletion: Sendable, Equatable {
    /// The delivery's row id.
    public var id: Int64
    /// The attempt of the claim (``Delivery/attempt``): a fencing token. A completion whose
    /// attempt no longer matches the stored delivery is ignored.
    public var attempt: Int
    /// A final state, `.queued` to send again at ``retryAt``, or `.parked` to wait for the device until ``retryAt``.
    public var state: DeliveryState
    public var reason: String?
    /// The platform's receipt for a delivered notification (APNs's `apns-id`, FCM's message
    /// name), when it gave one; `nil` keeps what is stored.
    public var receipt: String?
    /// When a `.queued` delivery is due again.
    public var retryAt: Date?
    /// For `.queued`: whether the attempt counts toward `maxAttempts`. `false` when the
    /// delivery was never the problem (its transport paused, the daemon stopped before sending).
    public var countsAttempt: Bool
    /// For `.queued`: the transport that takes the delivery over (its fallback); the stored
    /// fallback is cleared, so a delivery falls back once. `nil` keeps the transport.
    public var transport: String?
    /// The attempt to append to the delivery's history (``DeliveryStatus/history``) in the same
    /// write, when the completion is written (its attempt still matches); `nil` appends nothing.
    /// The queue keeps the last ``DeliveryAttempt/kept``.
    public var historyEntry: DeliveryAttempt?

    /// A final state.
    public static func finished(_ claim: Delivery, _ state: DeliveryState, reason: String?, receipt: String? = nil) -> DeliveryCompletion {
        precondition(state.isFinal, "finished(_:_:) takes a final state")
        return DeliveryCompletion(id: claim.id, attempt: claim.attempt, state: state, reason: reason, receipt: receipt,
                                  retryAt: nil, countsAttempt: true)
    }

    /// Parked: waits for its device (state `parked`) until `until`, or until ``DeliveryQueue/unpark(transport:token:now:)``.
    public static func parked(_ claim: Delivery, until: Date, reason: String) -> DeliveryCompletion {
        DeliveryCompletion(id: claim.id, attempt: claim.attempt, state: .parked, reason: reason, receipt: nil,
                           retryAt: until, countsAttempt: false)
    }

    /// Handed to another transport (the delivery's fallback), due now; the attempt is given back.
    public static func rerouted(_ claim: Delivery, to transport: String, at: Date, reason: String) -> DeliveryCompletion {
        DeliveryCompletion(id: claim.id, attempt: claim.attempt, state: .queued, reason: reason, receipt: nil,
                           retryAt: at, countsAttempt: false, transport: transport)
    }

    /// Back to the queue, due at `at`; `countsAttempt: false` gives the attempt back.
    public static func requeued(_ claim: Delivery, at: Date, reason: String, countsAttempt: Bool = true) -> DeliveryCompletion {
        DeliveryCompletion(id: claim.id, attempt: claim.attempt, state: .queued, reason: reason, receipt: nil,
                           retryAt: at, countsAttempt: countsAttempt)
    }

    public init(id: Int64, attempt: Int, state: DeliveryState, reason: String?, receipt: String?, retryAt: Date?,
                countsAttempt: Bool, transport: String? = nil, historyEntry: DeliveryAttempt? = nil) {
        self.id = id
        self.attempt = attempt
        self.state = state
        self.reason = reason
        self.receipt = receipt
        self.retryAt = retryAt
        self.countsAttempt = countsAttempt
        self.transport = transport
        self.historyEntry = historyEntry
    }

    /// This completion with `entry` to append to the delivery's history.
    public func recording(_ entry: DeliveryAttempt?) -> DeliveryCompletion {
        var c = self
        c.historyEntry = entry
        return c
    }
}

/// A notification and where each of its deliveries stands.
public struct NotificationStatus: Sendable, Equatable {
    public var id: String
    public var app: String
    public var createdAt: Date
    public var idempotencyKey: String?
    public var deliveries: [DeliveryStatus]

    public init(id: String, app: String, createdAt: Date, idempotencyKey: String?, deliveries: [DeliveryStatus]) {
        self.id = id
        self.app = app
        self.createdAt = createdAt
        self.idempotencyKey = idempotencyKey
        self.deliveries = deliveries
    }
}

/// One delivery's state, for `GET /v1/notifications/{id}`.
public struct DeliveryStatus: Sendable, Equatable {
    public var id: Int64
    public var token: String
    public var user: String?
    public var transport: String?
    public var state: DeliveryState
    public var attempts: Int
    public var lastReason: String?
    /// The delivery's id (``Delivery/messageID``), lower-case.
    public var messageID: String
    /// The platform's receipt, when it gave one.
    public var receipt: String?
    public var updatedAt: Date
    /// When a queued delivery is due.
    public var nextAttemptAt: Date?
    /// Its last attempts (at most ``DeliveryAttempt/kept``), oldest first; empty for a delivery
    /// not tried yet, and for attempts made before the history was kept.
    public var history: [DeliveryAttempt]

    public init(id: Int64, token: String, user: String?, transport: String?, state: DeliveryState, attempts: Int,
                lastReason: String?, messageID: String, receipt: String? = nil, updatedAt: Date, nextAttemptAt: Date?,
                history: [DeliveryAttempt] = []) {
        self.id = id
        self.token = token
        self.user = user
        self.transport = transport
        self.state = state
        self.attempts = attempts
        self.lastReason = lastReason
        self.messageID = messageID
        self.receipt = receipt
        self.updatedAt = updatedAt
        self.nextAttemptAt = nextAttemptAt
        self.history = history
    }
}

/// Unfinished deliveries of one transport.
public struct QueueDepth: Sendable, Equatable {
    /// Waiting (first attempt or retry).
    public var queued: Int
    /// Claimed and handed to the transport.
    public var inFlight: Int

    public init(queued: Int = 0, inFlight: Int = 0) {
        self.queued = queued
        self.inFlight = inFlight
    }

    /// Everything not yet final.
    public var backlog: Int { queued + inFlight }
}
