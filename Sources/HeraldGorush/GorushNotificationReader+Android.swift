import FoundationEssentials
import Glibc
import HeraldCore

/// The Android fields: into the neutral content and the `fcm` override block (FCM v1's names).
extension GorushNotificationReader {
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

    func readAndroid() -> Android {
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
        if let c = node.string("collapse_key") {
            // The neutral collapse key, which other routes send as a header (APNs, Web Push's Topic).
            if let problem = FieldLimits.headerValueProblem(c) { node.error(at: "collapse_key", problem) } else { o.collapseKey = c }
        }
        if let t = node.int("time_to_live", in: 0...2_419_200) { o.timeToLive = t }
        if let r = node.string("restricted_package_name"), android["restricted_package_name"] == nil {
            android["restricted_package_name"] = .string(r)
        }
        if !android.isEmpty { o.block["android"] = .object(android) }
        for key in ["webpush", "fcm_options"] {
            guard let child = node.child(key) else { continue }
            if case .object(let members) = child.value {
                child.allowKeys(Array(members.keys))
                checkHeaderValues(child)
                o.block[key] = child.value
            } else {
                child.error("expected an object, found \(child.value.typeDescription)")
            }
        }
        if let apns = node.child("apns") {
            if case .object(let members) = apns.value {
                apns.allowKeys(Array(members.keys))
                checkHeaderValues(apns)
                o.block["apns"] = apns.value
            } else {
                apns.error("expected an object (FCM's ApnsConfig), found \(apns.value.typeDescription)")
            }
        }
        return o
    }

    /// The `headers` of an `apns` or `webpush` object, which FCM sends on as headers: a value with
    /// a control character is refused naming it (`notifications[0].webpush.headers.Topic`).
    private func checkHeaderValues(_ object: JSONNode) {
        // Read from the value: the object's keys are FCM's, passed on unread.
        guard case .object(let o) = object.value, case .object(let members)? = o["headers"] else { return }
        for name in members.keys.sorted() {
            if case .string(let value) = members[name]!, let problem = FieldLimits.headerValueProblem(value) {
                object.context.error("\(object.path).headers.\(name)", problem)
            }
        }
    }
}
