import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// Renders a notification as vivo's message fields (without `regId`, `requestId` and
/// `timeToLive`, which the transport adds when it sends), once per notification.
///
/// From the neutral content: `title` (at most 40, a Chinese character counting 2), `content` (the
/// body, at most 100 the same way), `notifyType` 4 (ring and vibrate), `skipType` 1 (open the app),
/// `networkType` -1, `classification` (1 system, 0 operational) and `category` from the message
/// class, `clientCustomMap` (the data as strings with `herald_id`). The `vivo` override block sets
/// vivo's own fields (``blockKeys``).
enum VivoRenderer {
    static let maxTitle = 40
    static let maxContent = 100
    static let blockKeys: Set<String> = ["classification", "category", "notifyType", "skipType", "skipContent", "extra"]
    static let categories: Set<String> = ["IM", "ACCOUNT", "TODO", "DEVICE_REMINDER", "ORDER", "SUBSCRIPTION", "NEWS", "CONTENT",
                                          "MARKETING", "SOCIAL"]

    /// vivo's `category` for a class.
    static func category(_ c: MessageClass) -> String {
        switch c {
        case .im, .voip: return "IM"
        case .account, .finance: return "ACCOUNT"
        case .todo, .work, .health, .mail: return "TODO"
        case .device: return "DEVICE_REMINDER"
        case .order, .travel: return "ORDER"
        case .subscription: return "SUBSCRIPTION"
        case .news: return "NEWS"
        case .content: return "CONTENT"
        case .social: return "SOCIAL"
        default: return "MARKETING"
        }
    }

    static func render(_ content: NotificationContent, context: RenderContext, configuration: VivoConfiguration) throws(ContentProblem) -> RenderedPayload {
        let block = content.override("vivo")
        for key in block.keys.sorted() where !blockKeys.contains(key) {
            throw ContentProblem(field: "vivo.\(key)", "unknown key; known: \(blockKeys.sorted().joined(separator: ", "))")
        }
        if content.contentAvailable {
            throw ContentProblem(field: "content_available", "vivo's server API sends notifications only: give a title and a body")
        }
        guard let (title, body) = VendorVisibleText.of(content, defaultTitle: configuration.defaultTitle) else {
            throw ContentProblem(field: "body", "vivo's notification needs a title or a body")
        }
        try VendorText.check(title, field: "title", limit: maxTitle, vendor: "vivo", weighted: true)
        try VendorText.check(body, field: "body", limit: maxContent, vendor: "vivo", weighted: true)
        let messageClass = MessageClass.of(content, fallback: configuration.messageClass)
        var m: [String: JSONValue] = ["title": .string(title), "content": .string(body), "notifyType": 4, "skipType": 1, "networkType": -1,
                                      "classification": .number(messageClass.isSystem ? 1 : 0), "category": .string(category(messageClass)),
                                      "pushMode": .number(configuration.testMode ? 1 : 0)]
        var custom: [String: JSONValue] = [:]
        for (k, v) in content.data { custom[k] = .string(v.stringValue ?? v.jsonString) }
        if let existing = custom["herald_id"], existing != .string(context.notificationID) {
            throw ContentProblem(field: "data.herald_id", "is Herald's: it carries the notification id")
        }
        custom["herald_id"] = .string(context.notificationID)
        m["clientCustomMap"] = .object(custom)
        for key in block.keys.sorted() {
            let v = block[key]!
            switch key {
            case "classification":
                guard let i = v.intValue, i == 0 || i == 1 else { throw ContentProblem(field: "vivo.classification", "must be 0 (operational) or 1 (system)") }
            case "category":
                guard let s = v.stringValue, categories.contains(s) else {
                    throw ContentProblem(field: "vivo.category", "must be one of \(categories.sorted().joined(separator: ", "))")
                }
            case "notifyType":
                guard let i = v.intValue, (1...4).contains(i) else { throw ContentProblem(field: "vivo.notifyType", "must be 1 (none), 2 (ring), 3 (vibrate) or 4 (both)") }
            case "skipType":
                guard let i = v.intValue, (1...4).contains(i) else { throw ContentProblem(field: "vivo.skipType", "must be 1 (open the app), 2 (a URL), 3 (custom) or 4 (a page of the app)") }
            case "extra":
                guard case .object = v else { throw ContentProblem(field: "vivo.extra", "must be an object") }
            default:
                guard v.stringValue != nil else { throw ContentProblem(field: "vivo.\(key)", "must be a string") }
            }
            m[key] = v
        }
        if let skip = m["skipType"]?.intValue, skip != 1, m["skipContent"] == nil {
            throw ContentProblem(field: "vivo.skipContent", "skipType \(skip) needs skipContent (the URL, intent or page)")
        }
        var w = JSONWriter(capacity: 256)
        w.write(.object(m))
        let kind = m["classification"]?.intValue == 1 ? MessageKind.system : MessageKind.operational
        return RenderedPayload(body: w.bytes, headers: [MessageKind.header: kind], expiration: content.expiration)
    }
}
