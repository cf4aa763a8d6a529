/// The visible text as the API's earlier `alert` field spelled it: a plain string, or an
/// object of title, subtitle, body and localisation keys. A view of the neutral fields of
/// ``NotificationContent`` (see ``NotificationContent/alert``).
public enum AlertContent: Sendable, Equatable {
    case text(String)
    case fields(Alert)
}

/// The `alert` object's fields.
public struct Alert: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var titleLocKey: String?
    public var titleLocArgs: [String]?
    public var subtitleLocKey: String?
    public var subtitleLocArgs: [String]?
    public var locKey: String?
    public var locArgs: [String]?

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil,
                titleLocKey: String? = nil, titleLocArgs: [String]? = nil, subtitleLocKey: String? = nil,
                subtitleLocArgs: [String]? = nil, locKey: String? = nil, locArgs: [String]? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.subtitleLocKey = subtitleLocKey
        self.subtitleLocArgs = subtitleLocArgs
        self.locKey = locKey
        self.locArgs = locArgs
    }
}

extension NotificationContent {
    /// The visible fields in the earlier `alert` shape: `.text` when there is only a body,
    /// `.fields` otherwise, `nil` when there is nothing to show. Setting it sets the title,
    /// subtitle, body and localisation.
    public var alert: AlertContent? {
        get {
            let l = localization ?? Localization()
            if title == nil && subtitle == nil && l.isEmpty { return body.map { .text($0) } }
            return .fields(Alert(title: title, subtitle: subtitle, body: body, titleLocKey: l.titleKey, titleLocArgs: l.titleArgs,
                                 subtitleLocKey: l.subtitleKey, subtitleLocArgs: l.subtitleArgs, locKey: l.bodyKey, locArgs: l.bodyArgs))
        }
        set {
            switch newValue {
            case .text(let s)?:
                title = nil; subtitle = nil; body = s; localization = nil
            case .fields(let a)?:
                title = a.title; subtitle = a.subtitle; body = a.body
                let l = Localization(titleKey: a.titleLocKey, titleArgs: a.titleLocArgs, subtitleKey: a.subtitleLocKey,
                                     subtitleArgs: a.subtitleLocArgs, bodyKey: a.locKey, bodyArgs: a.locArgs)
                localization = l.isEmpty ? nil : l
            case nil:
                title = nil; subtitle = nil; body = nil; localization = nil
            }
        }
    }
}

extension NotificationContent {
    /// Content in the earlier `alert` spelling of the visible fields.
    public init(alert: AlertContent?, badge: Int? = nil, sound: Sound? = nil, data: [String: JSONValue] = [:]) {
        self.init(badge: badge, sound: sound, data: data)
        self.alert = alert
    }
}
