internal import CCurl
import FoundationEssentials
import Glibc

/// A server's answer to one request.
public struct HTTP2Response: Sendable {
    /// The HTTP status (`:status`).
    public var status: Int
    /// The response headers (lowercase names; `:status` excluded).
    public var headers: [HTTP2Header]
    /// The body (the first 64 KiB).
    public var body: [UInt8]
    /// When the answer arrived (the client's clock), for ``retryAfter`` given as an HTTP-date.
    public var receivedAt: Date
    /// How many attempts the request took (1: answered the first time).
    public var attempts: Int

    /// The most body bytes kept.
    static let bodyLimit = 64 * 1024

    /// An answer.
    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = [], receivedAt: Date = Date(), attempts: Int = 1) {
        self.status = status
        self.headers = headers
        self.body = body
        self.receivedAt = receivedAt
        self.attempts = attempts
    }

    /// The value of the first header named `name` (any case).
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name == wanted }?.value
    }

    /// `Retry-After` in seconds from ``receivedAt``: delay-seconds or an HTTP-date (RFC 9110 §10.2.3);
    /// `nil` when absent or unreadable. A date in the past gives 0.
    public var retryAfter: TimeInterval? {
        guard let raw = header("retry-after") else { return nil }
        let text = String(raw.drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())
        guard !text.isEmpty else { return nil }
        if text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) { return TimeInterval(text) }
        let seconds = curl_getdate(text, nil)
        guard seconds >= 0 else { return nil }
        return max(0, TimeInterval(seconds) - receivedAt.timeIntervalSince1970)
    }
}

/// How one request ended.
public enum HTTP2Result: Sendable {
    /// The server answered (any status).
    case answered(HTTP2Response)
    /// No answer: the connection was lost beyond ``HTTP2ClientConfiguration/connectionRetries``,
    /// the deadline passed, or the client stopped. Sending it again later may work; the server
    /// may have processed it.
    case noAnswer(reason: String)
    /// Never sent as it is, and sending it again unchanged fails the same way
    /// (``HTTP2ClientError/invalidRequest(_:)``, ``HTTP2ClientError/noHTTP2(_:)``).
    case failed(HTTP2ClientError)
    /// The hooks ended the request with their own verdict (``HTTP2AttemptStart/end(_:)``, ``HTTP2Review/end(_:)``).
    case endedByHooks(any Sendable)
}
