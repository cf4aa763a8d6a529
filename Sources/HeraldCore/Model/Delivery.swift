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

    public init(id: Int64, notificationID: String, app: String, topic: String, token: String, user: String?,
                environment: APNsEnvironment, transport: String, attempt: Int = 1, apnsID: UUID = UUIDSource.random(),
                content: NotificationContent, payload: [UInt8]? = nil) {
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
    }

    /// The `apns-topic` for this delivery's push type.
    public var apnsTopic: String { content.pushType.topic(forBundleID: topic) }
}

/// What a transport reports for one delivery; the dispatcher decides what follows.
public enum DeliveryOutcome: Sendable, Equatable {
    /// Accepted by the peer (APNs answered 200). `apnsID` is the id the peer confirmed.
    case delivered(apnsID: String?)
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
    /// Cannot be sent for a reason that is not the notification's (no route, a transport that
    /// does not work); not retried.
    case failed(reason: String)

    /// The final state name used in reports, the API and metrics.
    public var stateName: String {
        switch self {
        case .delivered: return "delivered"
        case .retry: return "retry"
        case .tokenInvalid: return "invalid_token"
        case .rejected: return "rejected"
        case .expired: return "expired"
        case .failed: return "failed"
        }
    }

    /// The reason, when there is one.
    public var reason: String? {
        switch self {
        case .delivered, .expired: return nil
        case .retry(_, let r), .tokenInvalid(_, let r), .rejected(let r), .failed(let r): return r
        }
    }
}

/// The final result for one device of a notification.
public struct DeliveryReport: Sendable, Equatable {
    public enum Outcome: String, Sendable, CaseIterable {
        case delivered
        case invalidToken = "invalid_token"
        case rejected, expired, failed
    }

    public var token: String
    public var user: String?
    public var transport: String?
    public var outcome: Outcome
    public var reason: String?
    public var attempts: Int
    public var apnsID: String?

    public init(token: String, user: String?, transport: String?, outcome: Outcome, reason: String?,
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
