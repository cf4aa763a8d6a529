import FoundationEssentials
import Glibc

/// What a renderer may know about the notification it renders, beside its content.
public struct RenderContext: Sendable, Equatable {
    /// The Herald notification id (every payload carries it, so an app reached by two routes can show it once).
    public var notificationID: String
    public var app: String
    /// The app's `topic` (its bundle id or package name).
    public var topic: String

    public init(notificationID: String, app: String, topic: String) {
        self.notificationID = notificationID
        self.app = app
        self.topic = topic
    }
}

/// A notification's payload as one route's plugin rendered it: the same for every device of
/// the notification on that route.
public struct RenderedPayload: Sendable, Equatable {
    /// The request body.
    public var body: [UInt8]
    /// Request headers or other per-notification values the plugin reads back when sending
    /// (APNs: `apns-push-type`, `apns-priority`, …). Only the plugin knows the keys.
    public var headers: [String: String]
    /// When the notification stops being worth sending on this route, in seconds since 1970;
    /// 0 means now or never; `nil` never. The delivery engine ends a delivery past it as `expired`.
    public var expiration: Int64?

    public init(body: [UInt8], headers: [String: String] = [:], expiration: Int64? = nil) {
        self.body = body
        self.headers = headers
        self.expiration = expiration
    }

    /// Not rendered yet (a delivery as the queue returns it; the engine renders before sending).
    public static let unrendered = RenderedPayload(body: [])

    /// The expiration as a date (`nil` when none, or 0 = now-or-never).
    public var expirationDate: Date? {
        guard let e = expiration, e > 0 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(e))
    }
}

/// Why a route cannot carry a notification's content: the field at fault (with its JSON path in
/// the API body, such as `apns.priority`, or `payload` for the size) and why.
public struct ContentProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var message: String

    public init(field: String, _ message: String) {
        self.field = field
        self.message = message
    }

    public var description: String { "\(field): \(message)" }
}

extension ContentProblem {
    /// The refusal of a route that cannot reload widgets (``NotificationContent/widgets``).
    public static let widgetsNotCarried = ContentProblem(
        field: "widgets", "this route cannot reload widgets: a widget reload is an APNs push (an apns-http2 route)")
}
