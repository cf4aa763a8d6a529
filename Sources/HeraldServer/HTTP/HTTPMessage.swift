import HeraldCore

/// One HTTP request as the API's handlers see it: the body is complete and size-checked.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, still percent-encoded (`/v1/users/al%20ice/devices`); see ``pathSegments``.
    public var path: String
    /// Query arguments, percent-decoded. A repeated name keeps its last value.
    public var query: [String: String]
    /// Every request header, by lower-case name (a repeated header keeps its last value).
    public var headers: [String: String]
    public var body: [UInt8]
    /// The body was larger than the limit (and was dropped).
    public var bodyTooLarge: Bool
    /// The address of the connection's peer (`nil` when not an IP socket, or in tests).
    public var peer: IPAddress?

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
                body: [UInt8] = [], bodyTooLarge: Bool = false, peer: IPAddress? = nil) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.peer = peer
    }

    /// The path split at `/`, each segment percent-decoded (`nil` for a malformed escape).
    public var pathSegments: [String]? {
        var result: [String] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if !part.utf8.contains(UInt8(ascii: "%")) {
                result.append(String(part))
                continue
            }
            guard let decoded = PercentEncoding.decode(part) else { return nil }
            result.append(decoded)
        }
        return result
    }
}

/// An HTTP response: status, headers and body (or a stream, see ``stream(status:headers:heartbeat:closing:open:)``).
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Set for a streaming response (`body` is then unused).
    public var streamBody: HTTPStreamBody?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response.
    public static func json(_ status: Int, _ body: [UInt8], headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// A JSON response built with a writer.
    public static func json(_ status: Int, headers: [(String, String)] = [], _ build: (inout ObjectWriter) -> Void) -> HTTPResponse {
        var w = JSONWriter(capacity: 128)
        w.object(build)
        w.raw(UInt8(ascii: "\n"))
        return json(status, w.bytes, headers: headers)
    }

    /// The value of a header (case-insensitive name).
    public func header(_ name: String) -> String? {
        headers.last { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// `%XX` decoding for paths and query strings (RFC 3986; `+` stays `+` in paths, is a space in queries).
enum PercentEncoding {
    static func decode<S: StringProtocol>(_ text: S, plusIsSpace: Bool = false) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let c = iterator.next() {
            if c == UInt8(ascii: "%") {
                guard let h = iterator.next().flatMap(hex), let l = iterator.next().flatMap(hex) else { return nil }
                bytes.append(h << 4 | l)
            } else if plusIsSpace && c == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(c)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
