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
        let listed = tokens.count
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
        return GorushPush.Item(index: index, platformNumber: platformNumber, request: request, targets: tokens.count,
                               notifID: common.notifID, listedTokens: listed)
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

    func nonEmpty(_ s: String?) -> String? { s?.isEmpty == false ? s : nil }
}
