import FoundationEssentials
import HeraldCore

/// Renders a notification as an FCM v1 `message`, once per notification, at accept time.
///
/// From the neutral content: `notification` {title, body, image}; `data` (every value a string:
/// non-string values JSON-encoded, plus `herald_id` = the notification id); `android`
/// {priority, collapse_key, notification {sound, click_action, notification_count, loc keys}}.
/// The `fcm` override block (a partial v1 message: `notification`, `data`, `android`, `apns`,
/// `webpush`, `fcm_options`) is merged over that. A content-available notification becomes a
/// data-only message (its visible text, if any, goes into `data` as `title`/`body`).
///
/// The body is the message without its target: the transport adds `token` per device and
/// `android.ttl` (from the expiration, counted as it is when sent) when it sends. `android` is
/// always the last member, so the ttl can be added without parsing.
enum FCMRenderer {
    /// FCM's limit on a message without its target, in bytes.
    static let maxPayloadBytes = 4096
    /// Room kept for the ttl the transport adds: `,"ttl":"2419200s"`.
    static let ttlRoom = #","ttl":"2419200s""#.utf8.count

    /// ``RenderedPayload/headers`` keys the transport reads back.
    enum Header {
        /// Set when the transport must add `android.ttl`: `empty` (the android object has no
        /// members yet) or `members`.
        static let ttl = "fcm-ttl"
    }

    static let blockKeys: Set<String> = ["notification", "data", "android", "apns", "webpush", "fcm_options"]
    static let androidKeys: Set<String> = ["collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification",
                                           "fcm_options", "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"]
    static let androidNotificationKeys: Set<String> = [
        "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args", "title_loc_key",
        "title_loc_args", "channel_id", "ticker", "sticky", "event_time", "local_only", "notification_priority", "default_sound",
        "default_vibrate_timings", "default_light_settings", "vibrate_timings", "visibility", "notification_count",
        "light_settings", "image", "bypass_proxy_notification", "proxy",
    ]
    static let notificationKeys: Set<String> = ["title", "body", "image"]
    static let apnsKeys: Set<String> = ["headers", "payload", "fcm_options", "live_activity_token"]
    static let webpushKeys: Set<String> = ["headers", "data", "notification", "fcm_options"]

    static func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        let block = try normalizedObject(content.overrides["fcm"], field: "fcm", allowed: blockKeys) ?? [:]
        let dataOnly = content.contentAvailable

        // notification
        var notification: [(String, String)] = []
        if !dataOnly {
            if let t = content.title { notification.append(("title", t)) }
            if let b = content.body { notification.append(("body", b)) }
            if let i = content.imageURL { notification.append(("image", i)) }
        }
        let notificationBlock = try normalizedObject(block["notification"], field: "fcm.notification", allowed: notificationKeys)
        if dataOnly, notificationBlock != nil {
            throw ContentProblem(field: "fcm.notification", "a content-available notification is sent as a data-only message; drop fcm.notification or content_available")
        }
        for key in (notificationBlock ?? [:]).keys.sorted() {
            guard let s = notificationBlock![key]!.stringValue else { throw ContentProblem(field: "fcm.notification.\(key)", "must be a string") }
            notification.removeAll { $0.0 == key }
            notification.append((key, s))
        }

        // data: strings only
        var data: [String: String] = [:]
        for (key, value) in content.data { data[key] = stringValue(value) }
        if let extra = block["data"] {
            guard case .object(let members) = extra else { throw ContentProblem(field: "fcm.data", "must be an object of strings") }
            for (key, value) in members { data[key] = stringValue(value) }
        }
        if dataOnly {
            if let t = content.title, data["title"] == nil { data["title"] = t }
            if let b = content.body, data["body"] == nil { data["body"] = b }
        }
        for key in data.keys.sorted() where isReserved(key) {
            let field = content.data[key] != nil ? "data.\(key)" : "fcm.data.\(key)"
            throw ContentProblem(field: field, "FCM reserves the data keys \"from\", \"message_type\" and any starting with \"google\" or \"gcm\"")
        }
        if let existing = data["herald_id"], existing != context.notificationID {
            throw ContentProblem(field: "data.herald_id", "is Herald's: it carries the notification id")
        }
        data["herald_id"] = context.notificationID

