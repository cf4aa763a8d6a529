import FoundationEssentials
import Glibc
import HeraldCore

/// Reads one element of gorush's `notifications` into a core notification request for one
/// platform, recording every problem (with its path) in the node's context.
///
/// Each platform reads its own fields, as gorush does: iOS the APNs ones (`badge`, `alert`,
/// `push_type`, …) into the neutral content and the `apns` override block, Android the FCM
/// ones (`notification`, `collapse_key`, `time_to_live`, …) into the neutral content and the
/// `fcm` block; the other platform's fields are type-checked and not used.
struct GorushNotificationReader {
    let node: JSONNode
    let index: Int
    let target: GorushPush.Target

    /// Fields gorush documents that Herald refuses, and why.
    static let refused: [String: String] = {
        var r: [String: String] = [:]
        for key in ["huawei_notification", "huawei_data", "huawei_collapse_key", "huawei_ttl", "app_id", "app_secret", "bi_tag", "fast_app_target"] {
            r[key] = "is a Huawei (HMS) field; Herald has no HMS transport"
        }
        r["condition"] = "FCM condition messages are not supported: Herald sends to device tokens"
        r["url-args"] = "Safari's url-args are not supported"
        r["dry_run"] = "is not supported (Herald would send the message); use `herald send --dry-run` to validate with FCM"
        return r
    }()

    /// Fields accepted and not used: `retry` (Herald retries by `delivery.retry`),
    /// `delay_while_idle` (FCM dropped it).
    static let ignored = ["retry", "delay_while_idle"]

    /// gorush's iOS-only fields.
    static let iosKeys = ["alert", "badge", "category", "thread-id", "collapse_id", "expiration", "apns_id", "push_type",
                          "interruption_level", "relevance-score", "event", "timestamp", "content-state", "stale-date",
                          "dismissal-date", "attributes-type", "attributes", "production", "development", "name", "volume", "apns"]
    /// gorush's Android-only fields (`apns` is FCM's ApnsConfig there).
    static let androidKeys = ["android", "notification", "collapse_key", "time_to_live", "restricted_package_name", "webpush",
                              "fcm_options", "apns"]

    func read() -> GorushPush.Item? {
        let before = node.context.errors.count
        guard case .object = node.value else {
            node.error("expected an object (a notification), found \(node.value.typeDescription)")
            return nil
        }
        for (key, why) in Self.refused where node.has(key) { node.error(at: key, why) }
        _ = node.int("retry")
        _ = node.bool("delay_while_idle")

        let platformNumber = node.int("platform", required: true)
        var platform: Platform?
        if let n = platformNumber {
            switch n {
            case GorushPlatform.ios: platform = .ios
            case GorushPlatform.android: platform = .android
            case GorushPlatform.huawei: node.error(at: "platform", "3 (Huawei) is not served: Herald has no HMS transport; use 1 (iOS) or 2 (Android)")
            default: node.error(at: "platform", "expected 1 (iOS) or 2 (Android), found \(n)")
            }
        }

        var tokens = node.child("tokens").map(readTokens) ?? []
        if let to = node.string("to") { tokens.append(to) }
        let common = readCommon()
        // Each platform reads its own fields; the other's are left alone, as gorush does.
        var ios = IOS(), android = Android()
        switch platform {
        case .ios?:
            ios = readIOS()
            node.allowKeys(Self.androidKeys)
        case .android?:
            android = readAndroid()
            node.allowKeys(Self.iosKeys)
        default:
            node.allowKeys(Self.iosKeys + Self.androidKeys + ["sound"])
        }
        if let topic = node.string("topic") {
            if platform == .android {
                node.error(at: "topic", "FCM topic messages are not supported: Herald sends to device tokens")
            } else if topic != target.topic && !topic.hasPrefix(target.topic + ".") {
                node.error(at: "topic", "app \(target.app) sends with its topic \"\(target.topic)\" (Herald adds the push type's suffix itself), not \"\(topic)\"")
            }
        }
        if tokens.isEmpty && node.context.errors.count == before {
            node.error(at: "tokens", "please provide at least one device token")
        }
        guard node.context.errors.count == before, let platform, let platformNumber else { return nil }

        var request = NotificationRequest(app: target.app, tokens: tokens, content: NotificationContent(), platform: platform)
        // Per platform: one notif_id may name a notification sent to both.
        request.idempotencyKey = common.notifID.map { "gorush:\(platformNumber):\($0)" } ?? (platform == .ios ? ios.apnsID.map { "gorush:apns_id:\($0)" } : nil)
        switch platform {
        case .ios:
            request.content = ios.content(common)
            if let environment = ios.environment { request.attributes["environment"] = environment }
        default:
            request.content = android.content(common, now: target.now)
        }
        if request.content.isEmpty {
            node.error("nothing to send: give message, title, badge, sound, data or content_available")
            return nil
        }
        return GorushPush.Item(index: index, platformNumber: platformNumber, request: request, targets: tokens.count)
    }

    private func readTokens(_ list: JSONNode) -> [String] {
        guard case .array(let items) = list.value else {
            list.error("expected an array of device tokens, found \(list.value.typeDescription)")
            return []
        }
        if items.count > NotificationRequest.maxTargets {
            list.error("at most \(NotificationRequest.maxTargets) tokens per notification, found \(items.count)")
            return []
        }
        var tokens: [String] = []
        for element in list.elements() {
            guard let s = element.asString else { continue }
            if s.isEmpty { element.error("the device token cannot be empty"); continue }
            tokens.append(s)
        }
        return tokens
    }

    // MARK: Fields both platforms read

