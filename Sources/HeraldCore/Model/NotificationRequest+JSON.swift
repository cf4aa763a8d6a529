import FoundationEssentials
import Glibc

/// The HTTP API's JSON shape of a notification (`POST /v1/notifications`), read strictly.
///
/// ```json
/// {"app": "com.example.app", "users": ["alice"], "tokens": ["…"],
///  "title": "Hi", "body": "…", "badge": 1, "sound": "default", "data": {"k": "v"},
///  "priority": "high", "collapse_key": "x",
///  "apns": {"push_type": "alert", "interruption_level": "time-sensitive"},
///  "idempotency_key": "order-42"}
/// ```
///
/// `alert` (a string, or an object of title, subtitle, body and localisation keys) is the
/// earlier spelling of the visible fields and is still read. An override block (`apns`, and
/// the blocks other plugins register) is an object passed to its plugins only, which check it
/// when the notification is accepted.
///
/// ```json
/// ```
///
/// Unknown fields are errors (a misspelt field must not be silently dropped); every problem is
/// reported with its JSON path (`apns.priority`, `alert.title_loc_args[1]`).
extension NotificationRequest {
    /// Longest `idempotency_key` accepted, in bytes.
    public static let maxIdempotencyKeyBytes = 256
    /// Most `users` or `tokens` in one request.
    public static let maxTargets = 100_000
    /// Largest `badge` (APNs takes a 32-bit number).
    public static let maxBadge = Int(Int32.max)
    /// Longest `collapse_key`, in bytes (APNs's `apns-collapse-id` limit, the smallest of the platforms').
    public static let maxCollapseKeyBytes = 64

    /// Reads an API body that is already parsed into a ``JSONValue``.
    /// - Parameter blocks: the override blocks the configured plugins read (see
    ///   ``HeraldConfiguration/overrideBlocks``); any other unknown key is an error.
    /// - Throws: ``RequestIssues`` with every problem, each with its field path.
    public static func fromAPI(_ json: JSONValue, blocks: OverrideBlocks = .any) throws(RequestIssues) -> NotificationRequest {
        let context = JSONReadContext(unknownKeys: .reject)
        let root = JSONNode(root: json, context: context)
        guard case .object = json else {
            throw RequestIssues([JSONIssue(path: "", message: "expected a JSON object, found \(json.typeDescription)")])
        }
        let app = root.string("app", required: true)
        let users = readStrings(root, "users")
        FieldLimits.checkUsers(root, "users")
        let tokens = readStrings(root, "tokens")
        let content = NotificationContent.read(from: root, blocks: blocks)
        // Checked here, where a caller's value is accepted, not in `read` (which also reads the
        // queue's stored content back): the APNs route refuses such a key when it renders.
        if let c = content?.collapseKey, let problem = FieldLimits.headerValueProblem(c) {
            root.error(at: "collapse_key", problem)
        }
        var key: String? = nil
        if let k = root.string("idempotency_key") {
            if k.utf8.count > maxIdempotencyKeyBytes {
                root.error(at: "idempotency_key", "must be at most \(maxIdempotencyKeyBytes) bytes, found \(k.utf8.count)")
            } else {
                key = k
            }
        }
        var attributes = DeviceAttributes()
        // A device attribute for raw addresses (APNs's environment): the route's plugin checks it.
        if let environment = root.string("environment") { attributes["environment"] = environment }
        context.reportUnknownKeys()
        if users.isEmpty && tokens.isEmpty && !root.has("users") && !root.has("tokens") && context.errors.isEmpty {
            context.error("users", "give at least one user or token (\"users\" and/or \"tokens\")")
        }
        if context.errors.isEmpty, let content, content.isEmpty {
            context.error("body", "nothing to send: give title, body, badge, sound, data, content_available or an override block such as apns")
        }
        guard context.errors.isEmpty, let app, let content else { throw RequestIssues(context.errors) }
        return NotificationRequest(app: app, users: users, tokens: tokens, content: content,
                                   idempotencyKey: key, attributes: attributes)
    }

    private static func readStrings(_ node: JSONNode, _ key: String) -> [String] {
        guard let list = node.child(key) else { return [] }
        guard case .array(let items) = list.value else {
            list.error("expected an array of strings, found \(list.value.typeDescription)")
            return []
        }
        if items.count > maxTargets { list.error("at most \(maxTargets) entries per request, found \(items.count)"); return [] }
        var result: [String] = []
        result.reserveCapacity(items.count)
        for element in list.elements() {
            guard let s = element.asString else { continue }
            if s.isEmpty { element.error("must not be empty"); continue }
            result.append(s)
        }
        return result
    }
}

/// Problems found in an API request body; each names its field.
public struct RequestIssues: Error, Sendable, CustomStringConvertible {
    public var issues: [JSONIssue]
    public init(_ issues: [JSONIssue]) { self.issues = issues }
    public var description: String { issues.map(\.description).joined(separator: "; ") }
}

