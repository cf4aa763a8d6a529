import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// Renders a notification as Xiaomi's form fields (without `registration_id` and
/// `time_to_live`, which the transport adds when it sends), kept as a JSON object of strings.
///
/// From the neutral content: `title`, `description` (the body), `payload` (the data as JSON with
/// `herald_id`), `pass_through` 1 for a content-available notification (else 0), `notify_type` -1
/// (sound, vibration and light), `notify_id` from the collapse key, `extra.notify_effect` 1 (open
/// the app), `extra.channel_id` from the message class and the route's channels. The `xiaomi`
/// override block sets `channel_id`, `notify_type`, `notify_effect`, `intent_uri`, `web_uri`, and
/// any `extra.*` through `extra`.
enum XiaomiRenderer {
    static let maxTitle = 50
    static let maxDescription = 128
    static let maxPayloadBytes = 4096
    static let blockKeys: Set<String> = ["channel_id", "notify_type", "notify_effect", "intent_uri", "web_uri", "extra"]

    static func render(_ content: NotificationContent, context: RenderContext, configuration: XiaomiConfiguration) throws(ContentProblem) -> RenderedPayload {
        let block = content.override("xiaomi")
        for key in block.keys.sorted() where !blockKeys.contains(key) {
            throw ContentProblem(field: "xiaomi.\(key)", "unknown key; known: \(blockKeys.sorted().joined(separator: ", "))")
        }
        func string(_ key: String) throws(ContentProblem) -> String? {
            guard let v = block[key] else { return nil }
            if let s = v.stringValue { return s }
            if let i = v.intValue { return String(i) }
            throw ContentProblem(field: "xiaomi.\(key)", "must be a string")
        }
        var fields: [String: String] = [:]
        fields["restricted_package_name"] = configuration.packageName
        var data = content.data
        if let existing = data["herald_id"], existing != .string(context.notificationID) {
            throw ContentProblem(field: "data.herald_id", "is Herald's: it carries the notification id")
        }
        data["herald_id"] = .string(context.notificationID)
        let payload = JSONValue.object(data).jsonString
        if payload.utf8.count > maxPayloadBytes {
            throw ContentProblem(field: "data", "Xiaomi's payload is at most \(maxPayloadBytes) bytes, found \(payload.utf8.count)")
        }
        fields["payload"] = payload
        if VendorVisibleText.isDataOnly(content) {
            fields["pass_through"] = "1"
        } else {
            fields["pass_through"] = "0"
            guard let (title, body) = VendorVisibleText.of(content, defaultTitle: configuration.defaultTitle),
                  !title.allSatisfy(\.isWhitespace), !body.allSatisfy(\.isWhitespace) else {
                throw ContentProblem(field: "body", "Xiaomi's notification needs a title or a body that is not only spaces (or send content_available)")
            }
            try VendorText.check(title, field: "title", limit: maxTitle, vendor: "Xiaomi")
            try VendorText.check(body, field: "body", limit: maxDescription, vendor: "Xiaomi")
            fields["title"] = title
            fields["description"] = body
            fields["notify_type"] = try string("notify_type") ?? "-1"
            fields["extra.notify_effect"] = try string("notify_effect") ?? "1"
            if let n = try string("notify_type"), !["-1", "1", "2", "4", "3", "5", "6", "7"].contains(n) {
                throw ContentProblem(field: "xiaomi.notify_type", "must be -1 (all) or a sum of 1 (sound), 2 (vibration) and 4 (light)")
            }
            if let e = fields["extra.notify_effect"], !["1", "2", "3"].contains(e) {
                throw ContentProblem(field: "xiaomi.notify_effect", "must be 1 (open the app), 2 (an activity: give intent_uri) or 3 (a web page: give web_uri)")
            }
            if let u = try string("intent_uri") { fields["extra.intent_uri"] = u }
            if let u = try string("web_uri") { fields["extra.web_uri"] = u }
            if fields["extra.notify_effect"] == "2" && fields["extra.intent_uri"] == nil {
                throw ContentProblem(field: "xiaomi.intent_uri", "notify_effect 2 opens an activity: give its intent_uri")
            }
            if fields["extra.notify_effect"] == "3" && fields["extra.web_uri"] == nil {
                throw ContentProblem(field: "xiaomi.web_uri", "notify_effect 3 opens a web page: give its web_uri")
            }
        }
        if let k = content.collapseKey { fields["notify_id"] = String(VendorText.notifyID(k, max: 1_000_000)) }
        let messageClass = MessageClass.of(content, fallback: configuration.messageClass)
        if let channel = try string("channel_id") ?? (messageClass.isSystem ? configuration.systemChannelID : configuration.marketingChannelID) {
            fields["extra.channel_id"] = channel
        }
        if let extra = block["extra"] {
            guard case .object(let members) = extra else { throw ContentProblem(field: "xiaomi.extra", "must be an object of strings") }
            for key in members.keys.sorted() {
                guard let v = members[key]!.stringValue else { throw ContentProblem(field: "xiaomi.extra.\(key)", "must be a string") }
                fields["extra.\(key)"] = v
            }
        }
        var w = JSONWriter(capacity: 256)
        w.write(.object(fields.mapValues(JSONValue.string)))
        return RenderedPayload(body: w.bytes, headers: [MessageKind.header: MessageKind.of(messageClass)], expiration: content.expiration)
    }
}
