import FoundationEssentials
import Glibc

/// What an event reports: a delivery's end, a parked delivery, a device retired or removed, a
/// transport paused or resumed (issue 38). The raw value is the event's `type`.
public enum EventType: String, Sendable, CaseIterable, Equatable {
    case deliveryDelivered = "delivery.delivered"
    case deliveryFailed = "delivery.failed"
    case deliveryRejected = "delivery.rejected"
    case deliveryExpired = "delivery.expired"
    case deliveryInvalidToken = "delivery.invalid_token"
    case deliveryParked = "delivery.parked"
    case deviceRetired = "device.retired"
    case deviceRemoved = "device.removed"
    case transportPaused = "transport.paused"
    case transportResumed = "transport.resumed"
    /// Sent only by `herald webhooks test`, never stored.
    case ping = "ping"

    /// The event for a delivery that reached `state` (a final state, or `.parked`); `nil` for `queued` and `sent`.
    public init?(delivery state: DeliveryState) {
        switch state {
        case .delivered: self = .deliveryDelivered
        case .failed: self = .deliveryFailed
        case .rejected: self = .deliveryRejected
        case .expired: self = .deliveryExpired
        case .invalidToken: self = .deliveryInvalidToken
        case .parked: self = .deliveryParked
        case .queued, .sent: return nil
        }
    }

    /// Whether `selector` (a type such as `"device.retired"` or a prefix such as `"delivery"`)
    /// selects this type.
    public func matches(_ selector: String) -> Bool {
        rawValue == selector || rawValue.hasPrefix(selector + ".")
    }

    /// Whether `selector` names a type or a prefix of one (`ping` is not selectable).
    public static func isSelector(_ selector: String) -> Bool {
        allCases.contains { $0 != .ping && $0.matches(selector) }
    }
}

/// One event as stored in the outbox and sent: `{"id", "type", "created_at", "app", "data"}`.
public struct EventRecord: Sendable, Equatable {
    /// The outbox's order (the feed's cursor); 0 for an event not yet stored.
    public var sequence: Int64
    /// Unique and stable across retries (a lower-case UUID): receivers deduplicate on it.
    public var id: String
    public var type: String
    public var createdAt: Date
    /// The app, or `""` for an event of no app (a transport's).
    public var app: String
    /// The `data` object, as JSON text.
    public var data: String

    public init(sequence: Int64 = 0, id: String = UUIDSource.random().lowercasedString, type: String, createdAt: Date, app: String, data: String) {
        self.sequence = sequence
        self.id = id
        self.type = type
        self.createdAt = createdAt
        self.app = app
        self.data = data
    }

    /// The event as it goes out: `created_at` in RFC 3339 UTC with milliseconds.
    public func write(into w: inout JSONWriter) {
        w.object { o in
            o.string("id", id)
            o.string("type", type)
            o.string("created_at", Self.timestamp(createdAt))
            o.string("app", app)
            o.rawJSON("data", Array(data.utf8))
        }
    }

    /// `{"events": [...]}`: a webhook's body and the feed's list.
    public static func body(_ events: [EventRecord], next: String? = nil) -> [UInt8] {
        var w = JSONWriter(capacity: 64 + events.count * 400)
        w.object { o in
            o.array("events") { a in
                for (i, e) in events.enumerated() {
                    if i > 0 { a.raw(UInt8(ascii: ",")) }
                    e.write(into: &a)
                }
            }
            if let next { o.string("next", next) }
        }
        return w.bytes
    }

    /// `2026-12-06T16:40:00.123Z`.
    public static func timestamp(_ date: Date) -> String {
        let ms = date.millisecondsSince1970
        var seconds = time_t(ms / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ v: Int32, _ n: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(ms % 1000), 3))Z"
    }
}

/// What a delivery event's `data` holds, read by a storage driver in the transaction that
/// records the state it reports.
public struct DeliveryEventFacts: Sendable, Equatable {
    public var notification: String
    /// The delivery's id (``Delivery/messageID``), lower-case.
    public var delivery: String
    public var user: String?
    /// The device's full token (receivers are trusted: the URL is the operator's).
    public var device: String
    /// The transport (route) that carried it, or last tried to.
    public var route: String?
    public var attempts: Int
    public var reason: String?
    public var receipt: String?
    public var idempotencyKey: String?

    public init(notification: String, delivery: String, user: String?, device: String, route: String?, attempts: Int,
                reason: String?, receipt: String?, idempotencyKey: String?) {
        self.notification = notification
        self.delivery = delivery
        self.user = user
        self.device = device
        self.route = route
        self.attempts = attempts
        self.reason = reason
        self.receipt = receipt
        self.idempotencyKey = idempotencyKey
    }

    /// The `data` object; absent optional fields are left out. `platform` is the route's platform
    /// name when the caller knows it.
    public func json(platform: String? = nil) -> String {
        var w = JSONWriter(capacity: 320)
        w.object { o in
            o.string("notification", notification)
            o.string("delivery", delivery)
            o.string("user", user)
            o.string("device", device)
            o.string("route", route)
            o.string("platform", platform)
            o.int("attempts", attempts)
            o.string("reason", reason)
            o.string("receipt", receipt)
            o.string("idempotency_key", idempotencyKey)
        }
        return w.string
    }
}

extension EventRecord {
    /// A `device.retired` event: `retired_at` is the platform's time of invalidation.
    public static func deviceRetired(app: String, token: String, at time: Date, reason: String, now: Date) -> EventRecord {
        var w = JSONWriter(capacity: 200)
        w.object { o in
            o.string("device", token)
            o.string("reason", reason)
            o.string("retired_at", timestamp(time))
        }
        return EventRecord(type: EventType.deviceRetired.rawValue, createdAt: now, app: app, data: w.string)
    }

    /// A `device.removed` event (through the API, or a per-user cap).
    public static func deviceRemoved(app: String, token: String, user: String?, reason: String, now: Date) -> EventRecord {
        var w = JSONWriter(capacity: 200)
        w.object { o in
            o.string("device", token)
            o.string("user", user)
            o.string("reason", reason)
        }
        return EventRecord(type: EventType.deviceRemoved.rawValue, createdAt: now, app: app, data: w.string)
    }

    /// A `transport.paused` or `transport.resumed` event.
    public static func transport(_ name: String, paused: Bool, reason: String, now: Date) -> EventRecord {
        var w = JSONWriter(capacity: 160)
        w.object { o in
            o.string("transport", name)
            o.string("reason", reason)
        }
        return EventRecord(type: (paused ? EventType.transportPaused : .transportResumed).rawValue, createdAt: now, app: "", data: w.string)
    }
}
