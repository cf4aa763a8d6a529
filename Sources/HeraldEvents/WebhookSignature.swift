import FoundationEssentials
import Glibc
import HeraldCore
import HeraldCrypto

/// The `Herald-Signature` header, as Stripe signs its webhooks:
/// `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`, with one `v1=` per secret
/// (during a rotation, `[new, old]` gives two).
public enum WebhookSignature {
    /// The header's name.
    public static let header = "Herald-Signature"
    /// The header naming the webhook.
    public static let webhookIDHeader = "Herald-Webhook-Id"
    /// How far from now a receiver should accept `t` (the documented tolerance): 5 minutes.
    public static let tolerance: TimeInterval = 300

    /// The header's value for `body` at `timestamp` (unix seconds).
    public static func sign(_ body: [UInt8], secrets: [Secret], timestamp: Int64) -> String {
        let t = String(timestamp)
        var parts = ["t=\(t)"]
        let message = Array(t.utf8) + [UInt8(ascii: ".")] + body
        for secret in secrets {
            parts.append("v1=" + hex(HMACSHA256.mac(key: Array(secret.value.utf8), message: message)))
        }
        return parts.joined(separator: ",")
    }

    /// Whether `header` signs `body` with `secret` at a `t` within `tolerance` of `now`.
    public static func verify(_ header: String, body: [UInt8], secret: Secret, now: Date, tolerance: TimeInterval = tolerance) -> Bool {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in header.split(separator: ",") {
            let p = part.trimmingWhitespace()
            if p.hasPrefix("t=") { timestamp = Int64(p.dropFirst(2)) } else if p.hasPrefix("v1=") { signatures.append(String(p.dropFirst(3))) }
        }
        guard let timestamp, abs(Double(timestamp) - now.timeIntervalSince1970) <= tolerance else { return false }
        let t = String(timestamp)
        let expected = Array(hex(HMACSHA256.mac(key: Array(secret.value.utf8), message: Array(t.utf8) + [UInt8(ascii: ".")] + body)).utf8)
        return signatures.contains { HMACSHA256.constantTimeEquals(expected, Array($0.utf8)) }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