/// Which top-level keys of a notification body are override blocks.
public enum OverrideBlocks: Sendable, Equatable {
    /// These names (the blocks the configured plugins read); other unknown keys are errors.
    case known(Set<String>)
    /// Any object-valued key that is not a field (content read back from the queue, whose
    /// blocks were checked when it was accepted).
    case any

    func contains(_ key: String) -> Bool {
        switch self {
        case .known(let names): return names.contains(key)
        case .any: return true
        }
    }
}

extension NotificationContent {
    /// The top-level keys of the content, besides override blocks.
    static let fieldKeys: Set<String> = ["alert", "title", "subtitle", "body", "localization", "image", "badge", "sound", "data",
                                         "category", "thread", "collapse_key", "priority", "expiration", "content_available"]

    /// Whether there is nothing visible or actionable to send.
    public var isEmpty: Bool {
        !hasVisibleText && imageURL == nil && badge == nil && sound == nil && data.isEmpty && !contentAvailable
            && overrides.values.allSatisfy { $0.objectValue?.isEmpty ?? true }
    }

    /// Reads the content fields of an API object (and its override blocks). Problems are
    /// recorded in the node's context; `nil` when a field was unusable.
    public static func read(from node: JSONNode, blocks: OverrideBlocks = .any) -> NotificationContent? {
        let before = node.context.errors.count
        var content = NotificationContent()
        var launchImage: String? = nil
        if let alert = node.child("alert") {
            switch alert.value {
            case .string(let s): content.body = s
            case .object:
                content.title = alert.string("title", nonEmpty: false)
                content.subtitle = alert.string("subtitle", nonEmpty: false)
                content.body = alert.string("body", nonEmpty: false)
                launchImage = alert.string("launch_image")
                var l = Localization()
                l.titleKey = alert.string("title_loc_key")
                l.titleArgs = alert.stringArray("title_loc_args")
                l.subtitleKey = alert.string("subtitle_loc_key")
                l.subtitleArgs = alert.stringArray("subtitle_loc_args")
                l.bodyKey = alert.string("loc_key")
                l.bodyArgs = alert.stringArray("loc_args")
                if !l.isEmpty { content.localization = l }
            default:
                alert.error("expected a string or an object with title, subtitle, body…, found \(alert.value.typeDescription)")
            }
            for key in ["title", "subtitle", "body", "localization"] where node.has(key) {
                node.error(at: key, "give either \"alert\" (the earlier spelling) or the top-level \"\(key)\", not both")
            }
        } else {
            content.title = node.string("title", nonEmpty: false)
            content.subtitle = node.string("subtitle", nonEmpty: false)
            content.body = node.string("body", nonEmpty: false)
            if let l = node.child("localization") {
                if case .object = l.value {
                    var loc = Localization()
                    loc.titleKey = l.string("title_key")
                    loc.titleArgs = l.stringArray("title_args")
                    loc.subtitleKey = l.string("subtitle_key")
                    loc.subtitleArgs = l.stringArray("subtitle_args")
                    loc.bodyKey = l.string("body_key")
                    loc.bodyArgs = l.stringArray("body_args")
                    if !loc.isEmpty { content.localization = loc }
                } else {
                    l.error("expected an object with title_key, title_args, body_key…, found \(l.value.typeDescription)")
                }
            }
        }
        content.imageURL = node.string("image")
        if let badge = node.int("badge") {
            if badge < 0 || badge > NotificationRequest.maxBadge { node.error(at: "badge", "must be between 0 and \(NotificationRequest.maxBadge)") } else { content.badge = badge }
        }
        if let sound = node.child("sound") {
            switch sound.value {
            case .string(let s):
                if s.isEmpty { sound.error("must not be empty") } else { content.sound = .named(s) }
            case .object:
                let critical = sound.bool("critical") ?? false
                let name = sound.string("name") ?? "default"
                let volume = sound.double("volume", in: 0...1)
                if critical {
                    content.sound = .critical(name: name, volume: volume)
                } else if volume != nil {
                    sound.error(at: "volume", "applies only to critical sounds; set \"critical\": true or give the sound as a string")
                } else {
                    content.sound = .named(name)
                }
            default:
                sound.error("expected a sound name or {\"critical\": true, \"name\", \"volume\"}, found \(sound.value.typeDescription)")
            }
        }
        if let data = node.child("data") {
            if case .object(let members) = data.value {
                data.allowKeys(Array(members.keys))
                content.data = members
            } else {
                data.error("expected an object (the app's own keys), found \(data.value.typeDescription)")
            }
        }
        content.category = node.string("category")
        content.thread = node.string("thread")
        if let c = node.string("collapse_key") {
            if c.utf8.count > NotificationRequest.maxCollapseKeyBytes {
                node.error(at: "collapse_key", "must be at most \(NotificationRequest.maxCollapseKeyBytes) bytes, found \(c.utf8.count)")
            } else {
                content.collapseKey = c
            }
        }
        content.priority = node.oneOf("priority", NotificationPriority.self)
        if let e = node.child("expiration"), let v = e.asInt {
            if v < 0 { e.error("must be a UNIX time in seconds, or 0 for now-or-never") } else { content.expiration = Int64(v) }
        }
        content.contentAvailable = node.bool("content_available") ?? false
        if case .object(let members) = node.value {
            for (key, value) in members where !fieldKeys.contains(key) && blocks.contains(key) {
                guard case .object(var block) = value else {
                    if case .known = blocks { node.error(at: key, "expected an object (the \(key) override block), found \(value.typeDescription)") }
                    continue
                }
                node.allowKeys([key])
                if key == "apns", let launchImage, block["launch_image"] == nil { block["launch_image"] = .string(launchImage) }
                content.overrides[key] = .object(block)
            }
        }
        if let launchImage, content.overrides["apns"] == nil { content.overrides["apns"] = .object(["launch_image": .string(launchImage)]) }
        return node.context.errors.count == before ? content : nil
    }

