import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// Turns a Matrix notification for one pusher into the APNs notification Sygnal would send, so
/// iOS apps and their notification service extensions written against Sygnal work unchanged.
///
/// A pure function of the notification, the pusher and the configured default payload:
/// - **event_id_only** (the pusher's `data.format` is `"event_id_only"`, or the homeserver sent
///   an `event_id` without a `type`, which is how Synapse sends for such pushers): the default
///   payload plus `room_id`, `event_id`, `unread_count` and `missed_calls` at the top level;
///   nothing else, so the app's extension fetches the event itself.
/// - **full** (an event with a `type`): the default payload, then `aps.alert` with `loc-key` and
///   `loc-args` per event type (``locKey(for:)``), `aps.badge` = unread + missed calls,
///   `aps.sound` from the pusher's `sound` tweak, `room_id` and `event_id` at the top level.
///   The sender's and the room's names are cut to 1024 characters.
/// - **badge only** (no event): `{"aps": {"badge": N}}`, without the default payload.
///
/// `prio: "low"` sends with `apns-priority` 5. A payload over Apple's limit (4096 bytes, 5120 for
/// VoIP) loses characters from the end of its longest `alert` text (`alert`, `alert.body`, a
/// `loc-args` entry) one at a time, as Sygnal's `apnstruncate` does.
public enum MatrixPayload {
    /// The longest sender or room name put in `loc-args`, in Unicode scalars (Sygnal's `MAX_FIELD_LENGTH`).
    public static let maxFieldLength = 1024

    /// Which payload a notification got.
    public enum Mode: String, Sendable, Equatable {
        case eventIDOnly = "event_id_only"
        case full
        case badgeOnly = "badge_only"
    }

    /// What to do for one pusher.
    public enum Decision: Sendable, Equatable {
        /// Send this content. `dropped` lists default-payload keys Herald cannot express (ignored).
        case send(NotificationContent, mode: Mode, dropped: [String])
        /// Nothing to tell the device (an event type with no alert and no counts); not an error.
        case nothing
        /// The pusher can never be served as configured (its `default_payload` is not an object,
        /// as Sygnal decides): reject the pushkey.
        case reject(reason: String)
        /// The payload cannot be brought under Apple's limit by shortening alert texts.
        case tooLarge(bytes: Int)
    }

    /// The APNs notification for `notification` sent to `device`.
    /// - Parameter defaultPayload: the configured `defaultPayload` of the pusher's Matrix app;
    ///   the pusher's own `data.default_payload` overrides it key by key (and inside `aps`, key by key).
    public static func map(_ notification: MatrixNotification, device: MatrixDevice,
                           defaultPayload: [String: JSONValue] = [:]) -> Decision {
        var pusherDefault: [String: JSONValue] = [:]
        if let d = device.data?["default_payload"], d != .null {
            guard case .object(let o) = d else {
                return .reject(reason: "the pusher's data.default_payload is \(d.typeDescription), not an object")
            }
            pusherDefault = o
        }
        let merged = merge(defaultPayload, pusherDefault)
        let eventID = notification.eventID.flatMap { $0.isEmpty ? nil : $0 }
        let roomID = notification.roomID.flatMap { $0.isEmpty ? nil : $0 }
        let eventIDOnly = eventID != nil && (notification.type == nil || device.data?["format"]?.stringValue == "event_id_only")

        var base = APSConversion.convert(merged)
        var content: NotificationContent
        let mode: Mode
        if eventIDOnly {
            mode = .eventIDOnly
            content = base.content
            if let roomID { content.data["room_id"] = .string(roomID) }
            if let eventID { content.data["event_id"] = .string(eventID) }
            if let unread = notification.unread { content.data["unread_count"] = .number(Double(unread)) }
            if let missed = notification.missedCalls { content.data["missed_calls"] = .number(Double(missed)) }
        } else {
            let alert = notification.type.flatMap { _ in locKey(for: notification) }
            var badge: Int? = notification.unread
            if let missed = notification.missedCalls { badge = (badge ?? 0) + missed }
            if alert == nil && badge == nil { return .nothing }
            if notification.type == nil {
                mode = .badgeOnly
                base = APSConversion.Result(content: NotificationContent(), dropped: [])
            } else {
                mode = .full
            }
            content = base.content
            if let (key, args) = alert {
                var fields: Alert
                if case .fields(let a)? = content.alert { fields = a } else { fields = Alert() }
                fields.locKey = key
                fields.locArgs = args
                content.alert = .fields(fields)
                if let roomID { content.data["room_id"] = .string(roomID) }
                if let eventID { content.data["event_id"] = .string(eventID) }
                if case .string(let sound)? = device.tweaks["sound"], !sound.isEmpty { content.sound = .named(sound) }
            }
            if let badge { content.badge = min(badge, Int(Int32.max)) }
        }
        if notification.priority == .low { content.apns.priority = 5 }
        // Sygnal sends ids without an alert as an alert push (apps add `mutable-content` or an
        // alert in their default payload); Herald's own rule would make it a background push.
        if content.alert == nil, content.badge == nil, content.sound == nil, content.apns.pushType == nil, !content.apns.contentAvailable {
            content.apns.pushType = .alert
        }
        let limit = content.pushType.maxPayloadBytes
        guard let fitted = fit(content, limit: limit) else {
            return .tooLarge(bytes: encodedSize(content))
        }
        return .send(fitted, mode: mode, dropped: base.dropped)
    }

