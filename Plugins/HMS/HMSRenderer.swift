import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// Renders a notification as Push Kit's `message` (without `token`), once per notification.
///
/// From the neutral content: `android.notification` {title, body, image, click_action (open the
/// app, or the intent action named by a `category` that is not a message class), notify_id from
/// the collapse key, importance}, `android.urgency` from the priority, `android.category` from the
/// message class, and `data` (a string: the data as JSON with `herald_id`). A content-available
/// notification is a data message (no `android.notification`). The `hms` override block
/// (``blockKeys``) sets Huawei's own fields. The transport adds `token` and `android.ttl` (from
/// the expiration, as it is when sent).
enum HMSRenderer {
    /// Push Kit's limit on a message, in bytes.
    static let maxMessageBytes = 4096
    /// Room kept for the ttl and the wrapper the transport adds per request (without the tokens).
    static let ttlRoom = #","ttl":"1296000s""#.utf8.count

    static let blockKeys: Set<String> = ["category", "importance", "channel_id", "click_action", "urgency", "bi_tag", "receipt_id", "notification"]
    static let notificationKeys: Set<String> = [
        "title", "body", "icon", "color", "sound", "default_sound", "tag", "click_action", "body_loc_key", "body_loc_args",
        "title_loc_key", "title_loc_args", "multi_lang_key", "channel_id", "notify_summary", "image", "style", "big_title",
        "big_body", "auto_clear", "notify_id", "group", "badge", "ticker", "when", "local_only", "importance", "use_default_vibrate",
        "use_default_light", "vibrate_config", "visibility", "light_settings", "foreground_show", "inbox_content", "buttons", "profile_id",
    ]
    static let categories: Set<String> = ["IM", "VOIP", "SUBSCRIPTION", "TRAVEL", "HEALTH", "WORK", "ACCOUNT", "EXPRESS", "FINANCE",
                                          "DEVICE_REMINDER", "MAIL", "PLAY_VOICE", "MARKETING"]

    /// Huawei's `android.category` for a class.
    static func category(_ c: MessageClass) -> String {
        switch c {
        case .im: return "IM"
        case .voip: return "VOIP"
        case .account: return "ACCOUNT"
        case .order: return "EXPRESS"
        case .finance: return "FINANCE"
        case .travel: return "TRAVEL"
        case .health: return "HEALTH"
        case .work, .todo: return "WORK"
        case .device: return "DEVICE_REMINDER"
        case .mail: return "MAIL"
        case .subscription: return "SUBSCRIPTION"
        default: return "MARKETING"
        }
    }

    static func render(_ content: NotificationContent, context: RenderContext, defaultClass: MessageClass,
                       defaultTitle: String? = nil) throws(ContentProblem) -> RenderedPayload {
        let block = content.override("hms")
        for key in block.keys.sorted() where !blockKeys.contains(key) {
            throw ContentProblem(field: "hms.\(key)", "unknown key; known: \(blockKeys.sorted().joined(separator: ", "))")
        }
        let messageClass = MessageClass.of(content, fallback: defaultClass)
        var android: [String: JSONValue] = [:]
        if let c = block["category"] {
            guard let s = c.stringValue, categories.contains(s) else {
                throw ContentProblem(field: "hms.category", "must be one of \(categories.sorted().joined(separator: ", "))")
            }
            android["category"] = .string(s)
        } else {
            android["category"] = .string(category(messageClass))
        }
        if let u = block["urgency"] {
            guard let s = u.stringValue, ["HIGH", "NORMAL"].contains(s) else { throw ContentProblem(field: "hms.urgency", "must be \"HIGH\" or \"NORMAL\"") }
            android["urgency"] = .string(s)
        } else if let p = content.priority {
            android["urgency"] = .string(p == .high ? "HIGH" : "NORMAL")
        }
        for key in ["bi_tag", "receipt_id"] where block[key] != nil {
            guard case .string = block[key]! else { throw ContentProblem(field: "hms.\(key)", "must be a string") }
            android[key] = block[key]!
        }

        var data: [String: JSONValue] = content.data
        if let existing = data["herald_id"], existing != .string(context.notificationID) {
            throw ContentProblem(field: "data.herald_id", "is Herald's: it carries the notification id")
        }
        data["herald_id"] = .string(context.notificationID)

        if !VendorVisibleText.isDataOnly(content) {
            var n: [String: JSONValue] = [:]
            if let text = VendorVisibleText.of(content, defaultTitle: defaultTitle) {
                n["title"] = .string(text.title)
                n["body"] = .string(text.body)
            }
            if let i = content.imageURL { n["image"] = .string(i) }
            if let k = content.collapseKey { n["notify_id"] = .number(Double(VendorText.notifyID(k))) }
            n["importance"] = .string(messageClass.isSystem ? "NORMAL" : "LOW")
            if let c = content.category, MessageClass(rawValue: c.lowercased()) == nil {
                n["click_action"] = ["type": 1, "action": .string(c)]
            } else {
                n["click_action"] = ["type": 3]
            }
            if let imp = block["importance"] {
                guard let s = imp.stringValue, ["LOW", "NORMAL"].contains(s) else { throw ContentProblem(field: "hms.importance", "must be \"LOW\" or \"NORMAL\"") }
                n["importance"] = .string(s)
            }
            if let ch = block["channel_id"] {
                guard case .string = ch else { throw ContentProblem(field: "hms.channel_id", "must be a string") }
                n["channel_id"] = ch
            }
            if let ca = block["click_action"] {
                guard case .object(let m) = ca, let t = m["type"]?.intValue, (1...4).contains(t) else {
                    throw ContentProblem(field: "hms.click_action", "must be an object with \"type\" 1 (intent or action), 2 (url), 3 (open the app) or 4 (rich resource)")
                }
                n["click_action"] = ca
            }
            if let extra = block["notification"] {
                guard case .object(let m) = extra else { throw ContentProblem(field: "hms.notification", "must be an object") }
                for key in m.keys.sorted() {
                    guard notificationKeys.contains(key) else {
                        throw ContentProblem(field: "hms.notification.\(key)", "unknown key of Huawei's android.notification")
                    }
                    n[key] = m[key]!
                }
            }
            guard n["title"] != nil, n["body"] != nil else {
                throw ContentProblem(field: "body", "Huawei's notification message needs a title or a body (or send content_available for a data message)")
            }
            android["notification"] = .object(n)
        } else if block["notification"] != nil {
            throw ContentProblem(field: "hms.notification", "a content-available notification is sent as a data message; drop hms.notification or content_available")
        }

        let message: JSONValue = ["android": .object(android), "data": .string(JSONValue.object(data).jsonString)]
        var w = JSONWriter(capacity: 512)
        w.write(message)
        let counted = w.bytes.count + (content.expiration != nil ? ttlRoom : 0)
        if counted > maxMessageBytes {
            throw ContentProblem(field: "payload", "the Huawei message is \(counted) bytes; Push Kit takes at most \(maxMessageBytes) (4 KB, without the tokens)")
        }
        let kind = android["category"] == "MARKETING" ? MessageKind.operational : MessageKind.system
        return RenderedPayload(body: w.bytes, headers: [MessageKind.header: kind], expiration: content.expiration)
    }
}