    /// The content in the API's field names (what ``read(from:blocks:)`` reads back unchanged);
    /// the queue stores notifications in this form.
    public func writeJSON(into o: inout ObjectWriter) {
        o.string("title", title)
        o.string("subtitle", subtitle)
        o.string("body", body)
        if let l = localization {
            o.object("localization") { w in
                w.string("title_key", l.titleKey)
                w.stringArray("title_args", l.titleArgs)
                w.string("subtitle_key", l.subtitleKey)
                w.stringArray("subtitle_args", l.subtitleArgs)
                w.string("body_key", l.bodyKey)
                w.stringArray("body_args", l.bodyArgs)
            }
        }
        o.string("image", imageURL)
        o.int("badge", badge)
        writeSound(into: &o)
        if !data.isEmpty { o.value("data", .object(data)) }
        o.string("category", category)
        o.string("thread", thread)
        o.string("collapse_key", collapseKey)
        o.string("priority", priority?.rawValue)
        o.int64("expiration", expiration)
        if contentAvailable { o.bool("content_available", true) }
        for key in overrides.keys.sorted() { o.value(key, overrides[key]) }
    }

    /// What a device shows, in the shape of the stream's events: `alert` (a string when there
    /// is only a body, else an object of title, subtitle, body and localisation keys), `badge`,
    /// `sound`, `image` and `data`.
    public func writeDisplayJSON(into o: inout ObjectWriter) {
        if let l = localization, !l.isEmpty || title != nil || subtitle != nil {
            writeAlertObject(into: &o, l)
        } else if title != nil || subtitle != nil {
            writeAlertObject(into: &o, Localization())
        } else if let body {
            o.string("alert", body)
        }
        o.int("badge", badge)
        writeSound(into: &o)
        o.string("image", imageURL)
        if !data.isEmpty { o.value("data", .object(data)) }
    }

    private func writeAlertObject(into o: inout ObjectWriter, _ l: Localization) {
        o.object("alert") { w in
            w.string("title", title)
            w.string("subtitle", subtitle)
            w.string("body", body)
            w.string("title_loc_key", l.titleKey)
            w.stringArray("title_loc_args", l.titleArgs)
            w.string("subtitle_loc_key", l.subtitleKey)
            w.stringArray("subtitle_loc_args", l.subtitleArgs)
            w.string("loc_key", l.bodyKey)
            w.stringArray("loc_args", l.bodyArgs)
        }
    }

    private func writeSound(into o: inout ObjectWriter) {
        switch sound {
        case .named(let name)?: o.string("sound", name)
        case .critical(let name, let volume)?:
            o.object("sound") { s in
                s.bool("critical", true)
                s.string("name", name)
                s.double("volume", volume)
            }
        case nil: break
        }
    }

    /// The content as canonical API JSON bytes (see ``writeJSON(into:)``).
    public var apiJSON: [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.object { writeJSON(into: &$0) }
        return w.bytes
    }

    /// Reads content written by ``apiJSON`` (the queue's stored form), by this version or an
    /// earlier one (whose `alert` and `apns` keys read as today's fields and block).
    /// - Throws: ``RequestIssues`` when the bytes are not such content.
    public static func fromAPIJSON(_ bytes: [UInt8]) throws(RequestIssues) -> NotificationContent {
        let json: JSONValue
        do { json = try JSONValue.parse(Data(bytes)) } catch {
            throw RequestIssues([JSONIssue(path: "", message: error.message)])
        }
        let context = JSONReadContext(unknownKeys: .reject)
        let node = JSONNode(root: json, context: context)
        let content = read(from: node, blocks: .any)
        context.reportUnknownKeys()
        guard context.errors.isEmpty, let content else { throw RequestIssues(context.errors) }
        return content
    }
}