        // android
        let android = try normalizedObject(block["android"], field: "fcm.android", allowed: androidKeys) ?? [:]
        var androidMembers: [(String, JSONValue)] = []
        if let p = android["priority"] {
            guard let s = p.stringValue, ["high", "normal"].contains(s.lowercased()) else {
                throw ContentProblem(field: "fcm.android.priority", "must be \"high\" or \"normal\"")
            }
            androidMembers.append(("priority", .string(s.lowercased())))
        } else if let p = content.priority {
            androidMembers.append(("priority", .string(p == .high ? "high" : "normal")))
        }
        if let c = android["collapse_key"] ?? content.collapseKey.map(JSONValue.string) {
            guard case .string = c else { throw ContentProblem(field: "fcm.android.collapse_key", "must be a string") }
            androidMembers.append(("collapse_key", c))
        }
        if let ttl = android["ttl"] {
            guard let s = ttl.stringValue, isDuration(s), !s.hasPrefix("-") else {
                throw ContentProblem(field: "fcm.android.ttl", "must be a duration in seconds such as \"3600s\" or \"3.5s\"")
            }
            androidMembers.append(("ttl", ttl))
        }
        for key in ["restricted_package_name"] where android[key] != nil {
            guard case .string = android[key]! else { throw ContentProblem(field: "fcm.android.\(key)", "must be a string") }
            androidMembers.append((key, android[key]!))
        }
        for key in ["direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok"] where android[key] != nil {
            guard case .bool = android[key]! else { throw ContentProblem(field: "fcm.android.\(key)", "must be true or false") }
            androidMembers.append((key, android[key]!))
        }
        if let d = android["data"] {
            guard case .object(let members) = d else { throw ContentProblem(field: "fcm.android.data", "must be an object of strings") }
            var strings: [String: JSONValue] = [:]
            for (k, v) in members {
                if isReserved(k) { throw ContentProblem(field: "fcm.android.data.\(k)", "FCM reserves this data key") }
                strings[k] = .string(stringValue(v))
            }
            androidMembers.append(("data", .object(strings)))
        }
        if let o = try normalizedObject(android["fcm_options"], field: "fcm.android.fcm_options", allowed: ["analytics_label"]) {
            androidMembers.append(("fcm_options", .object(o)))
        }
        var androidNotification: [String: JSONValue] = [:]
        if !dataOnly {
            if let s = content.sound { androidNotification["sound"] = .string(s.name) }
            if let c = content.category { androidNotification["click_action"] = .string(c) }
            if let b = content.badge { androidNotification["notification_count"] = .number(Double(b)) }
            if let l = content.localization {
                if let k = l.titleKey { androidNotification["title_loc_key"] = .string(k) }
                if let a = l.titleArgs { androidNotification["title_loc_args"] = .array(a.map(JSONValue.string)) }
                if let k = l.bodyKey { androidNotification["body_loc_key"] = .string(k) }
                if let a = l.bodyArgs { androidNotification["body_loc_args"] = .array(a.map(JSONValue.string)) }
            }
        }
        if let n = try normalizedObject(android["notification"], field: "fcm.android.notification", allowed: androidNotificationKeys) {
            if dataOnly {
                throw ContentProblem(field: "fcm.android.notification", "a content-available notification is sent as a data-only message; drop fcm.android.notification or content_available")
            }
            for (k, v) in n { androidNotification[k] = v }
        }
        if !androidNotification.isEmpty { androidMembers.append(("notification", .object(androidNotification))) }

        let apns = try normalizedObject(block["apns"], field: "fcm.apns", allowed: apnsKeys, keepNames: true)
        let webpush = try normalizedObject(block["webpush"], field: "fcm.webpush", allowed: webpushKeys, keepNames: true)
        try checkHeaders(apns, field: "fcm.apns")
        try checkHeaders(webpush, field: "fcm.webpush")
        let options = try normalizedObject(block["fcm_options"], field: "fcm.fcm_options", allowed: ["analytics_label"])
        let addsTTL = content.expiration != nil && android["ttl"] == nil

