import FoundationEssentials
import Glibc
import HeraldCore

/// The APNs environment a device token belongs to (the device attribute `environment`).
public enum APNsEnvironment: String, CaseIterable, Sendable, Codable {
    /// Development builds (`api.sandbox.push.apple.com`).
    case sandbox
    /// App Store, TestFlight and ad-hoc builds (`api.push.apple.com`).
    case production

    /// The device attribute that holds it.
    public static let attribute = "environment"
}

extension DeviceAttributes {
    /// Attributes of an APNs device of `environment`.
    public static func apns(_ environment: APNsEnvironment) -> DeviceAttributes {
        DeviceAttributes([APNsEnvironment.attribute: environment.rawValue])
    }

    /// The APNs environment, when set and valid.
    public var apnsEnvironment: APNsEnvironment? { self[APNsEnvironment.attribute].flatMap(APNsEnvironment.init(rawValue:)) }
}

extension Device {
    /// An APNs device of `environment`.
    public init(app: String, token: String, user: String, transport: String, environment: APNsEnvironment,
                createdAt: Date, updatedAt: Date, invalidatedAt: Date? = nil, invalidationReason: String? = nil) {
        self.init(app: app, token: token, user: user, transport: transport, attributes: .apns(environment), createdAt: createdAt,
                  updatedAt: updatedAt, invalidatedAt: invalidatedAt, invalidationReason: invalidationReason)
    }

    /// The device's APNs environment (`nil` for devices of other platforms).
    public var environment: APNsEnvironment? { attributes.apnsEnvironment }
}

extension DeviceRegistration {
    /// The registration of an APNs device of `environment`.
    public init(app: String, token: String, user: String, transport: String, environment: APNsEnvironment) {
        self.init(app: app, token: token, user: user, transport: transport, attributes: .apns(environment))
    }

    public var environment: APNsEnvironment? { attributes.apnsEnvironment }
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
    /// `aps.alert.launch-image`.
    public var launchImage: String?

    public init(pushType: PushType? = nil, priority: Int? = nil, expiration: Int64? = nil, collapseID: String? = nil,
                threadID: String? = nil, category: String? = nil, contentAvailable: Bool = false,
                mutableContent: Bool = false, interruptionLevel: InterruptionLevel? = nil,
                relevanceScore: Double? = nil, targetContentID: String? = nil, filterCriteria: String? = nil,
                liveActivity: LiveActivityContent? = nil, launchImage: String? = nil) {
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
        self.launchImage = launchImage
    }
}

