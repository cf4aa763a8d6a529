import FoundationEssentials
import Glibc
import HeraldCore

/// The `apns` override block of a notification: Apple's headers and the `aps` keys that have
/// no neutral field, in the API's names.
///
/// ```json
/// "apns": {"push_type": "alert", "priority": 10, "collapse_id": "x", "interruption_level": "time-sensitive"}
/// ```
/// A key given here wins over the neutral field it overlaps (`priority`, `expiration`,
/// `collapse_key` as `collapse_id`, `thread` as `thread_id`, `category`, `content_available`).
extension APNsOptions {
    /// The block's name in a notification body and in `apps.<id>.overrides`.
    public static let block = "apns"

    /// Longest `collapse_id`, in bytes (Apple's limit).
    public static let maxCollapseIDBytes = 64

    /// Reads the block strictly: unknown keys and bad values are errors with their JSON path
    /// (`apns.priority`). Every problem is recorded in `node`'s context.
    public static func read(_ node: JSONNode) -> APNsOptions {
        var o = APNsOptions()
        guard case .object = node.value else {
            node.error("expected an object, found \(node.value.typeDescription)")
            return o
        }
        o.pushType = node.oneOf("push_type", PushType.self)
        if let p = node.int("priority") {
            if [1, 5, 10].contains(p) { o.priority = p } else { node.error(at: "priority", "must be 10, 5 or 1, found \(p)") }
        }
        if let e = node.child("expiration"), let v = e.asInt {
            if v < 0 { e.error("must be a UNIX time in seconds, or 0 for now-or-never") } else { o.expiration = Int64(v) }
        }
        if let c = node.string("collapse_id") {
            if let problem = FieldLimits.headerValueProblem(c) {
                node.error(at: "collapse_id", problem)
            } else if c.utf8.count > maxCollapseIDBytes {
                node.error(at: "collapse_id", "must be at most \(maxCollapseIDBytes) bytes, found \(c.utf8.count)")
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
        o.launchImage = node.string("launch_image")
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
                let channel = live.string("input_push_channel")
                activity?.contentState = state
                activity?.staleDate = stale.map(Int64.init)
                activity?.dismissalDate = dismissal.map(Int64.init)
                activity?.attributesType = attributesType
                activity?.attributes = attributes
                activity?.inputPushChannel = channel
                o.liveActivity = activity
            } else {
                live.error("expected an object with event and timestamp, found \(live.value.typeDescription)")
            }
        }
        return o
    }

    /// An object whose keys are the app's own (a Live Activity's `content_state` or `attributes`).
    private static func freeForm(_ node: JSONNode?) -> JSONValue? {
        guard let node else { return nil }
        guard case .object(let members) = node.value else {
            node.error("expected an object (the app's own keys), found \(node.value.typeDescription)")
            return nil
        }
        node.allowKeys(Array(members.keys))
        return node.value
    }

    /// The block as JSON (only the keys set), what ``read(_:)`` reads back unchanged.
    public var json: JSONValue {
        var w = JSONWriter(capacity: 128)
        w.object { w in
            w.string("push_type", pushType?.rawValue)
            w.int("priority", priority)
            w.int64("expiration", expiration)
            w.string("collapse_id", collapseID)
            w.string("thread_id", threadID)
            w.string("category", category)
            if contentAvailable { w.bool("content_available", true) }
            if mutableContent { w.bool("mutable_content", true) }
            w.string("interruption_level", interruptionLevel?.rawValue)
            w.double("relevance_score", relevanceScore)
            w.string("target_content_id", targetContentID)
            w.string("filter_criteria", filterCriteria)
            w.string("launch_image", launchImage)
            if let live = liveActivity {
                w.object("live_activity") { l in
                    l.string("event", live.event.rawValue)
                    l.int64("timestamp", live.timestamp)
                    l.value("content_state", live.contentState)
                    l.int64("stale_date", live.staleDate)
                    l.int64("dismissal_date", live.dismissalDate)
                    l.string("attributes_type", live.attributesType)
                    l.value("attributes", live.attributes)
                    l.string("input_push_channel", live.inputPushChannel)
                }
            }
        }
        return (try? JSONValue.parse(Data(w.bytes))) ?? .object([:])
    }

    /// Whether nothing is set.
    public var isEmpty: Bool { self == APNsOptions() }
}

extension NotificationContent {
    /// The `apns` override block as typed options (read leniently: what is unusable is left
    /// out; the accept-time render reports it). Setting it replaces the block.
    public var apns: APNsOptions {
        get {
            guard let block = overrides[APNsOptions.block] else { return APNsOptions() }
            let context = JSONReadContext(unknownKeys: .warn)
            return APNsOptions.read(JSONNode(root: block, context: context))
        }
        set {
            if newValue.isEmpty { overrides[APNsOptions.block] = nil } else { overrides[APNsOptions.block] = newValue.json }
        }
    }

