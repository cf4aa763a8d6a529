import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// The body of the Matrix Push Gateway API's `POST /_matrix/push/v1/notify`: what a homeserver
/// says about one event (or a badge update) and the pushers to tell.
///
/// Read with ``parse(_:)``: the spec's fields are type-checked (a wrong type is an error naming
/// its path); unknown fields are ignored, since homeservers add their own (Synapse sends `id`
/// and `membership`), and `null` counts as absent.
public struct MatrixNotification: Sendable, Equatable {
    /// `high` (the default) or `low`.
    public enum Priority: String, Sendable, Equatable { case high, low }

    public var eventID: String?
    public var roomID: String?
    /// The event's `type` (`m.room.message`, `m.call.invite`, …); absent for badge-only updates
    /// and for pushers with `"format": "event_id_only"`.
    public var type: String?
    public var sender: String?
    public var senderDisplayName: String?
    public var roomName: String?
    public var roomAlias: String?
    /// The recipient is the member event's `state_key`.
    public var userIsTarget: Bool?
    /// `membership` of an `m.room.member` event (Synapse sends it; the spec does not list it).
    public var membership: String?
    public var priority: Priority = .high
    /// The event's `content`, when the homeserver includes it.
    public var content: [String: JSONValue]?
    /// `counts.unread`.
    public var unread: Int?
    /// `counts.missed_calls`.
    public var missedCalls: Int?
    public var devices: [MatrixDevice]

    public init(eventID: String? = nil, roomID: String? = nil, type: String? = nil, sender: String? = nil,
                senderDisplayName: String? = nil, roomName: String? = nil, roomAlias: String? = nil,
                userIsTarget: Bool? = nil, membership: String? = nil, priority: Priority = .high,
                content: [String: JSONValue]? = nil, unread: Int? = nil, missedCalls: Int? = nil, devices: [MatrixDevice]) {
        self.eventID = eventID
        self.roomID = roomID
        self.type = type
        self.sender = sender
        self.senderDisplayName = senderDisplayName
        self.roomName = roomName
        self.roomAlias = roomAlias
        self.userIsTarget = userIsTarget
        self.membership = membership
        self.priority = priority
        self.content = content
        self.unread = unread
        self.missedCalls = missedCalls
        self.devices = devices
    }

    /// Most devices in one request (Synapse sends one per request).
    public static let maxDevices = 1000

    /// Reads a notify body.
    /// - Throws: ``RequestIssues`` naming every field that is missing or of the wrong type.
    public static func parse(_ body: JSONValue) throws(RequestIssues) -> MatrixNotification {
        var issues: [JSONIssue] = []
        guard case .object(let root) = body else {
            throw RequestIssues([JSONIssue(path: "", message: "expected a JSON object with \"notification\", found \(body.typeDescription)")])
        }
        guard let n = present(root["notification"]) else {
            throw RequestIssues([JSONIssue(path: "notification", message: "is required")])
        }
        guard case .object(let o) = n else {
            throw RequestIssues([JSONIssue(path: "notification", message: "expected an object, found \(n.typeDescription)")])
        }
        var reader = FieldReader(object: o, path: "notification")
        var result = MatrixNotification(devices: [])
        result.eventID = reader.string("event_id")
        result.roomID = reader.string("room_id")
        result.type = reader.string("type")
        result.sender = reader.string("sender")
        result.senderDisplayName = reader.string("sender_display_name")
        result.roomName = reader.string("room_name")
        result.roomAlias = reader.string("room_alias")
        result.userIsTarget = reader.bool("user_is_target")
        result.membership = reader.string("membership")
        if let p = reader.string("prio") {
            if let priority = Priority(rawValue: p) { result.priority = priority } else {
                reader.issues.append(JSONIssue(path: "notification.prio", message: "expected \"high\" or \"low\", found \"\(p)\""))
            }
        }
        result.content = reader.object("content")
        if let counts = reader.object("counts") {
            var c = FieldReader(object: counts, path: "notification.counts")
            result.unread = c.count("unread")
            result.missedCalls = c.count("missed_calls")
            reader.issues += c.issues
        }
        issues += reader.issues
        switch present(o["devices"]) {
        case nil:
            issues.append(JSONIssue(path: "notification.devices", message: "is required"))
        case .array(let items)?:
            if items.isEmpty { issues.append(JSONIssue(path: "notification.devices", message: "must list at least one device")) }
            if items.count > maxDevices {
                issues.append(JSONIssue(path: "notification.devices", message: "at most \(maxDevices) devices per request, found \(items.count)"))
            }
            for (i, item) in items.prefix(maxDevices).enumerated() {
                let path = "notification.devices[\(i)]"
                guard case .object(let d) = item else {
                    issues.append(JSONIssue(path: path, message: "expected an object with app_id and pushkey, found \(item.typeDescription)"))
                    continue
                }
                var r = FieldReader(object: d, path: path)
                let appID = r.string("app_id", required: true)
                let pushkey = r.string("pushkey", required: true)
                let ts = r.int64("pushkey_ts")
                let data = r.object("data")
                let tweaks = r.object("tweaks") ?? [:]
                issues += r.issues
                if let appID, let pushkey {
                    result.devices.append(MatrixDevice(appID: appID, pushkey: pushkey, pushkeyTS: ts, data: data, tweaks: tweaks))
                }
            }
        case let other?:
            issues.append(JSONIssue(path: "notification.devices", message: "expected an array of devices, found \(other.typeDescription)"))
        }
        if !issues.isEmpty { throw RequestIssues(issues) }
        return result
    }

    private static func present(_ v: JSONValue?) -> JSONValue? {
        if let v, v != .null { return v }
        return nil
    }

