import FoundationEssentials
import HeraldCore

/// Turns a Matrix notification for one pusher into the FCM v1 message Sygnal's gcm pushkin sends
/// (`api_version: v1`), so Android apps written against Sygnal (Element Android) work unchanged.
///
/// A data-only message (the `fcm` override block's `data` and `android.priority`; no
/// `notification`), built as Sygnal's `_build_data` builds it:
/// - the pusher's `data.default_payload` (over the configured `defaultPayload`), then
/// - `event_id`, `type`, `sender`, `room_name`, `room_alias`, `membership`,
///   `sender_display_name`, `room_id` (those the homeserver sent), each cut to 1024 bytes with
///   "…" (``MatrixText/truncate(_:maxBytes:)``);
/// - `content_<key>` for each **string** member of the event's `content`, cut the same way
///   (Sygnal's v1 leaves out the members that are not strings);
/// - `prio`: `high`, or `normal` for `prio: low`; `unread` and `missed_calls` as decimal strings
///   (when the homeserver sent them).
///
/// Every value is a string (FCM v1's rule): a default-payload value that is not is JSON-encoded.
/// `android.priority` is `normal` for `prio: low`, else `high`. With `data.format` =
/// `event_id_only` (or an event id without a type, as Synapse sends for such pushers) only
/// `event_id`, `room_id`, `prio` and the counts go beside the default payload. The FCM route adds
/// `herald_id` (the notification id) to `data`.
public enum MatrixAndroidPayload {
    /// Sygnal's `MAX_BYTES_PER_FIELD`.
    public static let maxBytesPerField = 1024

    /// The notification fields copied into `data`, in Sygnal's order.
    static func fields(_ n: MatrixNotification) -> [(String, String?)] {
        [("event_id", n.eventID), ("type", n.type), ("sender", n.sender), ("room_name", n.roomName), ("room_alias", n.roomAlias),
         ("membership", n.membership), ("sender_display_name", n.senderDisplayName), ("room_id", n.roomID)]
    }

    /// Data keys FCM refuses (`from`, `message_type`, `google…`, `gcm…`) and Herald's own
    /// `herald_id`: left out of a default payload, reported as dropped.
    static func isReserved(_ key: String) -> Bool {
        let k = key.lowercased()
        return k == "from" || k == "message_type" || k.hasPrefix("google") || k.hasPrefix("gcm") || key == "herald_id"
    }

    /// The FCM message's `data` (strings only) and `android.priority` for `notification` sent to `device`.
    /// - Parameter defaultPayload: the configured `defaultPayload`; the pusher's
    ///   `data.default_payload` overrides it key by key.
    /// - Parameter neutral: the route reads no `fcm` block (a China vendor's): the same `data`
    ///   goes in the neutral fields instead, as a data-only (`content_available`) message.
    public static func map(_ notification: MatrixNotification, device: MatrixDevice,
                           defaultPayload: [String: JSONValue] = [:], neutral: Bool = false) -> MatrixPayload.Decision {
        var base = defaultPayload
        if let d = device.data?["default_payload"], d != .null {
            guard case .object(let o) = d else {
                return .reject(reason: "the pusher's data.default_payload is \(d.typeDescription), not an object")
            }
            base.merge(o) { _, pusher in pusher }
        }
        var data: [String: JSONValue] = [:]
        var dropped: [String] = []
        for (key, value) in base where value != .null {
            if isReserved(key) { dropped.append("default_payload.\(key)"); continue }
            data[key] = .string(value.stringValue ?? value.jsonString)
        }
        let eventID = notification.eventID.flatMap { $0.isEmpty ? nil : $0 }
        let eventIDOnly = eventID != nil && (notification.type == nil || device.data?["format"]?.stringValue == "event_id_only")
        let mode: MatrixPayload.Mode = eventIDOnly ? .eventIDOnly : eventID == nil && notification.type == nil ? .badgeOnly : .full
        for (key, value) in fields(notification) {
            if eventIDOnly && key != "event_id" && key != "room_id" { continue }
            if let value { data[key] = .string(MatrixText.truncate(value, maxBytes: maxBytesPerField)) }
        }
        if !eventIDOnly, let content = notification.content {
            for (key, value) in content {
                guard case .string(let s) = value else { continue }
                data["content_" + key] = .string(MatrixText.truncate(s, maxBytes: maxBytesPerField))
            }
        }
        let low = notification.priority == .low
        data["prio"] = .string(low ? "normal" : "high")
        if let unread = notification.unread { data["unread"] = .string(String(unread)) }
        if let missed = notification.missedCalls { data["missed_calls"] = .string(String(missed)) }

        var content = NotificationContent()
        content.priority = low ? .low : .high
        if neutral {
            content.data = data
            content.contentAvailable = true
        } else {
            content.overrides["fcm"] = .object(["data": .object(data), "android": .object(["priority": .string(low ? "normal" : "high")])])
        }
        return .send(content, mode: mode, dropped: dropped)
    }
}

/// Text rules the Matrix payloads share.
public enum MatrixText {
    /// `text` cut to at most `maxBytes` bytes of UTF-8 with "…" at the end, never inside a
    /// character (Sygnal's `truncate_str`): unchanged when it fits; else the whole characters
    /// (Unicode scalars) that fit in `maxBytes − 3` bytes, then "…" (3 bytes).
    public static func truncate(_ text: String, maxBytes: Int) -> String {
        if text.utf8.count <= maxBytes { return text }
        var kept = String.UnicodeScalarView()
        var bytes = 0
        for scalar in text.unicodeScalars {
            let n = scalar.utf8.count
            if bytes + n > maxBytes - 3 { break }
            kept.append(scalar)
            bytes += n
        }
        return String(kept) + "…"
    }

    /// `text` cut to at most `maxScalars` Unicode scalars (Python's `len`), the last replaced by
    /// "…" when cut (Sygnal's webpush `body[0 : MAX - 1] + "…"`).
    public static func truncate(_ text: String, maxScalars: Int) -> String {
        if text.unicodeScalars.count <= maxScalars { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.prefix(maxScalars - 1))) + "…"
    }
}
