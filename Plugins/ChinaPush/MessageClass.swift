import FoundationEssentials
import HeraldCore

/// What kind of message a notification is, as China's vendors sort them: "system" (or
/// "service") messages, which an app may send as many of as it needs when it declares them
/// (IM, account, orders), and "operational" (marketing) messages, which each vendor caps per
/// device per day.
///
/// A notification's class is, in order: its plugin's override block (`hms.category`,
/// `oppo.category`, `vivo.category`, `xiaomi.channel_id` pick the vendor's own value), else the
/// neutral `category` when it names a class here, else the route's `messageClass`.
public struct MessageClass: RawRepresentable, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    public var rawValue: String
    public init?(rawValue: String) {
        guard Self.allCases.contains(where: { $0.rawValue == rawValue }) else { return nil }
        self.rawValue = rawValue
    }
    private init(_ raw: String) { rawValue = raw }

    /// Instant messages and chats (system).
    public static let im = MessageClass("im")
    /// Voice and video calls (system).
    public static let voip = MessageClass("voip")
    /// Account and security: log-ins, password changes, balances (system).
    public static let account = MessageClass("account")
    /// Orders and deliveries (system).
    public static let order = MessageClass("order")
    /// Payments and finance (system).
    public static let finance = MessageClass("finance")
    /// Calendar, reminders and to-dos (system).
    public static let todo = MessageClass("todo")
    /// Travel: trips, flights, check-ins (system).
    public static let travel = MessageClass("travel")
    /// Health (system).
    public static let health = MessageClass("health")
    /// Work items (system).
    public static let work = MessageClass("work")
    /// The user's own devices (system).
    public static let device = MessageClass("device")
    /// Mail (system).
    public static let mail = MessageClass("mail")
    /// Subscriptions the user asked for (system).
    public static let subscription = MessageClass("subscription")
    /// News (operational).
    public static let news = MessageClass("news")
    /// Recommended content (operational).
    public static let content = MessageClass("content")
    /// Social updates (operational).
    public static let social = MessageClass("social")
    /// Promotions and campaigns (operational).
    public static let marketing = MessageClass("marketing")

    public static let allCases: [MessageClass] = [.im, .voip, .account, .order, .finance, .todo, .travel, .health, .work, .device,
                                                  .mail, .subscription, .news, .content, .social, .marketing]

    /// Whether vendors count it as a system (service) message, not an operational one.
    public var isSystem: Bool { ![MessageClass.news, .content, .social, .marketing].contains(self) }

    public var description: String { rawValue }

    /// The class of a notification: the neutral `category` when it names a class, else `fallback`.
    public static func of(_ content: NotificationContent, fallback: MessageClass) -> MessageClass {
        content.category.flatMap { MessageClass(rawValue: $0.lowercased()) } ?? fallback
    }

    /// The names, for messages.
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// Which daily quota a rendered payload counts against: vendors cap operational messages, and
/// system messages apart. Renderers mark the payload (``header``); a daily quota answer holds
/// only the messages of its kind.
public enum MessageKind {
    /// The ``RenderedPayload/headers`` key.
    public static let header = "china-message-kind"
    public static let system = "system"
    public static let operational = "operational"

    /// The header for a class.
    public static func of(_ c: MessageClass) -> String { c.isSystem ? system : operational }

    /// The kind a payload was rendered as (`operational` when unmarked).
    public static func of(_ payload: RenderedPayload) -> String { payload.headers[header] ?? operational }
}
