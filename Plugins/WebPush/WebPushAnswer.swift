import FoundationEssentials
import HeraldCore

/// Why a push service did not take a message: the answers of RFC 8030 and what browsers'
/// services add, with the service's own words kept.
public enum WebPushFailure: Sendable, Equatable, CustomStringConvertible {
    /// 404: the subscription does not exist (FCM's answer for a stale one).
    case notFound(detail: String)
    /// 410: the subscription expired or was unsubscribed (Mozilla, FCM, Apple).
    case gone(detail: String)
    /// 413: the encrypted body is larger than the service takes.
    case payloadTooLarge(detail: String)
    /// 400: the service refused the request; `detail` is its reason.
    case badRequest(detail: String)
    /// 401 or 403: the service refused the VAPID credentials for this subscription.
    case vapidRefused(status: Int, detail: String)
    /// 429: too many requests.
    case tooManyRequests(detail: String)
    /// 5xx: the service failed or is unavailable.
    case serviceError(status: Int, detail: String)
    /// No answer (connection refused or lost, the deadline passed).
    case noAnswer(String)
    /// Any other status: the status and the service's text.
    case unknown(String)

    public var description: String {
        func with(_ head: String, _ detail: String) -> String { detail.isEmpty ? head : "\(head): \(detail)" }
        switch self {
        case .notFound(let d): return with("404 subscription not found", d)
        case .gone(let d): return with("410 subscription gone", d)
        case .payloadTooLarge(let d): return with("413 payload too large", d)
        case .badRequest(let d): return with("400 bad request", d)
        case .vapidRefused(let s, let d): return with("\(s) VAPID credentials refused", d)
        case .tooManyRequests(let d): return with("429 too many requests", d)
        case .serviceError(let s, let d): return with("\(s) push service error", d)
        case .noAnswer(let why): return "no answer: \(why)"
        case .unknown(let text): return text
        }
    }

    /// The failure a status means (`nil` for 2xx).
    public init?(status: Int, body: [UInt8]) {
        let detail = Self.detail(body)
        switch status {
        case 200..<300: return nil
        case 404: self = .notFound(detail: detail)
        case 410: self = .gone(detail: detail)
        case 413: self = .payloadTooLarge(detail: detail)
        case 400: self = .badRequest(detail: detail)
        case 401, 403: self = .vapidRefused(status: status, detail: detail)
        case 429: self = .tooManyRequests(detail: detail)
        case 500..<600: self = .serviceError(status: status, detail: detail)
        default: self = .unknown(detail.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(detail)")
        }
    }

    /// Whether trying again later may succeed (429, 5xx, no answer).
    public var isTemporary: Bool {
        switch self {
        case .tooManyRequests, .serviceError, .noAnswer: return true
        default: return false
        }
    }

    /// The service's reason from its body: Apple's `{"reason"}`, Mozilla's `{"message"}`, FCM's
    /// `{"error": {"message"}}`, else the text; printable, at most 200 characters.
    static func detail(_ body: [UInt8]) -> String {
        guard !body.isEmpty else { return "" }
        var text: String? = nil
        if let json = try? JSONValue.parse(body) {
            text = json["reason"]?.stringValue ?? json["message"]?.stringValue ?? json["error"]?["message"]?.stringValue
                ?? json["error"]?.stringValue
        }
        let raw = text ?? String(decoding: body.prefix(400), as: UTF8.self)
        let cleaned = String(String.UnicodeScalarView(raw.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : $0 }))
        let trimmed = cleaned.trimmingWhitespace()
        return trimmed.count > 200 ? String(trimmed.prefix(200)) + "…" : trimmed
    }
}
