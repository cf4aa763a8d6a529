import FoundationEssentials
import Glibc

/// The HTTP API's JSON shape of a notification (`POST /v1/notifications`), read strictly.
///
/// ```json
/// {"app": "com.example.app", "users": ["alice"], "tokens": ["…"],
///  "alert": {"title": "Hi", "body": "…"}, "badge": 1, "sound": "default", "data": {"k": "v"},
///  "apns": {"push_type": "alert", "priority": 10, "collapse_id": "x"},
///  "idempotency_key": "order-42"}
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
    /// Longest `apns.collapse_id`, in bytes (Apple's limit).
    public static let maxCollapseIDBytes = 64

    /// Reads an API body that is already parsed into a ``JSONValue``.
    /// - Throws: ``RequestIssues`` with every problem, each with its field path.
    public static func fromAPI(_ json: JSONValue) throws(RequestIssues) -> NotificationRequest {
        let context = JSONReadContext(unknownKeys: .reject)
        let root = JSONNode(root: json, context: context)
        guard case .object = json else {
            throw RequestIssues([JSONIssue(path: "", message: "expected a JSON object, found \(json.typeDescription)")])
        }
        let app = root.string("app", required: true)
        let users = readStrings(root, "users")
        FieldLimits.checkUsers(root, "users")
        let tokens = readStrings(root, "tokens")
        let content = NotificationContent.read(from: root)
        var key: String? = nil
        if let k = root.string("idempotency_key") {
            if k.utf8.count > maxIdempotencyKeyBytes {
                root.error(at: "idempotency_key", "must be at most \(maxIdempotencyKeyBytes) bytes, found \(k.utf8.count)")
            } else {
                key = k
            }
        }
        let environment = root.oneOf("environment", APNsEnvironment.self)
        context.reportUnknownKeys()
        if users.isEmpty && tokens.isEmpty && !root.has("users") && !root.has("tokens") && context.errors.isEmpty {
            context.error("users", "give at least one user or token (\"users\" and/or \"tokens\")")
        }
        if context.errors.isEmpty, let content, content.isEmpty {
            context.error("alert", "nothing to send: give alert, badge, sound, data, apns.content_available, apns.live_activity or apns.push_type \"widgets\"")
        }
        guard context.errors.isEmpty, let app, let content else { throw RequestIssues(context.errors) }
        return NotificationRequest(app: app, users: users, tokens: tokens, content: content,
                                   idempotencyKey: key, environment: environment)
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

extension NotificationContent {
    /// Whether there is nothing visible or actionable to send.
    public var isEmpty: Bool {
        alert == nil && badge == nil && sound == nil && data.isEmpty && !apns.contentAvailable && apns.liveActivity == nil
            && pushType != .widgets
    }

    /// Reads the content fields (`alert`, `badge`, `sound`, `data`, `apns`) of an API object.
    /// Problems are recorded in the node's context; `nil` when a field was unusable.
    public static func read(from node: JSONNode) -> NotificationContent? {
        let before = node.context.errors.count
        var content = NotificationContent()
        if let alert = node.child("alert") {
            switch alert.value {
            case .string(let s): content.alert = .text(s)
            case .object:
                var a = Alert()
                a.title = alert.string("title", nonEmpty: false)
                a.subtitle = alert.string("subtitle", nonEmpty: false)
                a.body = alert.string("body", nonEmpty: false)
                a.launchImage = alert.string("launch_image")
                a.titleLocKey = alert.string("title_loc_key")
                a.titleLocArgs = alert.stringArray("title_loc_args")
                a.subtitleLocKey = alert.string("subtitle_loc_key")
                a.subtitleLocArgs = alert.stringArray("subtitle_loc_args")
                a.locKey = alert.string("loc_key")
                a.locArgs = alert.stringArray("loc_args")
                content.alert = .fields(a)
            default:
                alert.error("expected a string or an object with title, subtitle, body…, found \(alert.value.typeDescription)")
            }
        }
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
                if members["aps"] != nil {
                    data.error(at: "aps", "\"aps\" is reserved for Apple's keys; use the top-level fields")
                }
                content.data = members
            } else {
                data.error("expected an object (custom keys beside \"aps\"), found \(data.value.typeDescription)")
            }
        }
        if let apns = node.child("apns") {
            if case .object = apns.value { content.apns = readOptions(apns) } else {
                apns.error("expected an object, found \(apns.value.typeDescription)")
            }
        }
        return node.context.errors.count == before ? content : nil
    }

    /// An object whose keys are the app's own (not checked against a schema): a Live
    /// Activity's `content_state` or `attributes`, which Apple takes as dictionaries only.
    private static func freeForm(_ node: JSONNode?) -> JSONValue? {
        guard let node else { return nil }
        guard case .object(let members) = node.value else {
            node.error("expected an object (the app's own keys), found \(node.value.typeDescription)")
            return nil
        }
        node.allowKeys(Array(members.keys))
        return node.value
    }

    private static func readOptions(_ node: JSONNode) -> APNsOptions {
        var o = APNsOptions()
        o.pushType = node.oneOf("push_type", PushType.self)
        if let p = node.int("priority") {
            if [1, 5, 10].contains(p) { o.priority = p } else { node.error(at: "priority", "must be 10, 5 or 1, found \(p)") }
        }
        if let e = node.child("expiration") {
            if let v = e.asInt {
                if v < 0 { e.error("must be a UNIX time in seconds, or 0 for now-or-never") } else { o.expiration = Int64(v) }
            }
        }
        if let c = node.string("collapse_id") {
            if c.utf8.count > NotificationRequest.maxCollapseIDBytes {
                node.error(at: "collapse_id", "must be at most \(NotificationRequest.maxCollapseIDBytes) bytes, found \(c.utf8.count)")
            } else {
                o.collapseID = c
            }
        }
        o.threadID = node.string("thread_id")
        o.category = node.string("category")
        o.contentAvailable = node.bool("content_available") ?? false
        o.mutableContent = node.bool("mutable_content") ?? false
        o.interruptionLevel = node.oneOf("interruption_level", InterruptionLevel.self)
        o.relevanceScore = node.double("relevance_score", in: 0...1)
        o.targetContentID = node.string("target_content_id")
        o.filterCriteria = node.string("filter_criteria")
        if let live = node.child("live_activity") {
            if case .object = live.value {
                let event = live.oneOf("event", LiveActivityContent.Event.self, required: true)
                let timestamp = live.int("timestamp", required: true)
                var activity = event.flatMap { e in timestamp.map { LiveActivityContent(event: e, timestamp: Int64($0)) } }
                let state = freeForm(live.child("content_state"))
                let stale = live.int("stale_date")
                let dismissal = live.int("dismissal_date")
                let attributesType = live.string("attributes_type")
                let attributes = freeForm(live.child("attributes"))
                activity?.contentState = state
                activity?.staleDate = stale.map(Int64.init)
                activity?.dismissalDate = dismissal.map(Int64.init)
                activity?.attributesType = attributesType
                activity?.attributes = attributes
                o.liveActivity = activity
            } else {
                live.error("expected an object with event and timestamp, found \(live.value.typeDescription)")
            }
        }
        return o
    }

    /// The content in the API's field names (what ``read(from:)`` reads back unchanged); the
    /// queue stores notifications in this form.
    public func writeJSON(into o: inout ObjectWriter) {
        writeDisplayJSON(into: &o)
        writeOptionsJSON(into: &o)
    }

    /// What a device shows: `alert`, `badge`, `sound` and `data` in the API's field names (the
    /// local transport's event carries these).
    public func writeDisplayJSON(into o: inout ObjectWriter) {
        switch alert {
        case .text(let s)?: o.string("alert", s)
        case .fields(let a)?:
            o.object("alert") { w in
                w.string("title", a.title)
                w.string("subtitle", a.subtitle)
                w.string("body", a.body)
                w.string("launch_image", a.launchImage)
                w.string("title_loc_key", a.titleLocKey)
                w.stringArray("title_loc_args", a.titleLocArgs)
                w.string("subtitle_loc_key", a.subtitleLocKey)
                w.stringArray("subtitle_loc_args", a.subtitleLocArgs)
                w.string("loc_key", a.locKey)
                w.stringArray("loc_args", a.locArgs)
            }
        case nil: break
        }
        o.int("badge", badge)
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
        if !data.isEmpty { o.value("data", .object(data)) }
    }

    private func writeOptionsJSON(into o: inout ObjectWriter) {
        let a = apns
        let hasOptions = a.pushType != nil || a.priority != nil || a.expiration != nil || a.collapseID != nil
            || a.threadID != nil || a.category != nil || a.contentAvailable || a.mutableContent
            || a.interruptionLevel != nil || a.relevanceScore != nil || a.targetContentID != nil
            || a.filterCriteria != nil || a.liveActivity != nil
        guard hasOptions else { return }
        o.object("apns") { w in
            w.string("push_type", a.pushType?.rawValue)
            w.int("priority", a.priority)
            w.int64("expiration", a.expiration)
            w.string("collapse_id", a.collapseID)
            w.string("thread_id", a.threadID)
            w.string("category", a.category)
            if a.contentAvailable { w.bool("content_available", true) }
            if a.mutableContent { w.bool("mutable_content", true) }
            w.string("interruption_level", a.interruptionLevel?.rawValue)
            w.double("relevance_score", a.relevanceScore)
            w.string("target_content_id", a.targetContentID)
            w.string("filter_criteria", a.filterCriteria)
            if let live = a.liveActivity {
                w.object("live_activity") { l in
                    l.string("event", live.event.rawValue)
                    l.int64("timestamp", live.timestamp)
                    l.value("content_state", live.contentState)
                    l.int64("stale_date", live.staleDate)
                    l.int64("dismissal_date", live.dismissalDate)
                    l.string("attributes_type", live.attributesType)
                    l.value("attributes", live.attributes)
                }
            }
        }
    }

    /// The content as canonical API JSON bytes (see ``writeJSON(into:)``).
    public var apiJSON: [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.object { writeJSON(into: &$0) }
        return w.bytes
    }

    /// Reads content written by ``apiJSON`` (the queue's stored form).
    /// - Throws: ``RequestIssues`` when the bytes are not such content.
    public static func fromAPIJSON(_ bytes: [UInt8]) throws(RequestIssues) -> NotificationContent {
        let json: JSONValue
        do { json = try JSONValue.parse(Data(bytes)) } catch {
            throw RequestIssues([JSONIssue(path: "", message: error.message)])
        }
        let context = JSONReadContext(unknownKeys: .reject)
        let node = JSONNode(root: json, context: context)
        let content = read(from: node)
        context.reportUnknownKeys()
        guard context.errors.isEmpty, let content else { throw RequestIssues(context.errors) }
        return content
    }
}
