import FoundationEssentials
import Glibc
import HeraldCore

/// A Live Activity token registered as a device (`POST /v1/devices` with `live_activity`): a
/// push-to-start token (one per install and ActivityAttributes type, iOS 17.2+) or an activity's
/// update token. Both are devices of the app's `apns-http2` route, kept apart from the user's
/// ordinary devices (``DeviceAttributes/purpose``): a notification to the user never reaches them.
struct LiveActivityToken: Sendable, Equatable {
    enum Kind: String, CaseIterable, Sendable {
        /// A push-to-start token.
        case start
        /// An update token of one running activity.
        case update
    }

    /// The plugin kind whose routes carry Live Activity pushes.
    static let routeKind = "apns-http2"
    /// ``DeviceAttributes/purpose`` of each kind.
    static func purpose(_ kind: Kind) -> String { "live_activity_\(kind.rawValue)" }
    /// Attribute keys beside the purpose.
    static let attributesTypeKey = "attributes_type"
    static let installationKey = "installation"
    static let activityKey = "activity"
    /// Longest `attributes_type`, `installation` or `activity`, in bytes.
    static let maxFieldBytes = 256

    var kind: Kind
    /// The ActivityAttributes type name (a push-to-start token's).
    var attributesType: String?
    /// The app install the token comes from: a new push-to-start token of the same install and
    /// type replaces the old, and so does a new update token of the same install and activity.
    var installation: String?
    /// The activity id (an update token's).
    var activity: String?

    /// Reads the `live_activity` block strictly; problems are recorded in `node`'s context with
    /// their path (`live_activity.attributes_type`).
    static func read(_ node: JSONNode) -> LiveActivityToken? {
        guard case .object = node.value else {
            node.error("expected an object with kind \"start\" or \"update\", found \(node.value.typeDescription)")
            return nil
        }
        let kind = node.oneOf("kind", Kind.self, required: true)
        let type = node.string("attributes_type")
        let installation = node.string("installation")
        let activity = node.string("activity")
        for (key, value) in [("attributes_type", type), ("installation", installation), ("activity", activity)] {
            if let value, value.isEmpty || value.utf8.count > maxFieldBytes {
                node.error(at: key, "must be 1 to \(maxFieldBytes) bytes")
            }
        }
        switch kind {
        case .start?:
            if type == nil { node.error(at: "attributes_type", "required for a push-to-start token: the name of the app's ActivityAttributes type") }
            if installation == nil { node.error(at: "installation", "required for a push-to-start token: the app install's id (one token per install and type)") }
            if activity != nil { node.error(at: "activity", "belongs to an update token (kind \"update\")") }
        case .update?:
            if activity == nil { node.error(at: "activity", "required for an update token: the id of the activity it updates") }
            if type != nil { node.error(at: "attributes_type", "belongs to a push-to-start token (kind \"start\")") }
        case nil:
            return nil
        }
        return LiveActivityToken(kind: kind!, attributesType: type, installation: installation, activity: activity)
    }

    /// The device attributes that mark the token (added to the route's own, such as the environment).
    func attributes(adding base: DeviceAttributes) -> DeviceAttributes {
        var a = base
        a[DeviceAttributes.purpose] = Self.purpose(kind)
        a[Self.attributesTypeKey] = attributesType
        a[Self.installationKey] = installation
        a[Self.activityKey] = activity
        return a
    }

    /// Whether `device` is a token this one replaces: the same kind, install and type (start)
    /// or activity (update), under another address.
    func replaces(_ device: Device, token: String) -> Bool {
        guard device.token != token, let installation,
              device.attributes[DeviceAttributes.purpose] == Self.purpose(kind),
              device.attributes[Self.installationKey] == installation else { return false }
        switch kind {
        case .start: return device.attributes[Self.attributesTypeKey] == attributesType
        case .update: return device.attributes[Self.activityKey] == activity
        }
    }
}