    /// The options APNs gets: the block, with the neutral fields where the block is silent.
    public func apnsOptions(_ block: APNsOptions) -> APNsOptions {
        var o = block
        if o.priority == nil, let p = priority {
            switch p {
            case .high: o.priority = 10
            case .normal: o.priority = 5
            case .low: o.priority = 1
            }
        }
        if o.expiration == nil { o.expiration = expiration }
        if o.collapseID == nil { o.collapseID = collapseKey }
        if o.threadID == nil { o.threadID = thread }
        if o.category == nil { o.category = category }
        if contentAvailable { o.contentAvailable = true }
        // Data with nothing to show is a background push on APNs (content-available, priority 5):
        // an alert push with no alert is neither shown nor run.
        if o.pushType == nil, o.liveActivity == nil, alert == nil, badge == nil, sound == nil, !data.isEmpty {
            o.contentAvailable = true
        }
        return o
    }

    /// The options APNs gets (see ``apnsOptions(_:)``).
    public var effectiveAPNs: APNsOptions { apnsOptions(apns) }

    /// The push type sent: the explicit one, else `background` for a notification that only
    /// sets content-available, `liveactivity` when Live Activity keys are present, else `alert`.
    public var pushType: PushType { pushType(effectiveAPNs) }

    func pushType(_ o: APNsOptions) -> PushType {
        if let t = o.pushType { return t }
        if o.liveActivity != nil { return .liveactivity }
        if o.contentAvailable && alert == nil && badge == nil && sound == nil { return .background }
        return .alert
    }

    /// The `apns-priority` sent: 5 for background pushes, else the explicit one, else the push type's default.
    public var apnsPriority: Int { pushType.priority(requested: effectiveAPNs.priority) }
}

/// The APNs routes' shared rules: hex addresses with an environment, and the payload.
public enum APNsRoute {
    /// A hex device token for a route serving `environment`.
    public static func address(_ input: DeviceAddressInput, attributes: DeviceAttributes,
                               environment: APNsEnvironment) throws(AddressProblem) -> DeviceAddress {
        guard case .token(let raw) = input else {
            throw AddressProblem(field: input.field, "APNs takes a hex device token in \"token\", not a structured address")
        }
        let token: String
        do { token = try DeviceToken.normalize(raw) } catch {
            throw AddressProblem(field: "token", "\(error)")
        }
        if let given = attributes[APNsEnvironment.attribute] {
            guard let env = APNsEnvironment(rawValue: given) else {
                throw AddressProblem(field: "environment", "expected \"sandbox\" or \"production\", found \"\(given)\"")
            }
            guard env == environment else {
                throw AddressProblem(field: "environment", "this route serves \(environment.rawValue) devices, not \(env.rawValue)")
            }
        }
        return DeviceAddress(token: token, attributes: .apns(environment))
    }

    /// Whether a route serving `environment` carries a device with `attributes`.
    public static func canCarry(_ attributes: DeviceAttributes, environment: APNsEnvironment) -> Bool {
        attributes.apnsEnvironment.map { $0 == environment } ?? true
    }

    /// Header names of ``RenderedPayload/headers`` for APNs.
    public enum Header {
        public static let pushType = "apns-push-type"
        public static let priority = "apns-priority"
        public static let expiration = "apns-expiration"
        public static let collapseID = "apns-collapse-id"
    }

