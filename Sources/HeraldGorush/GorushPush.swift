import FoundationEssentials
import Glibc
import HeraldCore

/// gorush's `platform` numbers and the core platforms they mean.
public enum GorushPlatform {
    /// `1` = iOS (APNs).
    public static let ios = 1
    /// `2` = Android (FCM).
    public static let android = 2
    /// `3` = Huawei (HMS), which Herald has no transport for.
    public static let huawei = 3
    /// The numbers Herald serves, with their platform.
    public static let all: [(Int, Platform)] = [(ios, .ios), (android, .android)]
}

/// A refusal in gorush's shape: `{"code": 400, "message": "…"}` with that HTTP status.
public struct GorushError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status, also the body's `code`.
    public var status: Int
    /// What was wrong, naming the field (`notifications[0].badge: …`); never a secret.
    public var message: String
    /// `Retry-After` seconds (503s).
    public var retryAfter: Int?

    public init(status: Int, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.message = message
        self.retryAfter = retryAfter
    }

    /// gorush's answer to a body without `notifications` (or one it cannot bind at all).
    public static let missingNotifications = GorushError(status: 400, "Missing notifications field.")
    /// gorush's answer to `"notifications": []`.
    public static let emptyNotifications = GorushError(status: 400, "Notifications field is empty.")

    public var description: String { "\(status) \(message)" }

    /// The answer body.
    public var json: [UInt8] {
        var w = JSONWriter(capacity: 64 + message.utf8.count)
        w.object { o in
            o.int("code", status)
            o.string("message", message)
        }
        return w.bytes
    }
}

/// A `POST /api/push` body read into the core's notification requests: one per element of
/// `notifications`, in order, each for the raw tokens of one platform.
public struct GorushPush: Sendable, Equatable {
    /// One element of `notifications`.
    public struct Item: Sendable, Equatable {
        /// Its index in `notifications`.
        public var index: Int
        /// gorush's number (1 or 2).
        public var platformNumber: Int
        /// Its tokens go through the app's first route of this platform (``NotificationRequest/platform``).
        public var request: NotificationRequest
        /// What gorush counts in `counts`: its tokens.
        public var targets: Int
        /// Its `notif_id`, as given.
        public var notifID: String? = nil
        /// How many of ``NotificationRequest/tokens`` came in `tokens` (the rest, one, in `to`);
        /// `nil`: all of them.
        public var listedTokens: Int? = nil

        /// The field of its `j`th token: `notifications[i].tokens[j]`, or `notifications[i].to`.
        public func tokenField(_ j: Int) -> String {
            j < (listedTokens ?? Int.max) ? "notifications[\(index)].tokens[\(j)]" : "notifications[\(index)].to"
        }

        /// gorush's name of its platform in `logs` and `/api/stat/app`.
        public var platformName: String { platformNumber == GorushPlatform.ios ? "ios" : "android" }
    }

    /// A token no route of the app takes, as gorush reports a push that failed: an entry of
    /// `logs`, `{"type":"failed-push","platform":"ios","token":…,"message":…,"error":…}`
    /// (`notif_id` first when the notification has one).
    public struct FailedToken: Sendable, Equatable {
        /// The notification's `notif_id`.
        public var notifID: String?
        /// `ios` or `android`.
        public var platform: String
        /// The token as given.
        public var token: String
        /// The notification's `message` (gorush's log entry carries it).
        public var message: String
        /// Why, naming the field: `notifications[0].tokens[1]: route apns: …`.
        public var error: String

        public init(notifID: String?, platform: String, token: String, message: String, error: String) {
            self.notifID = notifID
            self.platform = platform
            self.token = token
            self.message = message
            self.error = error
        }

        /// Writes the entry.
        func write(into o: inout ObjectWriter) {
            o.string("notif_id", notifID)
            o.string("type", "failed-push")
            o.string("platform", platform)
            o.string("token", token)
            o.string("message", message)
            o.string("error", error)
        }
    }

    /// The notifications, in the request's order.
    public var items: [Item]

    /// gorush's `counts`: the targets of every item.
    public var counts: Int { items.reduce(0) { $0 + $1.targets } }

    /// What the mapping needs to know about the app.
    public struct Target: Sendable {
        /// The Herald app id.
        public var app: String
        /// Its bundle id (`apps.<id>.topic`): an iOS `topic` must name it.
        public var topic: String
        /// Most notifications in a request.
        public var maxNotifications: Int
        /// For `time_to_live`: expirations are counted from it.
        public var now: Date

        public init(app: String, topic: String, maxNotifications: Int = 100, now: Date) {
            self.app = app
            self.topic = topic
            self.maxNotifications = maxNotifications
            self.now = now
        }
    }

    /// Reads a request body as gorush does (the same 400s for a missing, empty or oversized
    /// `notifications`), but strictly: a value of the wrong type or a key neither gorush nor
    /// Herald knows is a 400 naming its path (`notifications[0].badge`).
    /// - Throws: ``GorushError`` (400).
    public static func parse(_ body: [UInt8], for target: Target) throws(GorushError) -> GorushPush {
        guard !body.isEmpty else { throw .missingNotifications }
        let json: JSONValue
        do { json = try StrictJSON.parse(body) } catch {
            throw GorushError(status: 400, "Missing notifications field. (the body is not JSON: \(error.description))")
        }
        guard case .object(let root) = json, let list = root["notifications"], list != .null else { throw .missingNotifications }
        guard case .array(let elements) = list else {
            throw GorushError(status: 400, "notifications: expected an array of notifications, found \(list.typeDescription)")
        }
        if elements.isEmpty { throw .emptyNotifications }
        if elements.count > target.maxNotifications {
            throw GorushError(status: 400, "Number of notifications(\(elements.count)) over limit(\(target.maxNotifications))")
        }
        let context = JSONReadContext(unknownKeys: .reject)
        let rootNode = JSONNode(root: json, context: context)
        var items: [Item] = []
        for (index, node) in (rootNode.child("notifications")?.elements() ?? []).enumerated() {
            if let item = GorushNotificationReader(node: node, index: index, target: target).read() { items.append(item) }
        }
        // Two notifications of one request with one idempotency key: the second would be
        // answered as a repeat of the first and never sent.
        var seen: [String: Int] = [:]
        for item in items {
            guard let key = item.request.idempotencyKey else { continue }
            if let first = seen[key] {
                let field = key.hasPrefix("gorush:apns_id:") ? "apns_id" : "notif_id"
                context.error("notifications[\(item.index)].\(field)", "repeats notifications[\(first)]'s; each notification needs its own")
            } else {
                seen[key] = item.index
            }
        }
        context.reportUnknownKeys()
        if let first = context.errors.first {
            var message = first.description
            if context.errors.count > 1 {
                message += " (and \(context.errors.count - 1) more: " + context.errors.dropFirst().prefix(5).map(\.description).joined(separator: "; ") + ")"
            }
            throw GorushError(status: 400, message)
        }
        return GorushPush(items: items)
    }

    /// The success answer: `{"success":"ok","counts":N,"logs":[…]}`, with an entry in `logs` per
    /// token no route takes (``FailedToken``), as gorush lists the pushes that failed.
    public static func successJSON(counts: Int, failed: [FailedToken] = []) -> [UInt8] {
        var w = JSONWriter(capacity: 64 + failed.count * 256)
        w.object { o in
            o.string("success", "ok")
            o.int("counts", counts)
            o.array("logs") { a in
                for (i, entry) in failed.enumerated() {
                    if i > 0 { a.raw(UInt8(ascii: ",")) }
                    a.object { entry.write(into: &$0) }
                }
            }
        }
        return w.bytes
    }
}
