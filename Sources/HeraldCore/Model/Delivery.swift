import FoundationEssentials
import Glibc

/// One notification on its way to one device through one transport.
public struct Delivery: Sendable, Equatable {
    /// Unique id of this delivery (the queue's row id in the daemon; a sequence in the CLI).
    public var id: Int64
    /// Id of the notification this delivery belongs to.
    public var notificationID: String
    public var app: String
    /// The app's `topic` (bundle id or package name) when the notification was accepted.
    public var topic: String
    /// The device's address, as its route's plugin normalised it.
    public var token: String
    /// The device's owner, when the delivery came from a user (not a raw address).
    public var user: String?
    /// Name of the transport that carries this delivery.
    public var transport: String
    /// 1 for the first attempt.
    public var attempt: Int
    /// The delivery's own id (a lower-case UUID), the same on every attempt: the status API's
    /// `message_id`; APNs transports send it as `apns-id`.
    public var messageID: UUID
    public var content: NotificationContent
    /// The payload as this delivery's route renders it, the same for every device of the
    /// notification (``RenderedPayload/unrendered`` until the delivery engine renders it).
    public var payload: RenderedPayload
    /// Where the delivery goes when its route cannot reach the device (a local route with no
    /// open stream, a push route that reports the token invalid or the notification rejected):
    /// another transport's name, or `nil` to finish (push) or wait in the inbox (local).
    public var fallback: String?
    /// The address the device's live stream is keyed by, when it is not ``token``: a browser's
    /// push subscription (the device) linked to the installation id its page's client token
    /// names (`POST /v1/stream/subscription`). The local route writes to, numbers in the inbox
    /// and unparks by ``streamKey``; a push route always sends to ``token``.
    public var streamDevice: String?
    /// When the notification was accepted (set by the delivery engine before a transport gets it).
    public var acceptedAt: Date?

    public init(id: Int64, notificationID: String, app: String, topic: String, token: String, user: String?,
                transport: String, attempt: Int = 1, messageID: UUID = UUIDSource.random(),
                content: NotificationContent, payload: RenderedPayload = .unrendered, fallback: String? = nil,
                streamDevice: String? = nil) {
        self.id = id
        self.notificationID = notificationID
        self.app = app
        self.topic = topic
        self.token = token
        self.user = user
        self.transport = transport
        self.attempt = attempt
        self.messageID = messageID
        self.content = content
        self.payload = payload
        self.fallback = fallback
        self.streamDevice = streamDevice
    }

    /// The device a live stream of this delivery is keyed by: ``streamDevice``, else ``token``.
    public var streamKey: String { streamDevice ?? token }

    /// What a renderer is told besides the content.
    public var renderContext: RenderContext { RenderContext(notificationID: notificationID, app: app, topic: topic) }
}

/// What a transport reports for one delivery: what the peer said, nothing more. The host's
/// ``OutcomePolicy`` decides what follows (a ``DeliveryAction``), and the delivery's stored
/// ``DeliveryState`` records where it ended.
public enum DeliveryOutcome: Sendable, Equatable {
    /// Accepted by the peer (APNs answered 200). `receipt` is the peer's own id for it, when
    /// it gives one (APNs's `apns-id`); `evidence` says how the transport knows, when the peer
    /// does not answer each notification (the binary protocol, a stream write), and is kept as
    /// the delivery's reason.
    case delivered(receipt: String?, evidence: String? = nil)
    /// A temporary failure (429, 500, 503, a dropped connection): try again later, no sooner
    /// than `after` seconds when given.
    case retry(after: TimeInterval?, reason: String)
    /// The address is dead (APNs's 410 Unregistered, BadDeviceToken, a feedback service) since
    /// `since` (the platform's timestamp) or, when `nil`, since now.
    case tokenInvalid(since: Date?, reason: String)
    /// The peer refused this notification (bad topic, payload too large, …): never retried.
    case rejected(reason: String)
    /// The notification's expiration passed before it could be sent.
    case expired
    /// The transport's own setup is wrong (credentials refused, a certificate expired, a key
    /// that cannot sign, an endpoint that does not speak the protocol): not the notification's
    /// fault. The host pauses the transport and keeps the delivery queued, attempt uncounted,
    /// until the setup is fixed. `reason` says what to fix and contains no secret.
    case setupFailure(reason: String)
    /// The device has no open stream (the local transport); `since` is when its last stream
    /// closed, `nil` when none was open in this run.
    case notConnected(since: Date?)
    /// Not sent: the transport holds back this delivery's peer for now (one push service of
    /// several paused or backing off while the others work). Due again `after` seconds from now
    /// (1 s when `nil`), the attempt not counted; it still expires at its expiration.
    case deferred(after: TimeInterval?, reason: String)

