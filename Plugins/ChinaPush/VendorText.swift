import FoundationEssentials
import HeraldCore

/// Length rules China's vendors apply to titles and bodies, and peer text in reasons.
public enum VendorText {
    /// Characters as Xiaomi, OPPO and Huawei count them (Unicode scalars: a Chinese character is one).
    public static func characters(_ s: String) -> Int { s.unicodeScalars.count }

    /// Characters as vivo counts them: a character outside ASCII (Chinese) counts 2.
    public static func weighted(_ s: String) -> Int { s.unicodeScalars.reduce(0) { $0 + ($1.isASCII ? 1 : 2) } }

    /// Throws a ``ContentProblem`` naming `field` when `text` is longer than `limit` as `count` counts it.
    public static func check(_ text: String?, field: String, limit: Int, vendor: String, weighted isWeighted: Bool = false) throws(ContentProblem) {
        guard let text else { return }
        let n = isWeighted ? weighted(text) : characters(text)
        if n > limit {
            throw ContentProblem(field: field, "\(vendor) takes at most \(limit) characters\(isWeighted ? " (a Chinese character counts 2)" : ""), found \(n)")
        }
    }

    /// At most 300 characters of a peer's text, control characters replaced, so a reason stays one line.
    public static func clip(_ text: String) -> String {
        var out = String(text.unicodeScalars.prefix(300).map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
        if text.unicodeScalars.count > 300 { out += "…" }
        return out
    }

    /// A positive notify id (1…2^31−1) from a collapse key, the same on every run (FNV-1a), so
    /// notifications with one key replace each other on the phone.
    public static func notifyID(_ collapseKey: String, max: UInt32 = 0x7FFF_FFFF) -> Int {
        var h: UInt32 = 2_166_136_261
        for b in collapseKey.utf8 { h = (h ^ UInt32(b)) &* 16_777_619 }
        return Int(h % max) + 1
    }
}

/// The title and body a vendor notification shows, where every vendor requires both.
public enum VendorVisibleText {
    /// Whether the vendor gets a data message (HMS's data, Xiaomi's pass-through): the
    /// notification asks for it (`content_available`), or it has data and nothing to show, as
    /// FCM and APNs treat such a notification.
    public static func isDataOnly(_ content: NotificationContent) -> Bool {
        content.contentAvailable || (of(content, defaultTitle: nil) == nil && !content.data.isEmpty)
    }

    /// The notification's title and body; a missing title is `defaultTitle` (the route's, usually
    /// the app's name) or else the body, and a missing body is the title. `nil` when the
    /// notification has neither (a data message, or one that must be refused).
    public static func of(_ content: NotificationContent, defaultTitle: String?) -> (title: String, body: String)? {
        let title = content.title.flatMap { $0.isEmpty ? nil : $0 }
        let body = content.body.flatMap { $0.isEmpty ? nil : $0 }
        guard let text = title ?? body else { return nil }
        return (title ?? defaultTitle ?? text, body ?? text)
    }
}
