import FoundationEssentials
import Glibc
import HeraldCore

/// The iOS fields: into the neutral content and the `apns` override block (Herald's names).
extension GorushNotificationReader {
    struct IOS {
        var alert = Alert()
        var badge: Int?
        var sound: Sound?
        var category: String?
        var threadID: String?
        var collapseID: String?
        var expiration: Int64?
        var apnsID: String?
        /// The `apns` override block (Herald's names).
        var block: [String: JSONValue] = [:]
        /// `production` / `development`: the tokens' APNs environment.
        var environment: String?

        struct Alert {
            var title: String?
            var body: String?
            var subtitle: String?
            var localization = Localization()
        }

        func content(_ common: Common) -> NotificationContent {
            var content = NotificationContent()
            content.title = alert.title ?? common.title
            content.body = alert.body ?? common.message
            content.subtitle = alert.subtitle
            if !alert.localization.isEmpty { content.localization = alert.localization }
            content.badge = badge
            content.sound = sound
            content.data = common.data
            content.category = category
            content.thread = threadID
            content.collapseKey = collapseID
            content.priority = common.priority
            content.expiration = expiration
            content.contentAvailable = common.contentAvailable
            var block = self.block
            if common.mutableContent { block["mutable_content"] = .bool(true) }
            if !block.isEmpty { content.overrides["apns"] = .object(block) }
            return content
        }
    }

    func readIOS() -> IOS {
        var o = IOS()
        if let alert = node.child("alert") {
            if case .object = alert.value {
                o.alert.title = nonEmpty(alert.string("title", nonEmpty: false))
                o.alert.body = nonEmpty(alert.string("body", nonEmpty: false))
                o.alert.subtitle = nonEmpty(alert.string("subtitle", nonEmpty: false))
                o.alert.localization.titleKey = alert.string("title-loc-key")
                o.alert.localization.titleArgs = alert.stringArray("title-loc-args").flatMap { $0.isEmpty ? nil : $0 }
                o.alert.localization.bodyKey = alert.string("loc-key")
                o.alert.localization.bodyArgs = alert.stringArray("loc-args").flatMap { $0.isEmpty ? nil : $0 }
                if let launch = alert.string("launch-image") { o.block["launch_image"] = .string(launch) }
                // Accepted, not sent: Apple no longer reads them (action buttons come from categories,
                // summaries from the app).
                _ = alert.string("action", nonEmpty: false)
                _ = alert.string("action-loc-key", nonEmpty: false)
                _ = alert.string("summary-arg", nonEmpty: false)
                _ = alert.int("summary-arg-count")
            } else {
                alert.error("expected an object with title, body, subtitle, loc-key…, found \(alert.value.typeDescription)")
            }
        }
        if let badge = node.int("badge") {
            // As gorush: a negative badge leaves the badge alone.
            if badge > NotificationRequest.maxBadge { node.error(at: "badge", "must be at most \(NotificationRequest.maxBadge)") } else if badge >= 0 { o.badge = badge }
        }
        o.sound = readSound()
        o.category = node.string("category")
        o.threadID = node.string("thread-id")
        if let c = node.string("collapse_id") {
            // Sent as apns-collapse-id: a control character would end the header early.
            if let problem = FieldLimits.headerValueProblem(c) {
                node.error(at: "collapse_id", problem)
            } else if c.utf8.count > NotificationRequest.maxCollapseKeyBytes {
                node.error(at: "collapse_id", "must be at most \(NotificationRequest.maxCollapseKeyBytes) bytes (Apple's limit), found \(c.utf8.count)")
            } else {
                o.collapseID = c
            }
        }
        if let e = node.child("expiration"), let v = e.asInt {
            if v < 0 { e.error("must be a UNIX time in seconds, or 0 for now-or-never") } else { o.expiration = Int64(v) }
        }
        if let id = node.string("apns_id") {
            if let uuid = UUID(uuidString: id) { o.apnsID = uuid.uuidString.lowercased() } else {
                node.error(at: "apns_id", "expected a canonical UUID such as \"123e4567-e89b-12d3-a456-4266554400a0\", found \"\(id)\"")
            }
        }
        if let t = node.string("push_type") { o.block["push_type"] = .string(t) }
        if let l = node.string("interruption_level") { o.block["interruption_level"] = .string(l) }
        if let r = node.double("relevance-score") { o.block["relevance_score"] = .number(r) }
        readLiveActivity(into: &o.block)
        let production = node.bool("production") ?? false, development = node.bool("development") ?? false
        if production && development {
            node.error(at: "development", "give either \"production\" or \"development\", not both")
        } else if production || development {
            o.environment = production ? "production" : "sandbox"
        }
        return o
    }

