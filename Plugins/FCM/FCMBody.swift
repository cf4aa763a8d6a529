import FoundationEssentials
import HeraldCore

/// The request body for one device: `{"message":{"token":…,<the rendered message>}}`, with
/// `validate_only` and the `android.ttl` left for send time (see ``FCMRenderer``).
enum FCMBody {
    /// The longest ttl FCM keeps a message (28 days).
    static let maxTTL: Int64 = 2_419_200

    static func make(_ payload: RenderedPayload, token: String, validateOnly: Bool, now: Date) -> [UInt8] {
        var w = JSONWriter(capacity: payload.body.count + token.utf8.count + 64)
        w.raw(validateOnly ? #"{"validate_only":true,"message":{"token":"# : #"{"message":{"token":"#)
        w.string(token)
        var body = payload.body[...]
        if let mode = payload.headers[FCMRenderer.Header.ttl], let expiration = payload.expiration, body.count >= 2 {
            let seconds = expiration == 0 ? 0 : min(maxTTL, max(0, expiration - Int64(now.timeIntervalSince1970)))
            body = body.dropLast(2)  // the android object's and the message's closing braces
            var tail = Array((mode == "members" ? "," : "").utf8)
            tail += Array(#""ttl":"\#(seconds)s"}}"#.utf8)
            w.raw(UInt8(ascii: ","))
            w.rawJSON(Array(body.dropFirst()))
            w.rawJSON(tail)
        } else if body.count > 2 {
            w.raw(UInt8(ascii: ","))
            w.rawJSON(Array(body.dropFirst()))
        } else {
            w.raw(UInt8(ascii: "}"))
        }
        w.raw(UInt8(ascii: "}"))
        return w.bytes
    }
}
