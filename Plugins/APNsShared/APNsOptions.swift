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
    /// For `start` (iOS 18): the broadcast channel the started activity subscribes to (`input-push-channel`).
    public var inputPushChannel: String?

    public init(event: Event, timestamp: Int64, contentState: JSONValue? = nil, staleDate: Int64? = nil,
                dismissalDate: Int64? = nil, attributesType: String? = nil, attributes: JSONValue? = nil,
                inputPushChannel: String? = nil) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushChannel = inputPushChannel
    }

    /// The first of Apple's Live Activity rules this content breaks, as (field under
    /// `apns.live_activity`, message); `nil` when it keeps them. `hasAlert`: whether the
    /// notification has an alert (a start needs one).
    ///
    /// Apple ("Starting and updating Live Activities with ActivityKit push notifications"): a
    /// start needs `attributes-type`, `attributes`, `content-state` and `alert`; an update needs
    /// `content-state`; `input-push-channel` belongs to a start.
    public func problem(hasAlert: Bool) -> (field: String, message: String)? {
        switch event {
        case .start:
            if attributesType?.isEmpty != false { return ("attributes_type", "required to start an activity: the name of the app's ActivityAttributes type") }
            if attributes == nil { return ("attributes", "required to start an activity: the static attributes (an object)") }
            if contentState == nil { return ("content_state", "required to start an activity: the first content state (an object)") }
            if !hasAlert { return ("alert", "APNs requires an alert (title and body) to start an activity") }
        case .update:
            if contentState == nil { return ("content_state", "required to update an activity (an object)") }
        case .end:
            break
        }
        if let channel = inputPushChannel {
            if event != .start { return ("input_push_channel", "only a start subscribes an activity to a channel") }
            let ok = !channel.isEmpty && channel.utf8.count <= 88 && channel.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || c == 0x2B || c == 0x2F || c == 0x3D
            }
            if !ok { return ("input_push_channel", "expected an apns-channel-id (base64)") }
        }
        return nil
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