    /// gorush's `sound` (a name, or `{"critical": 1, "name", "volume"}`), with the top-level
    /// `name` and `volume`; for iOS, FCM's `apns.payload.aps.sound` when neither is given.
    func readSound() -> Sound? {
        var name: String?
        var critical = false
        var volume: Double?
        let apsSound = readAPNsConfigSound()
        if let s = node.child("sound") ?? apsSound {
            switch s.value {
            case .string(let text): name = text.isEmpty ? nil : text
            case .object:
                name = s.string("name")
                volume = s.double("volume", in: 0...1)
                if let c = s.child("critical") {
                    switch c.value {
                    case .number(let n) where n == 0 || n == 1: critical = n == 1
                    case .bool(let b): critical = b
                    default: c.error("expected 0 or 1, found \(c.value.typeDescription)")
                    }
                }
            default:
                s.error("expected a sound name or {\"critical\": 1, \"name\": …, \"volume\": 0…1}, found \(s.value.typeDescription)")
            }
        }
        if let n = node.string("name") { name = n }
        if let v = node.double("volume", in: 0...1) { volume = v }
        if volume != nil && !critical {
            node.error(at: node.has("volume") ? "volume" : "sound", "a volume applies only to critical sounds: set \"critical\": 1 in \"sound\"")
            return nil
        }
        if critical { return .critical(name: name ?? "default", volume: volume) }
        return name.map(Sound.named)
    }

    /// `apns.payload.aps.sound` of FCM's `apns` object (gorush's README example for iOS); other
    /// keys of `apns` are Android's (an FCM route's) and not read for iOS.
    func readAPNsConfigSound() -> JSONNode? {
        guard let apns = node.child("apns") else { return nil }
        guard case .object(let members) = apns.value else {
            apns.error("expected an object (FCM's ApnsConfig), found \(apns.value.typeDescription)")
            return nil
        }
        apns.allowKeys(Array(members.keys))
        guard node.has("sound") == false, let payload = apns.child("payload"), case .object(let p) = payload.value else { return nil }
        payload.allowKeys(Array(p.keys))
        guard let aps = payload.child("aps"), case .object(let a) = aps.value else { return nil }
        aps.allowKeys(Array(a.keys))
        return aps.child("sound")
    }

    func readLiveActivity(into block: inout [String: JSONValue]) {
        let keys = ["event", "timestamp", "content-state", "stale-date", "dismissal-date", "attributes-type", "attributes"]
        guard keys.contains(where: node.has) else { return }
        var live: [String: JSONValue] = [:]
        if let e = node.string("event") { live["event"] = .string(e) }
        if let t = node.int("timestamp") { live["timestamp"] = .number(Double(t)) }
        for (key, name) in [("content-state", "content_state"), ("attributes", "attributes")] {
            guard let child = node.child(key) else { continue }
            if case .object(let members) = child.value {
                child.allowKeys(Array(members.keys))
                live[name] = child.value
            } else {
                child.error("expected an object (the app's own keys), found \(child.value.typeDescription)")
            }
        }
        if let s = node.int("stale-date"), s > 0 { live["stale_date"] = .number(Double(s)) }
        if let d = node.int("dismissal-date"), d > 0 { live["dismissal_date"] = .number(Double(d)) }
        if let t = node.string("attributes-type") { live["attributes_type"] = .string(t) }
        block["live_activity"] = .object(live)
    }
}
