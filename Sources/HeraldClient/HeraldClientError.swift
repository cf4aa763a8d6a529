/// Why the client could not connect, read, acknowledge or load its state. Messages never carry
/// the client token.
public enum HeraldClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Herald refused the client token (401 `invalid_client_token`: expired, forged, another
    /// app, or a device of another user); the client asks its token provider for a new one.
    case unauthorized(String)
    /// Herald answered with an error status: the API's `error.code` and `error.message`, and
    /// `Retry-After` in seconds when sent.
    case http(status: Int, code: String?, message: String, retryAfter: Int?)
    /// The connection failed or broke (refused, timed out, reset, the stream ended).
    case transport(String)
    /// An event whose `data:` is not a notification (names the field).
    case invalidEvent(String)
    /// The token provider threw.
    case tokenProvider(String)
    /// The store could not load or save the client's state.
    case store(String)
    /// Anything else.
    case unknown(String)

    /// A sentence naming what failed (no secret in it).
    public var description: String {
        switch self {
        case .unauthorized(let m): return "Herald refused the client token: \(m)"
        case .http(let status, let code, let message, _): return "Herald answered \(status)\(code.map { " \($0)" } ?? ""): \(message)"
        case .transport(let m): return "connection to Herald failed: \(m)"
        case .invalidEvent(let m): return "invalid notification event: \(m)"
        case .tokenProvider(let m): return "the client token provider failed: \(m)"
        case .store(let m): return "client state store: \(m)"
        case .unknown(let m): return m
        }
    }
}
