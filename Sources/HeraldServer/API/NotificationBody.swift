import HeraldCore

/// A fast reader for `POST /v1/notifications` bodies of the usual shape, straight from the
/// bytes into a ``NotificationRequest``.
///
/// The full reader (``StrictJSON`` into a ``JSONValue``, then `NotificationRequest.fromAPI`)
/// builds a dictionary per object and a path string per field, so that every problem can be
/// named: tens of microseconds per request. This reader takes only valid bodies made of the
/// common fields and gives `nil` for anything else — malformed JSON, a duplicate or unknown
/// key, a `null`, a value out of range, `sound` or `localization` as objects — so the full
/// reader decides those and every error keeps its exact field path and message. Override blocks
/// (`apns`, …) are taken as they are, as the full reader takes them: their plugins check them
/// when the notification is planned. For the bodies it takes, it gives the same request as the
/// full reader (tested field by field).
enum NotificationBody {
    /// The request when `bytes` is a valid body of the common shape; `nil` when the full reader must decide.
    /// - Parameter blocks: the override blocks the configured plugins read.
    static func decodeCommon(_ bytes: [UInt8], blocks: Set<String>) -> NotificationRequest? {
        bytes.withUnsafeBufferPointer { buffer in
            var parser = StrictJSON.Parser(bytes: buffer)
            parser.skipSpace()
            guard let request = try? parser.commonNotification(blocks: blocks) else { return nil }
            parser.skipSpace()
            return parser.index == buffer.count ? request : nil
        }
    }
}

/// The reasons to leave a body to the full reader are many and need no detail.
private struct Unusual: Error {}

extension StrictJSON.Parser {
    fileprivate mutating func commonNotification(blocks: Set<String>) throws -> NotificationRequest {
        var app: String?, users: [String]?, tokens: [String]?, key: String?, environment: String?
        var content = NotificationContent()
        var seen: Set<String> = []
        try members(depth: 1) { p, name in
            guard seen.insert(name).inserted else { throw Unusual() }
            switch name {
            case "app": app = try p.text()
            case "users":
                users = try p.targets()
                if users!.contains(where: { FieldLimits.userProblem($0) != nil }) { throw Unusual() }  // the full reader names it
            case "tokens": tokens = try p.targets()
            case "idempotency_key":
                key = try p.text()
                if key!.utf8.count > NotificationRequest.maxIdempotencyKeyBytes { throw Unusual() }
            case "environment": environment = try p.text()
            case "alert":
                if p.index < p.bytes.count, p.bytes[p.index] == UInt8(ascii: "\"") { content.body = try p.string() } else { content.alert = try p.alert() }
            case "title": content.title = try p.text(nonEmpty: false)
            case "subtitle": content.subtitle = try p.text(nonEmpty: false)
            case "body": content.body = try p.text(nonEmpty: false)
            case "image": content.imageURL = try p.text()
            case "badge":
                let badge = try p.whole()
                guard badge >= 0, badge <= NotificationRequest.maxBadge else { throw Unusual() }
                content.badge = badge
            case "sound": content.sound = .named(try p.text())
            case "data":
                guard case .object(let data) = try p.value(depth: 1), !data.isEmpty else { throw Unusual() }
                content.data = data
            case "category": content.category = try p.text()
            case "thread": content.thread = try p.text()
            case "collapse_key":
                let c = try p.text()
                guard c.utf8.count <= NotificationRequest.maxCollapseKeyBytes, FieldLimits.headerValueProblem(c) == nil else { throw Unusual() }
                content.collapseKey = c
            case "priority": content.priority = try p.choice(NotificationPriority.self)
            case "expiration":
                let n = try p.whole()
                guard n >= 0 else { throw Unusual() }
                content.expiration = Int64(n)
            case "content_available": content.contentAvailable = try p.flag()
            default:
                guard blocks.contains(name), case .object(let block) = try p.value(depth: 1), !block.isEmpty else { throw Unusual() }
                content.overrides[name] = .object(block)
            }
        }
        // Both spellings of the visible text, or nothing to send: the full reader says why.
        if seen.contains("alert") && !seen.isDisjoint(with: ["title", "subtitle", "body"]) { throw Unusual() }
        guard let app, (users ?? []).count + (tokens ?? []).count > 0, !content.isEmpty else { throw Unusual() }
        var attributes = DeviceAttributes()
        attributes["environment"] = environment
        return NotificationRequest(app: app, users: users ?? [], tokens: tokens ?? [], content: content,
                                   idempotencyKey: key, attributes: attributes)
    }

