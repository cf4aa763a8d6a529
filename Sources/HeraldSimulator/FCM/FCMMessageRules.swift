import HeraldCore

/// The FCM v1 `messages:send` request schema and the checks Google makes on it: known fields
/// only (snake_case or lowerCamelCase, as protobuf JSON allows), the right JSON types, string-only
/// `data`, reserved data keys, Duration syntax, enum values, exactly one target, 4096 bytes.
///
/// Pure: the simulator's handler calls ``check(_:)`` with the parsed body.
enum FCMMessageRules {
    /// What a field holds.
    indirect enum Kind: Sendable {
        case string, bool, int, number
        /// A `google.protobuf.Duration`: `"3.5s"`.
        case duration
        /// A `google.protobuf.Timestamp`: RFC 3339 text.
        case timestamp
        /// `map<string, string>`.
        case stringMap
        case stringArray
        case durationArray
        /// `google.protobuf.Struct`: any JSON object.
        case anyObject
        /// An enum: its proto type name and values (matched case-insensitively).
        case enumeration(String, [String])
        case message([String: Kind])
    }

    /// The longest message FCM takes, in bytes of compact JSON without its target (token, topic
    /// or condition): FCM's limit is on what the message carries.
    static let maxMessageBytes = 4096

    static let fcmOptions: Kind = .message(["analytics_label": .string])
    static let color: Kind = .message(["red": .number, "green": .number, "blue": .number, "alpha": .number])
    static let androidNotification: Kind = .message([
        "title": .string, "body": .string, "icon": .string, "color": .string, "sound": .string, "tag": .string,
        "click_action": .string, "body_loc_key": .string, "body_loc_args": .stringArray, "title_loc_key": .string,
        "title_loc_args": .stringArray, "channel_id": .string, "ticker": .string, "sticky": .bool, "event_time": .timestamp,
        "local_only": .bool,
        "notification_priority": .enumeration("google.firebase.fcm.v1.AndroidNotification.NotificationPriority",
                                              ["PRIORITY_UNSPECIFIED", "PRIORITY_MIN", "PRIORITY_LOW", "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MAX"]),
        "default_sound": .bool, "default_vibrate_timings": .bool, "default_light_settings": .bool, "vibrate_timings": .durationArray,
        "visibility": .enumeration("google.firebase.fcm.v1.AndroidNotification.Visibility", ["VISIBILITY_UNSPECIFIED", "PRIVATE", "PUBLIC", "SECRET"]),
        "notification_count": .int,
        "light_settings": .message(["color": color, "light_on_duration": .duration, "light_off_duration": .duration]),
        "image": .string, "bypass_proxy_notification": .bool,
        "proxy": .enumeration("google.firebase.fcm.v1.AndroidNotification.Proxy", ["PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"]),
    ])
    static let android: Kind = .message([
        "collapse_key": .string,
        "priority": .enumeration("google.firebase.fcm.v1.AndroidMessagePriority", ["NORMAL", "HIGH"]),
        "ttl": .duration, "restricted_package_name": .string, "data": .stringMap, "notification": androidNotification,
        "fcm_options": fcmOptions, "direct_boot_ok": .bool, "bandwidth_constrained_ok": .bool, "restricted_satellite_ok": .bool,
    ])
    static let apns: Kind = .message([
        "headers": .stringMap, "payload": .anyObject, "fcm_options": .message(["analytics_label": .string, "image": .string]),
        "live_activity_token": .string,
    ])
    static let webpush: Kind = .message([
        "headers": .stringMap, "data": .stringMap, "notification": .anyObject,
        "fcm_options": .message(["link": .string, "analytics_label": .string]),
    ])
    static let message: Kind = .message([
        "name": .string, "data": .stringMap, "notification": .message(["title": .string, "body": .string, "image": .string]),
        "android": android, "webpush": webpush, "apns": apns, "fcm_options": fcmOptions,
        "token": .string, "topic": .string, "condition": .string,
    ])
    static let request: Kind = .message(["validate_only": .bool, "message": message])

