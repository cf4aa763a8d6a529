import FoundationEssentials
import Glibc

/// A sound to play: a file name, or a critical alert's name and volume (platforms without
/// critical alerts play the name).
public enum Sound: Sendable, Equatable {
    case named(String)
    /// `{"critical": 1, "name": …, "volume": 0…1}` on Apple platforms.
    case critical(name: String, volume: Double?)

    /// The sound's file name.
    public var name: String {
        switch self {
        case .named(let n), .critical(let n, _): return n
        }
    }
}

/// How urgently a notification should reach its devices. Each plugin maps it to its
/// platform's scale (APNs 10/5/1, FCM `high`/`normal`, Web Push `Urgency`).
public enum NotificationPriority: String, CaseIterable, Sendable {
    case high, normal, low
}

/// Localisation keys and arguments, for apps that localise on the device.
public struct Localization: Sendable, Equatable {
    public var titleKey: String?
    public var titleArgs: [String]?
    public var subtitleKey: String?
    public var subtitleArgs: [String]?
    public var bodyKey: String?
    public var bodyArgs: [String]?

    public init(titleKey: String? = nil, titleArgs: [String]? = nil, subtitleKey: String? = nil, subtitleArgs: [String]? = nil,
                bodyKey: String? = nil, bodyArgs: [String]? = nil) {
        self.titleKey = titleKey
        self.titleArgs = titleArgs
        self.subtitleKey = subtitleKey
        self.subtitleArgs = subtitleArgs
        self.bodyKey = bodyKey
        self.bodyArgs = bodyArgs
    }

    public var isEmpty: Bool { self == Localization() }
}

/// What a notification says, in one vocabulary every platform shares; the same for every
/// device it fans out to. Each route's plugin renders its own payload from it and from its
/// override block (``overrides``).
public struct NotificationContent: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var localization: Localization?
    /// An image to show with the notification (a URL).
    public var imageURL: String?
    public var badge: Int?
    public var sound: Sound?
    /// The app's own keys, delivered beside the visible fields.
    public var data: [String: JSONValue]
    /// The category (actions) or click action.
    public var category: String?
    /// The thread or group the notification belongs to.
    public var thread: String?
    /// Notifications with the same key replace each other on the device.
    public var collapseKey: String?
    public var priority: NotificationPriority?
    /// When the notification stops being worth delivering, in seconds since 1970; 0 means
    /// deliver now or never; `nil` the platform's default.
    public var expiration: Int64?
    /// Wake the app in the background to fetch content (a data-only message on platforms that have them).
    public var contentAvailable: Bool
    /// Reload the app's widgets (WidgetKit push, iOS 26): a push with nothing to show, which only a
    /// route whose platform can carry it renders (APNs: push type `widgets`); every other route
    /// refuses it (``ContentProblem/widgetsNotCarried``).
    public var widgets: Bool
    /// Per-platform override blocks (`"apns"`, …), each a JSON object passed only to the plugins
    /// that read that block. The core never looks inside.
    public var overrides: [String: JSONValue]

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil, localization: Localization? = nil,
                imageURL: String? = nil, badge: Int? = nil, sound: Sound? = nil, data: [String: JSONValue] = [:],
                category: String? = nil, thread: String? = nil, collapseKey: String? = nil,
                priority: NotificationPriority? = nil, expiration: Int64? = nil, contentAvailable: Bool = false,
                overrides: [String: JSONValue] = [:], widgets: Bool = false) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.localization = localization
        self.imageURL = imageURL
        self.badge = badge
        self.sound = sound
        self.data = data
        self.category = category
        self.thread = thread
        self.collapseKey = collapseKey
        self.priority = priority
        self.expiration = expiration
        self.contentAvailable = contentAvailable
        self.widgets = widgets
        self.overrides = overrides
    }

    /// Whether the notification shows something (a title, subtitle, body or localised text).
    public var hasVisibleText: Bool {
        title != nil || subtitle != nil || body != nil || !(localization?.isEmpty ?? true)
    }

    /// The override block `name`'s members (empty when absent).
    public func override(_ name: String) -> [String: JSONValue] {
        if case .object(let members)? = overrides[name] { return members }
        return [:]
    }

    /// The notification's expiration as a date (`nil` when none, or 0 = now-or-never).
    public var expirationDate: Date? {
        guard let e = expiration, e > 0 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(e))
    }
}

/// A request to notify users and/or raw device addresses of one app.
public struct NotificationRequest: Sendable, Equatable {
    public var app: String
    public var users: [String]
    /// Raw addresses (normalised by the route that takes them).
    public var tokens: [String]
    public var content: NotificationContent
    /// A client-chosen key; the daemon answers a repeat within 24 h with the first answer.
    public var idempotencyKey: String?
    /// For raw addresses not in the store: the attributes their route's plugin reads (the API's
    /// `environment` for APNs), as for a registration.
    public var attributes: DeviceAttributes
    /// When set, raw addresses go through the app's first route of this platform only (a front
    /// end that knows its tokens' platform, such as gorush's `platform: 1`); `nil`: the first
    /// push route that takes each one.
    public var platform: Platform?

    public init(app: String, users: [String] = [], tokens: [String] = [], content: NotificationContent,
                idempotencyKey: String? = nil, attributes: DeviceAttributes = DeviceAttributes(), platform: Platform? = nil) {
        self.app = app
        self.users = users
        self.tokens = tokens
        self.content = content
        self.idempotencyKey = idempotencyKey
        self.attributes = attributes
        self.platform = platform
    }
}
