import HeraldCore

/// The value of APNs' `apns-push-type` header, with the rules Apple attaches to each type.
public enum PushType: String, CaseIterable, Sendable, Codable {
    case alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets, controls

    /// What Apple requires appended to the app's bundle id in `apns-topic` for this type.
    /// `mdm` uses the topic of the MDM certificate as configured, with nothing appended.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: return ""
        case .location: return ".location-query"
        case .voip: return ".voip"
        case .complication: return ".complication"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return ".push-type.liveactivity"
        case .pushtotalk: return ".voip-ptt"
        case .widgets: return ".push-type.widgets"
        case .controls: return ".push-type.controls"
        }
    }

    /// The `apns-topic` for an app whose bundle id (the app's `topic` in the config) is `bundleID`.
    public func topic(forBundleID bundleID: String) -> String {
        let suffix = topicSuffix
        if suffix.isEmpty || bundleID.hasSuffix(suffix) { return bundleID }
        return bundleID + suffix
    }

    /// The largest payload APNs accepts for this type, in bytes.
    public var maxPayloadBytes: Int { self == .voip ? 5120 : 4096 }

    /// The priority used when the notification does not set one: 5 for background pushes, 10 otherwise.
    public var defaultPriority: Int { self == .background ? 5 : 10 }

    /// The `apns-priority` sent when the notification asks for `requested` (`nil`: no preference).
    ///
    /// Background pushes always go with 5, whatever was asked: Apple says to always use 5 for
    /// them and refuses 10. Other types use the requested priority, else ``defaultPriority``.
    public func priority(requested: Int?) -> Int {
        self == .background ? 5 : requested ?? defaultPriority
    }

    /// Whether `priority` is one APNs knows: 10, 5 or 1 (for every type; see ``priority(requested:)``).
    public func allows(priority: Int) -> Bool { [1, 5, 10].contains(priority) }
}

/// `aps.interruption-level`.
public enum InterruptionLevel: String, CaseIterable, Sendable, Codable {
    case passive, active
    case timeSensitive = "time-sensitive"
    case critical
}