    /// What a request asks for, once it passed every check.
    struct Checked: Sendable, Equatable {
        enum Target: Sendable, Equatable {
            case token(String), topic(String), condition(String)
        }
        var target: Target
        var validateOnly: Bool
        /// The `message` object as sent.
        var message: JSONValue
        /// Its size in bytes of compact JSON, without the target.
        var bytes: Int
    }

    /// Checks a parsed request body.
    /// - Throws: the answer Google gives (400 INVALID_ARGUMENT with a BadRequest or FcmError detail).
    static func check(_ body: JSONValue) throws(FCMGoogleError) -> Checked {
        guard case .object = body else {
            throw .badRequest("Invalid JSON payload received. Expected an object at the top level, found \(body.typeDescription).", field: nil)
        }
        try checkValue(body, kind: request, path: "")
        let members = normalized(body.objectValue!)
        guard let message = members["message"], case .object(let fields) = message else {
            throw .badRequest("Message must be set.", field: "message")
        }
        let m = normalized(fields)
        var targets: [(String, String)] = []
        for name in ["token", "topic", "condition"] { if let v = m[name]?.stringValue { targets.append((name, v)) } }
        if targets.isEmpty { throw .badRequest("Recipient of the message is not set.", field: "message") }
        if targets.count > 1 {
            throw .badRequest("Invalid value at 'message' (oneof), oneof field 'target' is already set. Cannot set '\(targets[1].0)'",
                              field: "message")
        }
        let target: Checked.Target
        switch targets[0].0 {
        case "token":
            guard isRegistrationToken(targets[0].1) else { throw FCMGoogleError.invalidToken }
            target = .token(targets[0].1)
        case "topic":
            let topic = targets[0].1
            guard !topic.isEmpty, topic.utf8.count <= 900, !topic.hasPrefix("/"),
                  topic.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterClass.isAlphanumeric($0) || "-_.~%".unicodeScalars.contains($0)) })
            else { throw .badRequest("Invalid value at 'message.topic': \"\(topic)\" is not a valid topic name", field: "message.topic") }
            target = .topic(topic)
        default:
            target = .condition(targets[0].1)
        }
        for (path, map) in [("message.data", m["data"]), ("message.android.data", m["android"].flatMap { normalized($0.objectValue ?? [:])["data"] })] {
            guard let keys = map?.objectValue?.keys else { continue }
            for key in keys.sorted() where isReserved(key) {
                throw .badRequest("Invalid data payload key \"\(key)\": keys \"from\", \"message_type\" and any starting with \"google\" or \"gcm\" are reserved",
                                  field: "\(path).\(key)")
            }
        }
        if let ttl = m["android"].flatMap({ normalized($0.objectValue ?? [:])["ttl"] })?.stringValue, ttl.hasPrefix("-") {
            throw .badRequest("Invalid value at 'message.android.ttl': TTL must not be negative", field: "message.android.ttl")
        }
        // The payload counts, not the target: the message without token, topic or condition.
        var payload = fields
        for key in fields.keys where ["token", "topic", "condition"].contains(snakeCase(key)) { payload[key] = nil }
        let bytes = JSONValue.object(payload).jsonString.utf8.count
        if bytes > maxMessageBytes {
            throw FCMGoogleError.invalidArgument("Message is too big: \(bytes) bytes, the limit is \(maxMessageBytes)")
        }
        return Checked(target: target, validateOnly: members["validate_only"]?.boolValue ?? false, message: message, bytes: bytes)
    }

    /// An FCM registration token as Google issues them: 32–4096 bytes of `[A-Za-z0-9_:-]`.
    static func isRegistrationToken(_ token: String) -> Bool {
        (32...4096).contains(token.utf8.count)
            && token.utf8.allSatisfy { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x3A || b == 0x2D }
    }

    /// Data keys FCM reserves: `from`, `message_type`, and any starting with `google` or `gcm`.
    static func isReserved(_ key: String) -> Bool {
        let k = key.lowercased()
        return k == "from" || k == "message_type" || k.hasPrefix("google") || k.hasPrefix("gcm")
    }

    /// `"<seconds>[.<up to 9 digits>]s"`.
    static func isDuration(_ text: String) -> Bool {
        var s = Substring(text)
        guard s.hasSuffix("s") else { return false }
        s = s.dropLast()
        if s.hasPrefix("-") { s = s.dropFirst() }
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), !parts[0].isEmpty, parts[0].allSatisfy(\.isASCIIDigit) else { return false }
        if parts.count == 2 { return (1...9).contains(parts[1].count) && parts[1].allSatisfy(\.isASCIIDigit) }
        return true
    }

    /// Members keyed by their snake_case name (protobuf JSON takes `collapseKey` for `collapse_key`).
    static func normalized(_ members: [String: JSONValue]) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (k, v) in members { out[snakeCase(k)] = v }
        return out
    }

    static func snakeCase(_ name: String) -> String {
        var out = ""
        for c in name {
            if c.isUppercase && c.isASCII {
                out.append("_")
                out.append(contentsOf: c.lowercased())
            } else {
                out.append(c)
            }
        }
        return out
    }

    private static func checkValue(_ value: JSONValue, kind: Kind, path: String) throws(FCMGoogleError) {
        func invalid(_ type: String) -> FCMGoogleError {
            .badRequest("Invalid value at '\(path)' (\(type)), \(value.jsonString)", field: path)
        }
        if case .null = value { return }  // protobuf JSON: null means "not set"
        switch kind {
        case .string, .timestamp:
            guard case .string = value else { throw invalid("TYPE_STRING") }
        case .bool:
            guard case .bool = value else { throw invalid("TYPE_BOOL") }
        case .int:
            guard value.intValue != nil else { throw invalid("TYPE_INT32") }
        case .number:
            guard case .number = value else { throw invalid("TYPE_FLOAT") }
        case .duration:
            guard case .string(let s) = value, isDuration(s) else {
                throw .badRequest("Invalid value at '\(path)' (type.googleapis.com/google.protobuf.Duration), Field '\(path.split(separator: ".").last ?? "")', Illegal duration format; duration must end with 's'",
                                  field: path)
            }
        case .stringMap:
            guard case .object(let members) = value else { throw invalid("type.googleapis.com/google.protobuf.Map") }
            for (i, key) in members.keys.sorted().enumerated() {
                guard case .string = members[key]! else {
                    throw .badRequest("Invalid value at '\(path)[\(i)].value' (TYPE_STRING), \(members[key]!.jsonString)", field: "\(path)[\(i)].value")
                }
            }
        case .stringArray, .durationArray:
            guard case .array(let items) = value else { throw invalid("TYPE_STRING") }
            for (i, item) in items.enumerated() {
                if case .durationArray = kind { try checkValue(item, kind: .duration, path: "\(path)[\(i)]") } else {
                    try checkValue(item, kind: .string, path: "\(path)[\(i)]")
                }
            }
        case .anyObject:
            guard case .object = value else { throw invalid("type.googleapis.com/google.protobuf.Struct") }
        case .enumeration(let type, let values):
            guard case .string(let s) = value, values.contains(s.uppercased()) else { throw invalid("type.googleapis.com/\(type)") }
        case .message(let fields):
            guard case .object(let members) = value else { throw invalid("TYPE_MESSAGE") }
            for key in members.keys.sorted() {
                let name = snakeCase(key)
                guard let fieldKind = fields[name] else {
                    let at = path.isEmpty ? "" : " at '\(path)'"
                    throw .badRequest("Invalid JSON payload received. Unknown name \"\(key)\"\(at): Cannot find field.", field: path.isEmpty ? nil : path)
                }
                try checkValue(members[key]!, kind: fieldKind, path: path.isEmpty ? name : "\(path).\(name)")
            }
        }
    }
}

/// ASCII character tests (no Foundation CharacterSet).
enum CharacterClass {
    static func isAlphanumeric(_ s: Unicode.Scalar) -> Bool {
        (s >= "0" && s <= "9") || (s >= "a" && s <= "z") || (s >= "A" && s <= "Z")
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
