import FoundationEssentials
import Glibc

/// The visible alert of a notification: a plain string, or Apple's alert dictionary.
public enum AlertContent: Sendable, Equatable {
    case text(String)
    case fields(Alert)
}

/// Apple's `aps.alert` dictionary.
public struct Alert: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var launchImage: String?
    public var titleLocKey: String?
    public var titleLocArgs: [String]?
    public var subtitleLocKey: String?
    public var subtitleLocArgs: [String]?
    public var locKey: String?
    public var locArgs: [String]?

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil, launchImage: String? = nil,
                titleLocKey: String? = nil, titleLocArgs: [String]? = nil, subtitleLocKey: String? = nil,
                subtitleLocArgs: [String]? = nil, locKey: String? = nil, locArgs: [String]? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.launchImage = launchImage
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.subtitleLocKey = subtitleLocKey
        self.subtitleLocArgs = subtitleLocArgs
        self.locKey = locKey
        self.locArgs = locArgs
    }
}

/// `aps.sound`: a file name, or the critical-alert dictionary.
public enum Sound: Sendable, Equatable {
    case named(String)
    /// `{"critical": 1, "name": …, "volume": 0…1}`.
    case critical(name: String, volume: Double?)
}

/// Live Activity keys of `aps` (`event`, `timestamp`, `content-state`, …).
public struct LiveActivityContent: Sendable, Equatable {
    public enum Event: String, CaseIterable, Sendable { case start, update, end }
    public var event: Event
    /// Seconds since 1970; Apple drops updates older than the last one it saw.
    public var timestamp: Int64
    public var contentState: JSONValue?
    public var staleDate: Int64?
    public var dismissalDate: Int64?
    /// For `start`: the ActivityAttributes type name and values.
    public var attributesType: String?
    public var attributes: JSONValue?

    public init(event: Event, timestamp: Int64, contentState: JSONValue? = nil, staleDate: Int64? = nil,
                dismissalDate: Int64? = nil, attributesType: String? = nil, attributes: JSONValue? = nil) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.attributesType = attributesType
        self.attributes = attributes
    }
}

/// APNs options of a notification: headers and the non-visual `aps` keys.
public struct APNsOptions: Sendable, Equatable {
    /// `apns-push-type`; when `nil`, `background` for content-available-only notifications, else `alert`.
    public var pushType: PushType?
    /// `apns-priority` (10, 5 or 1); when `nil`, the push type's default. Background pushes are
    /// always sent with 5 (see ``PushType/priority(requested:)``).
    public var priority: Int?
    /// `apns-expiration` in seconds since 1970; 0 means "deliver now or never". `nil`: Apple's default.
    public var expiration: Int64?
    public var collapseID: String?
    public var threadID: String?
    public var category: String?
    public var contentAvailable: Bool = false
    public var mutableContent: Bool = false
    public var interruptionLevel: InterruptionLevel?
    /// 0…1.
    public var relevanceScore: Double?
    public var targetContentID: String?
    public var filterCriteria: String?
    public var liveActivity: LiveActivityContent?

    public init(pushType: PushType? = nil, priority: Int? = nil, expiration: Int64? = nil, collapseID: String? = nil,
                threadID: String? = nil, category: String? = nil, contentAvailable: Bool = false,
                mutableContent: Bool = false, interruptionLevel: InterruptionLevel? = nil,
                relevanceScore: Double? = nil, targetContentID: String? = nil, filterCriteria: String? = nil,
                liveActivity: LiveActivityContent? = nil) {
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.targetContentID = targetContentID
        self.filterCriteria = filterCriteria
        self.liveActivity = liveActivity
    }
}

/// What a notification says and how APNs should treat it; the same for every device it fans
/// out to.
public struct NotificationContent: Sendable, Equatable {
    public var alert: AlertContent?
    public var badge: Int?
    public var sound: Sound?
    /// Custom keys beside `aps` in the payload (`aps` itself is reserved).
    public var data: [String: JSONValue]
    public var apns: APNsOptions

    public init(alert: AlertContent? = nil, badge: Int? = nil, sound: Sound? = nil, data: [String: JSONValue] = [:],
                apns: APNsOptions = APNsOptions()) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.data = data
        self.apns = apns
    }

    /// The push type sent: the explicit one, else `background` for a notification that only
    /// sets content-available, `liveactivity` when Live Activity keys are present, else `alert`.
    public var pushType: PushType {
        if let t = apns.pushType { return t }
        if apns.liveActivity != nil { return .liveactivity }
        if apns.contentAvailable && alert == nil && badge == nil && sound == nil { return .background }
        return .alert
    }

    /// The priority sent: 5 for background pushes, else the explicit one, else the push type's default.
    public var priority: Int { pushType.priority(requested: apns.priority) }

    /// The notification's expiration as a date (`nil` when none, or 0 = now-or-never).
    public var expirationDate: Date? {
        guard let e = apns.expiration, e > 0 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(e))
    }
}

/// A request to notify users and/or raw device tokens of one app.
public struct NotificationRequest: Sendable, Equatable {
    public var app: String
    public var users: [String]
    /// Raw tokens (normalised by the dispatcher).
    public var tokens: [String]
    public var content: NotificationContent
    /// A client-chosen key; the daemon answers a repeat within 24 h with the first answer.
    public var idempotencyKey: String?
    /// For raw tokens not in the store: their environment (default: that of the app's first route).
    public var environment: APNsEnvironment?

    public init(app: String, users: [String] = [], tokens: [String] = [], content: NotificationContent,
                idempotencyKey: String? = nil, environment: APNsEnvironment? = nil) {
        self.app = app
        self.users = users
        self.tokens = tokens
        self.content = content
        self.idempotencyKey = idempotencyKey
        self.environment = environment
    }
}
