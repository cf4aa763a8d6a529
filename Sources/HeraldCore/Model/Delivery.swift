import FoundationEssentials
import Glibc

/// One notification on its way to one device through one transport.
public struct Delivery: Sendable, Equatable {
    /// Unique id of this delivery (the queue's row id in the daemon; a sequence in the CLI).
    public var id: Int64
    /// Id of the notification this delivery belongs to.
    public var notificationID: String
    public var app: String
    /// `apns-topic` before the push type's suffix: the app's bundle id.
    public var topic: String
    /// Normalised hex token.
    public var token: String
    /// The device's owner, when the delivery came from a user (not a raw token).
    public var user: String?
    public var environment: APNsEnvironment
    /// Name of the transport that carries this delivery.
    public var transport: String
    /// 1 for the first attempt.
    public var attempt: Int
    /// The `apns-id` Herald sends and stores with the delivery (lower-case UUID).
    public var apnsID: UUID
    public var content: NotificationContent
    /// The payload, built once per notification (see ``APNsPayload``).
    public var payload: [UInt8]
    /// Where the delivery goes when its route cannot reach the device (a local route with no
    /// open stream, a push route that reports the token invalid or the notification rejected):
    /// another transport's name, or `nil` to finish (push) or wait in the inbox (local).
    public var fallback: String?
    /// When the notification was accepted (set by the delivery engine before a transport gets it).
    public var acceptedAt: Date?

    public init(id: Int64, notificationID: String, app: String, topic: String, token: String, user: String?,
                environment: APNsEnvironment, transport: String, attempt: Int = 1, apnsID: UUID = UUIDSource.random(),
                content: NotificationContent, payload: [UInt8]? = nil, fallback: String? = nil) {
        self.id = id
        self.notificationID = notificationID
        self.app = app
        self.topic = topic
        self.token = token
        self.user = user
        self.environment = environment
        self.transport = transport
        self.attempt = attempt
        self.apnsID = apnsID
        self.content = content
        self.payload = payload ?? APNsPayload.encode(content)
        self.fallback = fallback
    }

    /// The `apns-topic` for this delivery's push type.
    public var apnsTopic: String { content.pushType.topic(forBundleID: topic) }
}

/// What a transport reports for one delivery: what the peer said, nothing more. The host's
/// ``OutcomePolicy`` decides what follows (a ``DeliveryAction``), and the delivery's stored
/// ``DeliveryState`` records where it ended.
public enum DeliveryOutcome: Sendable, Equatable {
    /// Accepted by the peer (APNs answered 200). `apnsID` is the id the peer confirmed;
    /// `evidence` says how the transport knows, when the peer does not answer each
    /// notification (the binary protocol), and is kept as the delivery's reason.
    case delivered(apnsID: String?, evidence: String? = nil)
    /// A temporary failure (429, 500, 503, a dropped connection): try again later, no sooner
    /// than `after` seconds when given.
    case retry(after: TimeInterval?, reason: String)
    /// The token is dead (410 Unregistered, BadDeviceToken, feedback service) since `since`
    /// (Apple's timestamp) or, when `nil`, since now.
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

    /// The reason, when there is one.
    public var reason: String? {
        switch self {
        case .delivered(_, let evidence): return evidence
        case .expired: return nil
        case .notConnected: return "device not connected"
        case .retry(_, let r), .tokenInvalid(_, let r), .rejected(let r), .setupFailure(let r): return r
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
    public var apnsID: String?

    public init(token: String, user: String?, transport: String?, outcome: DeliveryState, reason: String?,
                attempts: Int, apnsID: String?) {
        self.token = token
        self.user = user
        self.transport = transport
        self.outcome = outcome
        self.reason = reason
        self.attempts = attempts
        self.apnsID = apnsID
    }

    /// `{"token","user","transport","outcome","reason","attempts","apns_id"}`.
    public var jsonLine: String {
        var w = JSONWriter(capacity: 200)
        w.object { o in
            o.string("token", token)
            if let user { o.string("user", user) } else { o.null("user") }
            if let transport { o.string("transport", transport) } else { o.null("transport") }
            o.string("outcome", outcome.rawValue)
            if let reason { o.string("reason", reason) } else { o.null("reason") }
            o.int("attempts", attempts)
            if let apnsID { o.string("apns_id", apnsID) } else { o.null("apns_id") }
        }
        return w.string
    }
}
