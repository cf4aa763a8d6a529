import FoundationEssentials
import HeraldCore

/// Turns a Matrix notification for one web pusher into the Web Push message Sygnal's webpush
/// pushkin sends, so service workers written against Sygnal (Element Web, Hydrogen) work unchanged.
///
/// The pusher (as Sygnal has it): the `pushkey` is the browser subscription's `p256dh`;
/// `data.endpoint` and `data.auth` complete the subscription (``subscription(_:)``). The
/// plaintext is Sygnal's `_build_payload`: the pusher's `data.default_payload` (over the
/// configured `defaultPayload`), then `room_id`, `room_name`, `room_alias`, `membership`,
/// `event_id`, `sender`, `sender_display_name`, `user_is_target` and `type` when set and not
/// empty (or false), `unread` and `missed_calls` as numbers, and the event's `content` without
/// `formatted_body`, its `body` cut to 1000 characters ("…" last) and a `ciphertext` over 2000
/// characters left out. The Web Push route adds `id` (the notification id), `app` and `created_at`.
///
/// Headers: `Urgency: low` for `prio: low`, else `normal`; `Topic` from the room id (hashed to
/// 32 base64url characters) when the pusher's `data.only_last_per_room` is `true`, so the push
/// service keeps only the latest message of a room. A pusher with `data.events_only: true` gets
/// nothing for a badge-only update (no `event_id`).
public enum MatrixWebPayload {
    /// Sygnal's `MAX_BODY_LENGTH`, in characters.
    public static let maxBodyLength = 1000
    /// Sygnal's `MAX_CIPHERTEXT_LENGTH`, in characters.
    public static let maxCiphertextLength = 2000
    /// Members the Web Push route sets itself (`id`, `app`, `created_at`) or reads as headers
    /// (`urgency`, `topic`, `ttl`): left out of a default payload, reported as dropped.
    static let reservedKeys: Set<String> = ["id", "app", "created_at", "urgency", "topic", "ttl"]

    /// The subscription a web pusher stands for (`PushSubscription.toJSON()`'s shape):
    /// `{"endpoint": data.endpoint, "keys": {"p256dh": pushkey, "auth": data.auth}}`; `nil` when
    /// `data.endpoint` or `data.auth` is missing or not a string (Sygnal rejects the pushkey).
    public static func subscription(_ device: MatrixDevice) -> JSONValue? {
        guard !device.pushkey.isEmpty, case .string(let endpoint)? = device.data?["endpoint"],
              case .string(let auth)? = device.data?["auth"] else { return nil }
        return .object(["endpoint": .string(endpoint), "keys": .object(["p256dh": .string(device.pushkey), "auth": .string(auth)])])
    }

    /// The service worker's JSON and the headers, as the `webpush` override block.
    /// - Parameter defaultPayload: the configured `defaultPayload`; the pusher's
    ///   `data.default_payload` (when an object; Sygnal ignores anything else) overrides it key by key.
    public static func map(_ notification: MatrixNotification, device: MatrixDevice,
                           defaultPayload: [String: JSONValue] = [:]) -> MatrixPayload.Decision {
        let eventID = notification.eventID.flatMap { $0.isEmpty ? nil : $0 }
        if device.data?["events_only"] == .bool(true) && eventID == nil { return .nothing }
        var payload: [String: JSONValue] = [:]
        var dropped: [String] = []
        var base = defaultPayload
        if case .object(let o)? = device.data?["default_payload"] { base.merge(o) { _, pusher in pusher } }
        for (key, value) in base {
            if reservedKeys.contains(key) { dropped.append("default_payload.\(key)"); continue }
            payload[key] = value
        }
        let texts: [(String, String?)] = [
            ("room_id", notification.roomID), ("room_name", notification.roomName), ("room_alias", notification.roomAlias),
            ("membership", notification.membership), ("event_id", notification.eventID), ("sender", notification.sender),
            ("sender_display_name", notification.senderDisplayName),
        ]
        for (key, value) in texts { if let value, !value.isEmpty { payload[key] = .string(value) } }
        if notification.userIsTarget == true { payload["user_is_target"] = .bool(true) }
        if let type = notification.type, !type.isEmpty { payload["type"] = .string(type) }
        if let unread = notification.unread { payload["unread"] = .number(Double(unread)) }
        if let missed = notification.missedCalls { payload["missed_calls"] = .number(Double(missed)) }
        if var content = notification.content, !content.isEmpty {
            content["formatted_body"] = nil
            if case .string(let body)? = content["body"] { content["body"] = .string(MatrixText.truncate(body, maxScalars: maxBodyLength)) }
            if case .string(let c)? = content["ciphertext"], c.unicodeScalars.count > maxCiphertextLength { content["ciphertext"] = nil }
            payload["content"] = .object(content)
        }
        let low = notification.priority == .low
        payload["urgency"] = .string(low ? "low" : "normal")
        if device.data?["only_last_per_room"] == .bool(true), let room = notification.roomID, !room.isEmpty {
            payload["topic"] = .string(room)
        }
        var content = NotificationContent()
        content.priority = low ? .low : .normal
        content.overrides["webpush"] = .object(payload)
        let mode: MatrixPayload.Mode = eventID == nil ? .badgeOnly : notification.type == nil ? .eventIDOnly : .full
        return .send(content, mode: mode, dropped: dropped)
    }
}
