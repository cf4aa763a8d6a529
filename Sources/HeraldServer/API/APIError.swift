import HeraldCore

/// An error answer of the API: `{"error": {"code", "message", "field"?}}` with its status.
public struct APIError: Error, Sendable, Equatable {
    public var status: Int
    /// A stable, machine-readable code (`invalid_request`, `unauthorized`, `queue_full`…).
    public var code: String
    /// What was wrong and what to do; never contains a secret.
    public var message: String
    /// The JSON path (or query argument, or path part) the error is about.
    public var field: String?
    /// Seconds for `Retry-After` (429 and 503).
    public var retryAfter: Int?
    /// Extra headers (`Allow` for 405, `WWW-Authenticate` for 401).
    public var headers: [String: String]

    public init(status: Int, code: String, message: String, field: String? = nil, retryAfter: Int? = nil,
                headers: [String: String] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retryAfter = retryAfter
        self.headers = headers
    }

    static func invalid(_ field: String?, _ message: String) -> APIError {
        APIError(status: 400, code: "invalid_request", message: message, field: field)
    }

    static func notFound(_ message: String) -> APIError { APIError(status: 404, code: "not_found", message: message) }

    static func unavailable(_ code: String, _ message: String, retryAfter: Int) -> APIError {
        APIError(status: 503, code: code, message: message, retryAfter: retryAfter)
    }

    /// The daemon is stopping and did nothing with the request: safe to send again elsewhere.
    static var shuttingDown: APIError { unavailable("shutting_down", "the server is shutting down; nothing was stored", retryAfter: 1) }

    /// The HTTP response carrying this error.
    public var response: HTTPResponse {
        var extra: [(String, String)] = headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        if let retryAfter { extra.append(("Retry-After", String(retryAfter))) }
        return HTTPResponse.json(status, headers: extra) { o in
            o.object("error") { e in
                e.string("code", code)
                e.string("message", message)
                e.string("field", field)
            }
        }
    }
}