    /// Reads an object's members, calling `member` with the parser at each value. Keys with
    /// escapes are left to the full reader.
    private mutating func members(depth: Int, _ member: (inout Self, String) throws -> Void) throws {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{"), depth <= StrictJSON.maxDepth else { throw Unusual() }
        index += 1
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return }
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw Unusual() }
            let start = index + 1
            let name = try string()
            if bytes[start..<(index - 1)].contains(UInt8(ascii: "\\")) { throw Unusual() }
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw Unusual() }
            index += 1
            skipSpace()
            guard index < bytes.count, bytes[index] != UInt8(ascii: "n") else { throw Unusual() }  // null: the full reader's rule
            try member(&self, name)
            skipSpace()
            guard index < bytes.count else { throw Unusual() }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return }
            throw Unusual()
        }
    }

    /// `value`, unless the field was already read (a duplicate key).
    private func check<T>(_ current: T?, _ value: T) throws -> T {
        if current != nil { throw Unusual() }
        return value
    }

    private mutating func text(nonEmpty: Bool = true) throws -> String {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw Unusual() }
        let s = try string()
        if nonEmpty && s.isEmpty { throw Unusual() }
        return s
    }

    /// `users` or `tokens`: non-empty strings.
    private mutating func targets() throws -> [String] {
        let list = try texts(nonEmpty: true)
        if list.count > NotificationRequest.maxTargets { throw Unusual() }
        return list
    }

    private mutating func texts(nonEmpty: Bool) throws -> [String] {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "[") else { throw Unusual() }
        index += 1
        var list: [String] = []
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return list }
        while true {
            skipSpace()
            list.append(try text(nonEmpty: nonEmpty))
            skipSpace()
            guard index < bytes.count else { throw Unusual() }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return list }
            throw Unusual()
        }
    }

    private mutating func choice<E: RawRepresentable>(_ type: E.Type) throws -> E where E.RawValue == String {
        guard let e = E(rawValue: try text()) else { throw Unusual() }
        return e
    }

    /// A number the full reader takes as a whole number (``JSONValue/intValue``).
    private mutating func whole() throws -> Int {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]),
              let n = JSONValue.number(try number()).intValue else { throw Unusual() }
        return n
    }

    private mutating func flag() throws -> Bool {
        guard index < bytes.count else { throw Unusual() }
        switch bytes[index] {
        case UInt8(ascii: "t"): try literal("true"); return true
        case UInt8(ascii: "f"): try literal("false"); return false
        default: throw Unusual()
        }
    }

    /// The `alert` object (the earlier spelling of the visible fields), without `launch_image`.
    private mutating func alert() throws -> AlertContent {
        var a = Alert()
        try members(depth: 2) { p, name in
            switch name {
            case "title": a.title = try p.check(a.title, p.text(nonEmpty: false))
            case "subtitle": a.subtitle = try p.check(a.subtitle, p.text(nonEmpty: false))
            case "body": a.body = try p.check(a.body, p.text(nonEmpty: false))
            case "title_loc_key": a.titleLocKey = try p.check(a.titleLocKey, p.text())
            case "title_loc_args": a.titleLocArgs = try p.check(a.titleLocArgs, p.texts(nonEmpty: false))
            case "subtitle_loc_key": a.subtitleLocKey = try p.check(a.subtitleLocKey, p.text())
            case "subtitle_loc_args": a.subtitleLocArgs = try p.check(a.subtitleLocArgs, p.texts(nonEmpty: false))
            case "loc_key": a.locKey = try p.check(a.locKey, p.text())
            case "loc_args": a.locArgs = try p.check(a.locArgs, p.texts(nonEmpty: false))
            default: throw Unusual()
            }
        }
        return .fields(a)
    }
}
