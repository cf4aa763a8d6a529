import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// How a notification becomes what a page's service worker receives, and the RFC 8030 headers.
///
/// The plaintext is one JSON document, `{id, app, title, body, icon, image, badge, tag, data,
/// created_at}` (members without a value left out): `id` is the Herald notification id, so a page
/// can drop a push it already showed from its stream; `badge` is the neutral count (for
/// `navigator.setAppBadge`); `tag` is the collapse key; `created_at` is when Herald accepted the
/// notification. The `webpush` override block adds members to it (or replaces generated ones,
/// except `id`, `app` and `created_at`); its `urgency`, `topic` and `ttl` set headers instead.
public enum WebPushRendering {
    /// The override block's name.
    public static let block = "webpush"
    /// Room kept for `,"created_at":"2026-01-01T00:00:00.000Z"`, added when the message is sent.
    static let createdAtReserve = 40
    /// Longest `Topic`, in characters of the base64url alphabet (RFC 8030 §5.4).
    public static let maxTopicLength = 32
    /// RFC 8030 `Urgency` values.
    public static let urgencies = ["very-low", "low", "normal", "high"]

    /// Header keys of ``RenderedPayload/headers`` this plugin reads back when sending.
    enum Header {
        static let ttl = "ttl"
        static let urgency = "urgency"
        static let topic = "topic"
    }

    /// Renders and checks the 3993-byte plaintext limit (with room for `created_at`).
    public static func render(_ content: NotificationContent, context: RenderContext, defaultTTL: Int) throws(ContentProblem) -> RenderedPayload {
        let block = content.override(block)
        var headers: [String: String] = [:]
        var extra: [(String, JSONValue)] = []
        for key in block.keys.sorted() {
            let value = block[key]!
            switch key {
            case "urgency":
                guard case .string(let u) = value, urgencies.contains(u) else {
                    throw ContentProblem(field: "webpush.urgency", "must be one of \(urgencies.joined(separator: ", "))")
                }
                headers[Header.urgency] = u
            case "topic":
                // A control character is refused, never stripped; any other value becomes a valid
                // Topic (itself, or its hash: see topic(for:)), as the collapse key does.
                guard case .string(let t) = value, !t.isEmpty else { throw ContentProblem(field: "webpush.topic", "must be a non-empty string") }
                if let problem = FieldLimits.headerValueProblem(t) { throw ContentProblem(field: "webpush.topic", problem) }
                headers[Header.topic] = topic(for: t)
            case "ttl":
                guard let n = value.intValue, n >= 0, n <= WebPushConfiguration.maxTTL else {
                    throw ContentProblem(field: "webpush.ttl", "must be a whole number of seconds from 0 to \(WebPushConfiguration.maxTTL) (28 days)")
                }
                headers[Header.ttl] = String(n)
            case "id", "app", "created_at":
                throw ContentProblem(field: "webpush.\(key)", "is set by Herald and cannot be overridden")
            default:
                extra.append((key, value))
            }
        }
        if headers[Header.urgency] == nil { headers[Header.urgency] = urgency(content.priority) }
        if headers[Header.topic] == nil, let key = content.collapseKey, !key.isEmpty {
            // Checked at accept time; content an earlier version stored is checked here.
            if let problem = FieldLimits.headerValueProblem(key) { throw ContentProblem(field: "collapse_key", problem) }
            headers[Header.topic] = topic(for: key)
        }
        if headers[Header.ttl] == nil, content.expiration == nil { headers[Header.ttl] = String(defaultTTL) }
        if !content.hasVisibleText, content.imageURL == nil, content.badge == nil, content.data.isEmpty, extra.isEmpty {
            throw ContentProblem(field: "body", "nothing for Web Push to send: a page's service worker must show something "
                                 + "(give title, body, image, badge, data or webpush members)")
        }
        let overridden = Set(extra.map(\.0))
        var w = JSONWriter(capacity: 512)
        w.object { o in
            o.string("id", context.notificationID)
            o.string("app", context.app)
            if !overridden.contains("title") { o.string("title", content.title) }
            if !overridden.contains("body") { o.string("body", content.body) }
            if !overridden.contains("image") { o.string("image", content.imageURL) }
            if !overridden.contains("badge") { o.int("badge", content.badge) }
            if !overridden.contains("tag") { o.string("tag", content.collapseKey) }
            if !overridden.contains("data"), !content.data.isEmpty { o.value("data", .object(content.data)) }
            for (key, value) in extra { o.value(key, value) }
        }
        let size = w.bytes.count + createdAtReserve
        guard size <= WebPushEncryption.maxPlaintextLength else {
            throw ContentProblem(field: "payload", "the service worker's JSON is \(size) bytes (with created_at); Web Push carries at most \(WebPushEncryption.maxPlaintextLength) bytes of plaintext in a 4096-byte encrypted body")
        }
        return RenderedPayload(body: w.bytes, headers: headers, expiration: content.expiration)
    }

    /// The neutral priority as RFC 8030 `Urgency` (`normal` when none).
    public static func urgency(_ priority: NotificationPriority?) -> String {
        switch priority {
        case .high?: return "high"
        case .low?: return "low"
        case .normal?, nil: return "normal"
        }
    }

    /// A `Topic` from a collapse key: the key itself when it is at most 32 characters of the
    /// base64url alphabet, else the first 32 characters of the base64url of its SHA-256. Either
    /// way a valid RFC 8030 §5.4 `Topic`.
    public static func topic(for key: String) -> String {
        if key.utf8.count <= maxTopicLength, key.utf8.allSatisfy(isBase64URL) { return key }
        return String(Base64URL.encode(SHA256.hash(Array(key.utf8))).prefix(maxTopicLength))
    }

    static func isBase64URL(_ b: UInt8) -> Bool {
        (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
    }

    /// The document with `created_at` added (the rendered body is shared by every device).
    public static func plaintext(_ body: [UInt8], createdAt: Date) -> [UInt8] {
        guard body.last == UInt8(ascii: "}") else { return body }
        var out = body
        out.removeLast()
        out += Array(",\"created_at\":\"\(createdAt.iso8601)\"}".utf8)
        return out
    }

    /// `TTL` at `now`: the seconds left to the expiration (0 when past or now-or-never), else the rendered default.
    public static func ttl(_ payload: RenderedPayload, now: Date) -> Int {
        if let e = payload.expiration {
            return max(0, min(WebPushConfiguration.maxTTL, Int(e - Int64(now.timeIntervalSince1970))))
        }
        return payload.headers[Header.ttl].flatMap { Int($0) } ?? 0
    }
}