    /// The payload and headers of `content` for APNs, checked against Apple's rules and size limit.
    /// The payload carries `context.notificationID` as `herald_id` beside `aps`
    /// (``APNsPayload/notificationIDKey``), and that key counts toward the size limit.
    /// - Throws: ``ContentProblem`` naming the field (`apns.priority`, `data.aps`, `data.herald_id`, `payload`).
    public static func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        var block = APNsOptions()
        if let value = content.overrides[APNsOptions.block] {
            let readContext = JSONReadContext(unknownKeys: .reject)
            let node = JSONNode(root: value, context: readContext, path: APNsOptions.block)
            block = APNsOptions.read(node)
            readContext.reportUnknownKeys()
            if let first = readContext.errors.first { throw ContentProblem(field: first.path, first.message) }
        }
        if content.data["aps"] != nil {
            throw ContentProblem(field: "data.aps", "\"aps\" is reserved for Apple's keys; use the top-level fields or the apns block")
        }
        if content.data[APNsPayload.notificationIDKey] != nil {
            throw ContentProblem(field: "data.\(APNsPayload.notificationIDKey)",
                                 "\"\(APNsPayload.notificationIDKey)\" is reserved: Herald sets it to the notification id in every APNs payload")
        }
        let options = content.apnsOptions(block)
        if options.liveActivity == nil, content.pushType(options) == .liveactivity {
            throw ContentProblem(field: "apns.live_activity", "required for push type liveactivity: event, timestamp and content_state")
        }
        if let live = options.liveActivity, let problem = live.problem(hasAlert: content.alert != nil) {
            throw ContentProblem(field: problem.field == "alert" ? "alert" : "apns.live_activity.\(problem.field)", problem.message)
        }
        let payload = unchecked(content, block: block, notificationID: context.notificationID)
        try checkHeaders(payload, block: block, topic: context.topic)
        let type = APNsSendOptions(payload).pushType
        if type == .alert && content.alert == nil && content.badge == nil && content.sound == nil && content.data.isEmpty
            && !content.apnsOptions(block).contentAvailable {
            throw ContentProblem(field: "body", "nothing for APNs to send: give title, body, badge, sound, data, content_available, "
                                 + "apns.live_activity or apns.push_type \"widgets\"")
        }
        if payload.body.count > type.maxPayloadBytes {
            throw ContentProblem(field: "payload", "is \(payload.body.count) bytes; APNs accepts at most \(type.maxPayloadBytes) for \(type.rawValue) notifications")
        }
        return payload
    }

    /// Refuses a header value that could break the request: `apns-collapse-id` (from
    /// `apns.collapse_id`, else the neutral `collapse_key`, whose stored form was never checked
    /// by this version when an earlier one accepted it) with a control character or over 64
    /// bytes, and an `apns-topic` that is not one header value. Nothing is stripped.
    static func checkHeaders(_ payload: RenderedPayload, block: APNsOptions, topic: String) throws(ContentProblem) {
        if let c = payload.headers[Header.collapseID] {
            let field = block.collapseID != nil ? "\(APNsOptions.block).collapse_id" : "collapse_key"
            if let problem = FieldLimits.headerValueProblem(c) { throw ContentProblem(field: field, problem) }
            if c.utf8.count > APNsOptions.maxCollapseIDBytes {
                throw ContentProblem(field: field, "must be at most \(APNsOptions.maxCollapseIDBytes) bytes (apns-collapse-id), found \(c.utf8.count)")
            }
        }
        if let problem = FieldLimits.headerValueProblem(topic) {
            throw ContentProblem(field: "topic", "the app's topic \(problem) (it is sent as apns-topic)")
        }
    }

    /// The payload and headers without the checks (the block read leniently, no size limit).
    static func unchecked(_ content: NotificationContent, block: APNsOptions? = nil, notificationID: String?) -> RenderedPayload {
        let o = content.apnsOptions(block ?? content.apns)
        let type = content.pushType(o)
        let body = APNsPayload.encode(content, options: o, pushType: type, notificationID: notificationID)
        var headers = [Header.pushType: type.rawValue, Header.priority: String(type.priority(requested: o.priority))]
        if let e = o.expiration { headers[Header.expiration] = String(e) }
        if let c = o.collapseID { headers[Header.collapseID] = c }
        return RenderedPayload(body: body, headers: headers, expiration: o.expiration)
    }
}

/// What an APNs transport sends with a rendered payload, read back from its headers.
public struct APNsSendOptions: Sendable, Equatable {
    public var pushType: PushType
    public var priority: Int
    public var expiration: Int64?
    public var collapseID: String?

    public init(_ payload: RenderedPayload) {
        let h = payload.headers
        pushType = h[APNsRoute.Header.pushType].flatMap(PushType.init(rawValue:)) ?? .alert
        priority = h[APNsRoute.Header.priority].flatMap { Int($0) } ?? pushType.defaultPriority
        expiration = h[APNsRoute.Header.expiration].flatMap { Int64($0) }
        collapseID = h[APNsRoute.Header.collapseID]
    }
}

extension NotificationContent {
    /// Content with an `apns` override block.
    public init(alert: AlertContent? = nil, badge: Int? = nil, sound: Sound? = nil, data: [String: JSONValue] = [:],
                apns: APNsOptions) {
        self.init(alert: alert, badge: badge, sound: sound, data: data)
        self.apns = apns
    }
}

extension APNsRoute {
    /// The batch with every unrendered delivery rendered (once per notification). The delivery
    /// engine renders, with every check, before it hands a batch over; this covers callers that
    /// drive a transport directly (tools, tests), whose oversized payloads the transport's own
    /// size check then refuses.
    public static func rendered(_ batch: [Delivery]) -> [Delivery] {
        guard batch.contains(where: { $0.payload == .unrendered }) else { return batch }
        var byNotification: [String: RenderedPayload] = [:]
        return batch.map { d in
            guard d.payload == .unrendered else { return d }
            var d = d
            if let known = byNotification[d.notificationID] { d.payload = known; return d }
            let payload = unchecked(d.content, notificationID: d.notificationID)
            byNotification[d.notificationID] = payload
            d.payload = payload
            return d
        }
    }
}