    /// Typed reads of one object's members, collecting issues with their paths.
    private struct FieldReader {
        let object: [String: JSONValue]
        let path: String
        var issues: [JSONIssue] = []

        init(object: [String: JSONValue], path: String) {
            self.object = object
            self.path = path
        }

        private mutating func value(_ key: String, required: Bool) -> JSONValue? {
            guard let v = MatrixNotification.present(object[key]) else {
                if required { issues.append(JSONIssue(path: "\(path).\(key)", message: "is required")) }
                return nil
            }
            return v
        }

        private mutating func wrong(_ key: String, _ expected: String, _ v: JSONValue) {
            issues.append(JSONIssue(path: "\(path).\(key)", message: "expected \(expected), found \(v.typeDescription)"))
        }

        mutating func string(_ key: String, required: Bool = false) -> String? {
            guard let v = value(key, required: required) else { return nil }
            guard case .string(let s) = v else { wrong(key, "a string", v); return nil }
            if required && s.isEmpty { issues.append(JSONIssue(path: "\(path).\(key)", message: "must not be empty")); return nil }
            return s
        }

        mutating func bool(_ key: String) -> Bool? {
            guard let v = value(key, required: false) else { return nil }
            guard case .bool(let b) = v else { wrong(key, "true or false", v); return nil }
            return b
        }

        mutating func object(_ key: String) -> [String: JSONValue]? {
            guard let v = value(key, required: false) else { return nil }
            guard case .object(let o) = v else { wrong(key, "an object", v); return nil }
            return o
        }

        mutating func int64(_ key: String) -> Int64? {
            guard let v = value(key, required: false) else { return nil }
            guard let i = v.intValue else { wrong(key, "a whole number", v); return nil }
            return Int64(i)
        }

        /// A count: a whole number from 0 to 2³¹−1.
        mutating func count(_ key: String) -> Int? {
            guard let i = int64(key) else { return nil }
            guard (0...Int64(Int32.max)).contains(i) else {
                issues.append(JSONIssue(path: "\(path).\(key)", message: "must be between 0 and \(Int32.max), found \(i)"))
                return nil
            }
            return Int(i)
        }
    }
}

/// One pusher of a notify request.
public struct MatrixDevice: Sendable, Equatable {
    /// The pusher's `app_id` (a key of `matrix.apps` in the config).
    public var appID: String
    /// The pusher's `pushkey` as the homeserver has it (base64 or hex for APNs).
    public var pushkey: String
    /// When the pusher was last updated, in seconds since 1970.
    public var pushkeyTS: Int64?
    /// The pusher's `data` minus `url` (`format`, `default_payload`).
    public var data: [String: JSONValue]?
    /// Set by push rules (`sound`, `highlight`).
    public var tweaks: [String: JSONValue]

    public init(appID: String, pushkey: String, pushkeyTS: Int64? = nil, data: [String: JSONValue]? = nil,
                tweaks: [String: JSONValue] = [:]) {
        self.appID = appID
        self.pushkey = pushkey
        self.pushkeyTS = pushkeyTS
        self.data = data
        self.tweaks = tweaks
    }

    /// `pushkey_ts` as a date (`nil` when absent).
    public var pushkeyDate: Date? { pushkeyTS.map { Date(timeIntervalSince1970: TimeInterval($0)) } }
}

/// APNs pushkeys as pushers carry them: hex, or base64 of the token's bytes (what Element iOS
/// registers, and what Sygnal converts by default).
public enum MatrixPushkey {
    /// The normalised hex token of a pushkey.
    ///
    /// A pushkey made only of hex digits, of even length, is taken as hex; anything else is
    /// decoded as base64 (standard or URL-safe alphabet, padding optional). A 32-byte token in
    /// base64 is 44 characters with one `=`, so it is never mistaken for hex.
    /// - Throws: ``DeviceToken/Problem`` when the bytes are not a plausible APNs token.
    public static func hexToken(_ pushkey: String) throws(DeviceToken.Problem) -> String {
        let isHex = !pushkey.isEmpty && pushkey.utf8.count % 2 == 0 && pushkey.utf8.allSatisfy {
            ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 70) || ($0 >= 97 && $0 <= 102)
        }
        if isHex { return try DeviceToken.normalize(pushkey) }
        guard let bytes = base64Decode(pushkey) else {
            if let bad = pushkey.first(where: { !($0.isASCII && ($0.isLetter || $0.isNumber || "+/-_=".contains($0))) }) {
                throw .notHex(character: bad)
            }
            throw .notHex(character: "=")
        }
        return try DeviceToken.normalize(DeviceToken.hex(bytes))
    }

    /// Decodes standard or URL-safe base64, with or without padding; `nil` when malformed.
    public static func base64Decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        values.reserveCapacity(text.utf8.count)
        var padding = 0
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"), UInt8(ascii: "-"): v = 62
            case UInt8(ascii: "/"), UInt8(ascii: "_"): v = 63
            case UInt8(ascii: "="): padding += 1; continue
            default: return nil
            }
            if padding > 0 { return nil }   // data after padding
            values.append(v)
        }
        if padding > 2 || values.count % 4 == 1 || values.isEmpty { return nil }
        if padding > 0 && (values.count + padding) % 4 != 0 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(values.count * 3 / 4)
        var i = 0
        while i + 4 <= values.count {
            out.append(values[i] << 2 | values[i + 1] >> 4)
            out.append(values[i + 1] << 4 | values[i + 2] >> 2)
            out.append(values[i + 2] << 6 | values[i + 3])
            i += 4
        }
        let rest = values.count - i
        if rest >= 2 { out.append(values[i] << 2 | values[i + 1] >> 4) }
        if rest == 3 { out.append(values[i + 1] << 4 | values[i + 2] >> 2) }
        return out
    }
}
