/// What went wrong in an ``HTTP2Client``. Messages never hold secrets (proxy credentials are redacted).
public enum HTTP2ClientError: Error, Sendable, CustomStringConvertible, Equatable {
    /// A setting is out of range, or the engine does not have the option.
    case configuration(String)
    /// The TLS context could not be made (CA file, client identity).
    case tls(String)
    /// The proxy URL is not one the engine can use.
    case unsupportedProxy(String)
    /// A system resource could not be had (epoll, eventfd, a libcurl or nghttp2 handle).
    case resources(String)
    /// ``HTTP2Client/send(_:)`` before ``HTTP2Client/start()``, or after ``HTTP2Client/stop(deadline:)``.
    case notRunning
    /// The request cannot be sent as it is: a field HTTP/2 does not allow (the client's own
    /// check, RFC 9113 §8.2: a programming error upstream), or nghttp2 or libcurl refused its
    /// headers. Never sent; the message names the header, never its value.
    case invalidRequest(String)
    /// The server does not speak HTTP/2 (its ALPN offered no `h2`) and HTTP/1.1 was not allowed.
    case noHTTP2(String)
    /// Anything else, in the library's words.
    case unknown(String)

    public var description: String {
        switch self {
        case .configuration(let m): return "HTTP/2 client configuration: \(m)"
        case .tls(let m): return "cannot set up TLS: \(m)"
        case .unsupportedProxy(let m): return m
        case .resources(let m): return m
        case .notRunning: return "the HTTP/2 client is not running"
        case .invalidRequest(let m): return "cannot send the request: \(m)"
        case .noHTTP2(let origin): return "\(origin) did not negotiate HTTP/2"
        case .unknown(let m): return m
        }
    }
}