    /// `loc-key` and `loc-args` for an event, as Sygnal chooses them; `nil` for an event that
    /// alerts nobody (a member event that is not an invitation of the recipient).
    public static func locKey(for n: MatrixNotification) -> (String, [String])? {
        let from: String
        if (n.sender ?? "").isEmpty && (n.senderDisplayName ?? "").isEmpty { from = " " } else { from = cut(n.senderDisplayName ?? n.sender!) }
        switch n.type {
        case "m.room.message", "m.room.encrypted":
            let room = (n.roomName?.isEmpty == false ? n.roomName : nil) ?? (n.roomAlias?.isEmpty == false ? n.roomAlias : nil)
            var text: String? = nil, action: String? = nil, image = false
            if let c = n.content, case .string(let msgtype)? = c["msgtype"], let body = c["body"] {
                let bodyText = body.stringValue ?? body.jsonString
                switch msgtype {
                case "m.emote": action = bodyText
                default: text = bodyText
                }
                image = msgtype == "m.image"
            }
            if let room = room.map(cut) {
                if image { return ("IMAGE_FROM_USER_IN_ROOM", [from, text ?? "", room]) }
                if let text { return ("MSG_FROM_USER_IN_ROOM_WITH_CONTENT", [from, room, text]) }
                if let action { return ("ACTION_FROM_USER_IN_ROOM", [room, from, action]) }
                return ("MSG_FROM_USER_IN_ROOM", [from, room])
            }
            if image { return ("IMAGE_FROM_USER", [from, text ?? ""]) }
            if let text { return ("MSG_FROM_USER_WITH_CONTENT", [from, text]) }
            if let action { return ("ACTION_FROM_USER", [from, action]) }
            return ("MSG_FROM_USER", [from])
        case "m.call.invite":
            var video = false
            if case .string(let sdp)? = n.content?["offer"]?["sdp"], sdp.contains("m=video") { video = true }
            return (video ? "VIDEO_CALL_FROM_USER" : "VOICE_CALL_FROM_USER", [from])
        case "m.room.member":
            guard n.userIsTarget == true, n.membership == "invite" else { return nil }
            if let name = n.roomName, !name.isEmpty { return ("USER_INVITE_TO_NAMED_ROOM", [from, cut(name)]) }
            if let alias = n.roomAlias, !alias.isEmpty { return ("USER_INVITE_TO_NAMED_ROOM", [from, cut(alias)]) }
            return ("USER_INVITE_TO_CHAT", [from])
        case nil:
            return nil
        default:
            return ("MSG_FROM_USER", [from])
        }
    }

    /// The first ``maxFieldLength`` Unicode scalars (Python slices by code point).
    static func cut(_ s: String) -> String {
        s.unicodeScalars.count <= maxFieldLength ? s : String(String.UnicodeScalarView(s.unicodeScalars.prefix(maxFieldLength)))
    }