        var w = JSONWriter(capacity: 512)
        w.object { o in
            if !notification.isEmpty { o.object("notification") { n in for (k, v) in notification { n.string(k, v) } } }
            o.object("data") { d in for k in data.keys.sorted() { d.string(k, data[k]!) } }
            if let apns { o.value("apns", .object(apns)) }
            if let webpush { o.value("webpush", .object(webpush)) }
            if let options { o.value("fcm_options", .object(options)) }
            if !androidMembers.isEmpty || addsTTL {
                o.object("android") { a in for (k, v) in androidMembers { a.value(k, v) } }
            }
        }
        if notification.isEmpty, androidNotification.isEmpty, data.count == 1, block.isEmpty, !content.contentAvailable {
            throw ContentProblem(field: "body", "nothing for FCM to send: give title, body, data, content_available or an fcm block")
        }
        let bytes = w.bytes
        let counted = bytes.count + (addsTTL ? ttlRoom : 0)
        if counted > maxPayloadBytes {
            throw ContentProblem(field: "payload", "the FCM message is \(counted) bytes\(addsTTL ? " (with room for the ttl)" : ""); FCM takes at most \(maxPayloadBytes) (the message without its token)")
        }
        var headers: [String: String] = [:]
        if addsTTL { headers[Header.ttl] = androidMembers.isEmpty ? "empty" : "members" }
        return RenderedPayload(body: bytes, headers: headers, expiration: content.expiration)
    }

    /// Checks the `headers` of an `apns` or `webpush` object, which FCM sends on as headers to
    /// APNs or the push service: an object of strings whose names are HTTP tokens and whose values
    /// have no control character (``FieldLimits/headerValueProblem(_:)``). Nothing is stripped.
    static func checkHeaders(_ object: [String: JSONValue]?, field: String) throws(ContentProblem) {
        guard let headers = object?["headers"] else { return }
        guard case .object(let members) = headers else {
            throw ContentProblem(field: "\(field).headers", "must be an object of header names and string values, found \(headers.typeDescription)")
        }
        for name in members.keys.sorted() {
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenByte) else {
                throw ContentProblem(field: "\(field).headers", "a header name is a token (letters, digits and !#$%&'*+-.^_`|~); one is not")
            }
            guard case .string(let value) = members[name]! else {
                throw ContentProblem(field: "\(field).headers.\(name)", "must be a string")
            }
            if let problem = FieldLimits.headerValueProblem(value) { throw ContentProblem(field: "\(field).headers.\(name)", problem) }
            // APNs refuses a longer collapse id; FCM would pass it on and fail the message.
            if name.lowercased() == "apns-collapse-id", value.utf8.count > maxAPNsCollapseIDBytes {
                throw ContentProblem(field: "\(field).headers.\(name)", "must be at most \(maxAPNsCollapseIDBytes) bytes (APNs's limit), found \(value.utf8.count)")
            }
        }
    }

    /// Longest `apns-collapse-id` APNs takes, in bytes.
    static let maxAPNsCollapseIDBytes = 64

    /// A byte of an HTTP token (RFC 9110 §5.6.2).
    static func isTokenByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(b)
    }

    /// A data value as FCM takes it: strings as they are, anything else as compact JSON.
    static func stringValue(_ value: JSONValue) -> String {
        if case .string(let s) = value { return s }
        return value.jsonString
    }

    static func isReserved(_ key: String) -> Bool {
        let k = key.lowercased()
        return k == "from" || k == "message_type" || k.hasPrefix("google") || k.hasPrefix("gcm")
    }

    /// `"<seconds>[.<1–9 digits>]s"`.
    static func isDuration(_ text: String) -> Bool {
        guard text.hasSuffix("s") else { return false }
        var s = text.dropLast()
        if s.hasPrefix("-") { s = s.dropFirst() }
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), !parts[0].isEmpty, parts[0].allSatisfy({ $0.isASCII && $0.isNumber }) else { return false }
        return parts.count == 1 || ((1...9).contains(parts[1].count) && parts[1].allSatisfy { $0.isASCII && $0.isNumber })
    }

    /// An object member with its keys in snake_case (protobuf JSON also takes lowerCamelCase),
    /// each one of `allowed`; `nil` when absent. `keepNames` keeps the keys as written (the
    /// `apns` and `webpush` blocks pass through to FCM, which reads either spelling).
    static func normalizedObject(_ value: JSONValue?, field: String, allowed: Set<String>, keepNames: Bool = false) throws(ContentProblem) -> [String: JSONValue]? {
        guard let value else { return nil }
        guard case .object(let members) = value else { throw ContentProblem(field: field, "must be an object, found \(value.typeDescription)") }
        var out: [String: JSONValue] = [:]
        for key in members.keys.sorted() {
            let name = snakeCase(key)
            guard allowed.contains(name) else {
                throw ContentProblem(field: "\(field).\(key)", "unknown key; known: \(allowed.sorted().joined(separator: ", "))")
            }
            out[keepNames ? key : name] = members[key]!
        }
        return out
    }

    static func snakeCase(_ name: String) -> String {
        var out = ""
        for c in name {
            if c.isASCII && c.isUppercase { out.append("_"); out.append(contentsOf: c.lowercased()) } else { out.append(c) }
        }
        return out
    }
}