    struct Common {
        var title: String?
        var message: String?
        var image: String?
        var priority: NotificationPriority?
        var contentAvailable = false
        var mutableContent = false
        /// The raw `sound` (iOS reads it in full, Android a name only).
        var sound: JSONValue?
        var data: [String: JSONValue] = [:]
        var notifID: String?
    }

    private func readCommon() -> Common {
        var c = Common()
        c.title = nonEmpty(node.string("title", nonEmpty: false))
        c.message = nonEmpty(node.string("message", nonEmpty: false))
        c.image = nonEmpty(node.string("image", nonEmpty: false))
        if let p = node.child("priority"), let s = p.asString, !s.isEmpty {
            switch s {
            case "high": c.priority = .high
            case "normal": c.priority = .normal
            default: p.error("expected \"normal\" or \"high\", found \"\(s)\"")
            }
        }
        c.contentAvailable = node.bool("content_available") ?? false
        c.mutableContent = node.bool("mutable_content") ?? false
        c.sound = node.value["sound"]
        if let data = node.child("data") {
            if case .object(let members) = data.value {
                data.allowKeys(Array(members.keys))
                c.data = members
            } else {
                data.error("expected an object (the app's own keys), found \(data.value.typeDescription)")
            }
        }
        if let id = node.string("notif_id") {
            if id.utf8.count > NotificationRequest.maxIdempotencyKeyBytes - 16 {
                node.error(at: "notif_id", "must be at most \(NotificationRequest.maxIdempotencyKeyBytes - 16) bytes, found \(id.utf8.count)")
            } else {
                c.notifID = id
            }
        }
        return c
    }

    private func nonEmpty(_ s: String?) -> String? { s?.isEmpty == false ? s : nil }

    // MARK: iOS

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

    private func readIOS() -> IOS {
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
            if c.utf8.count > NotificationRequest.maxCollapseKeyBytes {
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
    private func readSound() -> Sound? {
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
    private func readAPNsConfigSound() -> JSONNode? {
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

    private func readLiveActivity(into block: inout [String: JSONValue]) {
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

    // MARK: Android

    struct Android {
        var title: String?
        var body: String?
        var image: String?
        var sound: String?
        var localization = Localization()
        var collapseKey: String?
        var timeToLive: Int?
        /// The `fcm` override block (FCM v1's names).
        var block: [String: JSONValue] = [:]

        func content(_ common: Common, now: Date) -> NotificationContent {
            var content = NotificationContent()
            content.title = common.title ?? title
            content.body = common.message ?? body
            content.imageURL = common.image ?? image
            if !localization.isEmpty { content.localization = localization }
            if let s = common.sound?.stringValue, !s.isEmpty { content.sound = .named(s) } else { content.sound = sound.map(Sound.named) }
            content.data = common.data
            content.collapseKey = collapseKey
            content.priority = common.priority
            content.contentAvailable = common.contentAvailable
            if let ttl = timeToLive { content.expiration = ttl == 0 ? 0 : Int64(now.timeIntervalSince1970.rounded(.down)) + Int64(ttl) }
            if !block.isEmpty { content.overrides["fcm"] = .object(block) }
            return content
        }
    }

    private func readAndroid() -> Android {
        var o = Android()
        if let s = node.child("sound"), s.value.stringValue == nil, s.value.objectValue == nil {
            s.error("expected a sound name, found \(s.value.typeDescription)")
        }
        var android: [String: JSONValue] = [:]
        if let a = node.child("android") {
            if case .object(let members) = a.value {
                a.allowKeys(Array(members.keys))
                android = members
            } else {
                a.error("expected an object (FCM's AndroidConfig), found \(a.value.typeDescription)")
            }
        }
        var androidNotification = android["notification"]?.objectValue ?? [:]
        if let n = node.child("notification") {
            if case .object = n.value {
                o.title = nonEmpty(n.string("title", nonEmpty: false))
                o.body = nonEmpty(n.string("body", nonEmpty: false))
                o.image = n.string("image")
                o.sound = n.string("sound")
                o.localization.titleKey = n.string("title_loc_key")
                o.localization.titleArgs = n.stringArray("title_loc_args").flatMap { $0.isEmpty ? nil : $0 }
                o.localization.bodyKey = n.string("body_loc_key")
                o.localization.bodyArgs = n.stringArray("body_loc_args").flatMap { $0.isEmpty ? nil : $0 }
                for key in ["icon", "tag", "color", "click_action", "channel_id"] {
                    if let v = n.string(key), androidNotification[key] == nil { androidNotification[key] = .string(v) }
                }
            } else {
                n.error("expected an object with title, body, icon, color, tag, click_action…, found \(n.value.typeDescription)")
            }
        }
        if !androidNotification.isEmpty { android["notification"] = .object(androidNotification) }
        if let c = node.string("collapse_key") { o.collapseKey = c }
        if let t = node.int("time_to_live", in: 0...2_419_200) { o.timeToLive = t }
        if let r = node.string("restricted_package_name"), android["restricted_package_name"] == nil {
            android["restricted_package_name"] = .string(r)
        }
        if !android.isEmpty { o.block["android"] = .object(android) }
        for key in ["webpush", "fcm_options"] {
            guard let child = node.child(key) else { continue }
            if case .object(let members) = child.value {
                child.allowKeys(Array(members.keys))
                o.block[key] = child.value
            } else {
                child.error("expected an object, found \(child.value.typeDescription)")
            }
        }
        if let apns = node.child("apns") {
            if case .object(let members) = apns.value {
                apns.allowKeys(Array(members.keys))
                o.block["apns"] = apns.value
            } else {
                apns.error("expected an object (FCM's ApnsConfig), found \(apns.value.typeDescription)")
            }
        }
        return o
    }
}