    /// Merges two payloads key by key; `aps` merges key by key too.
    static func merge(_ base: [String: JSONValue], _ over: [String: JSONValue]) -> [String: JSONValue] {
        var result = base
        for (k, v) in over {
            if k == "aps", case .object(let a)? = base["aps"], case .object(let b) = v {
                result[k] = .object(a.merging(b) { _, new in new })
            } else {
                result[k] = v
            }
        }
        return result
    }

    // MARK: Truncation

    /// `content` with alert texts shortened until its payload fits in `limit` bytes; `nil` when
    /// nothing is left to shorten. Removes one Unicode scalar at a time from the end of the
    /// longest text (by UTF-8 bytes; the first of equals), as Sygnal does.
    ///
    /// The size counts the `herald_id` key that the APNs route adds to every payload (the
    /// notification id is made at accept, after this: ``sizingID`` has its length).
    public static func fit(_ content: NotificationContent, limit: Int) -> NotificationContent? {
        var size = encodedSize(content)
        if size <= limit { return content }
        var c = content
        var texts: [[Unicode.Scalar]]
        var fields = Alert()
        switch c.alert {
        case .text(let s)?: texts = [Array(s.unicodeScalars)]
        case .fields(let a)?:
            fields = a
            texts = (a.body.map { [Array($0.unicodeScalars)] } ?? []) + (a.locArgs ?? []).map { Array($0.unicodeScalars) }
        case nil: return nil
        }
        var lengths = texts.map { $0.reduce(0) { $0 + $1.utf8.count } }
        func rebuild() {
            let strings = texts.map { String(String.UnicodeScalarView($0)) }
            switch c.alert {
            case .text?: c.alert = .text(strings[0])
            case .fields?:
                var a = fields
                var rest = strings[...]
                if a.body != nil { a.body = rest.removeFirst() }
                if a.locArgs != nil { a.locArgs = Array(rest) }
                c.alert = .fields(a)
            case nil: break
            }
        }
        while true {
            while size > limit {
                guard let longest = lengths.indices.max(by: { lengths[$0] < lengths[$1] || (lengths[$0] == lengths[$1] && $0 > $1) }),
                      lengths[longest] > 0 else { return nil }
                let scalar = texts[longest].removeLast()
                lengths[longest] -= scalar.utf8.count
                size -= escapedSize(scalar)
            }
            rebuild()
            size = encodedSize(c)
            if size <= limit { return c }
        }
    }

    /// An id of the form the accept gives a notification (a lowercased UUID): the payload's
    /// `herald_id` is this long.
    public static var sizingID: String { UUIDSource.timeOrdered().lowercasedString }

    /// The bytes of `content`'s APNs payload as the route renders it, `herald_id` included.
    public static func encodedSize(_ content: NotificationContent) -> Int {
        APNsPayload.encode(content, notificationID: sizingID).count
    }

    /// Bytes a scalar takes inside a JSON string as ``JSONWriter`` writes it.
    static func escapedSize(_ s: Unicode.Scalar) -> Int {
        switch s.value {
        case 0x22, 0x5C, 0x0A, 0x0D, 0x09, 0x08, 0x0C: return 2
        case 0..<0x20: return 6
        default: return s.utf8.count
        }
    }
}

/// Reads a Sygnal-style default payload (`{"aps": {…}, "custom": …}`) into notification content.
public enum APSConversion {
    /// The content, and the keys (as paths) that Herald cannot express.
    public struct Result: Sendable, Equatable {
        public var content: NotificationContent
        public var dropped: [String]
    }

    /// `aps` keys Herald sends; any other is dropped (and a configured one is an error).
    public static let knownAPSKeys: Set<String> = ["alert", "badge", "sound", "thread-id", "category", "content-available",
                                                   "mutable-content", "target-content-id", "interruption-level",
                                                   "relevance-score", "filter-criteria"]
    /// `aps.alert` keys Herald sends.
    public static let knownAlertKeys: Set<String> = ["title", "subtitle", "body", "launch-image", "title-loc-key", "title-loc-args",
                                                     "subtitle-loc-key", "subtitle-loc-args", "loc-key", "loc-args"]

