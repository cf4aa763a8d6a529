import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// Renders a notification as OPPO's `notification` object, once per notification.
///
/// From the neutral content: `title` (at most 50 characters), `content` (the body, at most 200),
/// `sub_title` (the subtitle, at most 10), `click_action_type` 0 (open the app), `action_parameters`
/// (the data as a JSON string with `herald_id`, at most 4 KB), `notify_id` from the collapse key,
/// `channel_id`, and `category` and `notify_level` from the message class. The `oppo` override
/// block sets OPPO's own fields (``blockKeys``). The transport adds `off_line_ttl` (the seconds
/// left before the expiration, at most 10 days) when it sends.
enum OPPORenderer {
    static let maxTitle = 50
    static let maxContent = 200
    static let maxSubtitle = 10
    static let blockKeys: Set<String> = ["category", "notify_level", "channel_id", "click_action_type", "click_action_activity",
                                         "click_action_url", "style", "big_picture_id", "small_picture_id", "show_ttl", "off_line"]
    static let categories: Set<String> = ["IM", "ACCOUNT", "DEVICE_REMINDER", "ORDER", "TODO", "SUBSCRIPTION", "NEWS", "CONTENT",
                                          "MARKETING", "SOCIAL"]

    /// OPPO's `category` for a class.
    static func category(_ c: MessageClass) -> String {
        switch c {
        case .im, .voip: return "IM"
        case .account, .finance: return "ACCOUNT"
        case .device: return "DEVICE_REMINDER"
        case .order, .travel: return "ORDER"
        case .todo, .work, .health, .mail: return "TODO"
        case .subscription: return "SUBSCRIPTION"
        case .news: return "NEWS"
        case .content: return "CONTENT"
        case .social: return "SOCIAL"
        default: return "MARKETING"
        }
    }

    /// OPPO's `notify_level`: 16 (banner, sound and vibration) for IM, 2 (shade and lock screen) for other system messages, 1 (shade) for operational ones.
    static func level(_ c: MessageClass) -> Int { c == .im || c == .voip ? 16 : c.isSystem ? 2 : 1 }

    static func render(_ content: NotificationContent, context: RenderContext, configuration: OPPOConfiguration) throws(ContentProblem) -> RenderedPayload {
        let block = content.override("oppo")
        for key in block.keys.sorted() where !blockKeys.contains(key) {
            throw ContentProblem(field: "oppo.\(key)", "unknown key; known: \(blockKeys.sorted().joined(separator: ", "))")
        }
        if content.contentAvailable {
            throw ContentProblem(field: "content_available", "OPPO's server API sends notifications only: give a title and a body")
        }
        guard let (title, body) = VendorVisibleText.of(content, defaultTitle: configuration.defaultTitle) else {
            throw ContentProblem(field: "body", "OPPO's notification needs a title or a body")
        }
        try VendorText.check(title, field: "title", limit: maxTitle, vendor: "OPPO")
        try VendorText.check(body, field: "body", limit: maxContent, vendor: "OPPO")
        try VendorText.check(content.subtitle, field: "subtitle", limit: maxSubtitle, vendor: "OPPO")
        var n: [String: JSONValue] = ["title": .string(title), "content": .string(body), "click_action_type": 0]
        if let s = content.subtitle { n["sub_title"] = .string(s) }
        var data = content.data
        if let existing = data["herald_id"], existing != .string(context.notificationID) {
            throw ContentProblem(field: "data.herald_id", "is Herald's: it carries the notification id")
        }
        data["herald_id"] = .string(context.notificationID)
        let parameters = JSONValue.object(data).jsonString
        if parameters.utf8.count > 4000 {
            throw ContentProblem(field: "data", "OPPO's action_parameters take at most 4000 bytes, found \(parameters.utf8.count)")
        }
        n["action_parameters"] = .string(parameters)
        if let k = content.collapseKey { n["notify_id"] = .number(Double(VendorText.notifyID(k))) }
        if let ch = configuration.channelID { n["channel_id"] = .string(ch) }
        let messageClass = MessageClass.of(content, fallback: configuration.messageClass)
        n["category"] = .string(category(messageClass))
        n["notify_level"] = .number(Double(level(messageClass)))
        for key in block.keys.sorted() {
            let v = block[key]!
            switch key {
            case "category":
                guard let s = v.stringValue, categories.contains(s) else {
                    throw ContentProblem(field: "oppo.category", "must be one of \(categories.sorted().joined(separator: ", "))")
                }
            case "notify_level":
                guard let i = v.intValue, [1, 2, 16].contains(i) else { throw ContentProblem(field: "oppo.notify_level", "must be 1, 2 or 16") }
            case "click_action_type", "style", "show_ttl":
                guard v.intValue != nil else { throw ContentProblem(field: "oppo.\(key)", "must be a whole number") }
            case "off_line":
                guard v.boolValue != nil else { throw ContentProblem(field: "oppo.off_line", "must be true or false") }
            default:
                guard v.stringValue != nil else { throw ContentProblem(field: "oppo.\(key)", "must be a string") }
            }
            n[key] = v
        }
        var w = JSONWriter(capacity: 256)
        w.write(.object(n))
        let operational: Set<String> = ["NEWS", "CONTENT", "MARKETING", "SOCIAL"]
        let kind = operational.contains(n["category"]?.stringValue ?? "") ? MessageKind.operational : MessageKind.system
        return RenderedPayload(body: w.bytes, headers: [MessageKind.header: kind], expiration: content.expiration)
    }
}