    /// The reason, when there is one.
    public var reason: String? {
        switch self {
        case .delivered(_, let evidence): return evidence
        case .expired: return nil
        case .notConnected: return "device not connected"
        case .retry(_, let r), .tokenInvalid(_, let r), .rejected(let r), .setupFailure(let r), .deferred(_, let r): return r
        }
    }
}

/// Where a delivery stands: the queue's state, the API's `state`, and (final states only) the
/// outcome in reports.
public enum DeliveryState: String, CaseIterable, Sendable, Codable {
    /// Waiting for its first attempt, for a retry, or for a paused transport.
    case queued
    /// Handed to its transport; the outcome is not recorded yet.
    case sent
    /// Waiting in the inbox for its device to open a stream (or for its presence grace to
    /// end); due again at its inbox TTL, when it expires.
    case parked
    case delivered
    /// Gave up: retries used up, no route, or no transport can carry it.
    case failed
    case invalidToken = "invalid_token"
    case rejected
    case expired

    /// Whether nothing more will happen to the delivery.
    public var isFinal: Bool { self != .queued && self != .sent && self != .parked }

    /// The final states, in the order reports list them.
    public static let finalStates: [DeliveryState] = [.delivered, .invalidToken, .rejected, .expired, .failed]
}

/// The final result for one device of a notification.
public struct DeliveryReport: Sendable, Equatable {
    public var token: String
    public var user: String?
    public var transport: String?
    /// A final state (never `queued` or `sent`).
    public var outcome: DeliveryState
    public var reason: String?
    public var attempts: Int
    /// The delivery's id (``Delivery/messageID``), when it was planned.
    public var messageID: String?
    /// The platform's receipt, when it gave one.
    public var receipt: String?

    public init(token: String, user: String?, transport: String?, outcome: DeliveryState, reason: String?,
                attempts: Int, messageID: String?, receipt: String? = nil) {
        self.token = token
        self.user = user
        self.transport = transport
        self.outcome = outcome
        self.reason = reason
        self.attempts = attempts
        self.messageID = messageID
        self.receipt = receipt
    }

    /// `{"token","user","transport","outcome","reason","attempts","message_id","receipt"}`, and
    /// `apns_id` (deprecated: the same as `message_id`) when `legacyAPNsID` (an APNs route).
    public func jsonLine(legacyAPNsID: Bool) -> String {
        var w = JSONWriter(capacity: 200)
        w.object { o in
            o.string("token", token)
            if let user { o.string("user", user) } else { o.null("user") }
            if let transport { o.string("transport", transport) } else { o.null("transport") }
            o.string("outcome", outcome.rawValue)
            if let reason { o.string("reason", reason) } else { o.null("reason") }
            o.int("attempts", attempts)
            if legacyAPNsID { if let apnsID = receipt ?? messageID { o.string("apns_id", apnsID) } else { o.null("apns_id") } }
            if let messageID { o.string("message_id", messageID) } else { o.null("message_id") }
            if let receipt { o.string("receipt", receipt) }
        }
        return w.string
    }
}