    /// Converts a payload; values of the wrong type are dropped with their path, never guessed.
    public static func convert(_ payload: [String: JSONValue]) -> Result {
        var content = NotificationContent()
        var dropped: [String] = []
        for (key, value) in payload where key != "aps" && value != .null {
            // Herald's own key in every APNs payload (the notification id): not the pusher's to set.
            if key == APNsPayload.notificationIDKey { dropped.append(key); continue }
            content.data[key] = value
        }
        guard let apsValue = payload["aps"], apsValue != .null else { return Result(content: content, dropped: dropped) }
        guard case .object(let aps) = apsValue else { return Result(content: content, dropped: dropped + ["aps"]) }
        func text(_ key: String, _ v: JSONValue) -> String? {
            if case .string(let s) = v, !s.isEmpty { return s }
            dropped.append(key)
            return nil
        }
        func texts(_ key: String, _ v: JSONValue) -> [String]? {
            if case .array(let items) = v {
                let strings = items.compactMap(\.stringValue)
                if strings.count == items.count { return strings }
            }
            dropped.append(key)
            return nil
        }
        func flag(_ key: String, _ v: JSONValue) -> Bool {
            switch v {
            case .number(let n) where n == 1 || n == 0: return n == 1
            case .bool(let b): return b
            default: dropped.append(key); return false
            }
        }
        for key in aps.keys.sorted() {
            let v = aps[key]!
            let path = "aps.\(key)"
            if v == .null { continue }
            switch key {
            case "alert":
                switch v {
                case .string(let s): content.alert = .text(s)
                case .object(let o):
                    var a = Alert()
                    var launchImage: String? = nil
                    for k in o.keys.sorted() {
                        let value = o[k]!, p = "\(path).\(k)"
                        if value == .null { continue }
                        switch k {
                        case "title": if case .string(let s) = value { a.title = s } else { dropped.append(p) }
                        case "subtitle": if case .string(let s) = value { a.subtitle = s } else { dropped.append(p) }
                        case "body": if case .string(let s) = value { a.body = s } else { dropped.append(p) }
                        case "launch-image": launchImage = text(p, value)
                        case "title-loc-key": a.titleLocKey = text(p, value)
                        case "title-loc-args": a.titleLocArgs = texts(p, value)
                        case "subtitle-loc-key": a.subtitleLocKey = text(p, value)
                        case "subtitle-loc-args": a.subtitleLocArgs = texts(p, value)
                        case "loc-key": a.locKey = text(p, value)
                        case "loc-args": a.locArgs = texts(p, value)
                        default: dropped.append(p)
                        }
                    }
                    content.alert = .fields(a)
                    if let launchImage { content.apns.launchImage = launchImage }
                default: dropped.append(path)
                }
            case "badge":
                if let b = v.intValue, (0...Int(Int32.max)).contains(b) { content.badge = b } else { dropped.append(path) }
            case "sound":
                switch v {
                case .string(let s) where !s.isEmpty: content.sound = .named(s)
                case .object(let o) where o["critical"] != nil:
                    let name = o["name"]?.stringValue ?? "default"
                    let volume = o["volume"]?.doubleValue
                    if flag(path + ".critical", o["critical"]!), volume.map({ (0...1).contains($0) }) ?? true, !name.isEmpty {
                        content.sound = .critical(name: name, volume: volume)
                    } else {
                        dropped.append(path)
                    }
                default: dropped.append(path)
                }
            case "thread-id": content.apns.threadID = text(path, v)
            case "category": content.apns.category = text(path, v)
            case "content-available": content.apns.contentAvailable = flag(path, v)
            case "mutable-content": content.apns.mutableContent = flag(path, v)
            case "target-content-id": content.apns.targetContentID = text(path, v)
            case "filter-criteria": content.apns.filterCriteria = text(path, v)
            case "interruption-level":
                if let s = v.stringValue, let level = InterruptionLevel(rawValue: s) { content.apns.interruptionLevel = level } else { dropped.append(path) }
            case "relevance-score":
                if let d = v.doubleValue, (0...1).contains(d) { content.apns.relevanceScore = d } else { dropped.append(path) }
            default:
                dropped.append(path)
            }
        }
        return Result(content: content, dropped: dropped)
    }
}
