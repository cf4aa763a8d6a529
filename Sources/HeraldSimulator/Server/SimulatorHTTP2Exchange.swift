import FoundationEssentials

/// One header field (name in lower case, as HTTP/2 requires).
public struct SimulatorHTTP2Header: Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    public var description: String { "\(name): \(value)" }
}

/// A complete request as ``SimulatorHTTP2Server`` hands it to its handler: the pseudo-headers,
/// the regular headers in arrival order, and the whole body.
public struct SimulatorHTTP2Request: Sendable {
    /// `:method` (`POST`, `GET`…).
    public var method: String
    /// `:path`, with its query (`/v1/projects/p/messages:send?x=1`).
    public var path: String
    /// `:authority` (`127.0.0.1:8443`); empty when the client sent none.
    public var authority: String
    /// `:scheme` (`https`, or `http` over cleartext h2c).
    public var scheme: String
    /// The regular header fields (no pseudo-headers), names in lower case, in arrival order.
    public var headers: [SimulatorHTTP2Header]
    /// The request body (DATA frames, concatenated).
    public var body: [UInt8]
    /// Which connection (1, 2, … in accept order) and stream it came on.
    public var connectionID: Int
    public var streamID: Int32

    public init(method: String, path: String, authority: String = "", scheme: String = "https",
                headers: [SimulatorHTTP2Header] = [], body: [UInt8] = [], connectionID: Int = 0, streamID: Int32 = 0) {
        self.method = method
        self.path = path
        self.authority = authority
        self.scheme = scheme
        self.headers = headers
        self.body = body
        self.connectionID = connectionID
        self.streamID = streamID
    }

    /// The first value of header `name` (case-insensitive), or `nil`.
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name == lower }?.value
    }

    /// Every value of header `name` (case-insensitive), in arrival order.
    public func headerValues(_ name: String) -> [String] {
        let lower = name.lowercased()
        return headers.filter { $0.name == lower }.map(\.value)
    }

    /// The path without its query string.
    public var pathWithoutQuery: String {
        guard let q = path.firstIndex(of: "?") else { return path }
        return String(path[..<q])
    }

    /// The body as UTF-8 text (invalid sequences replaced).
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// What ``SimulatorHTTP2Server`` does with a request: answer it (after an optional delay), reset
/// its stream, or leave it unanswered.
public struct SimulatorHTTP2Response: Sendable {
    /// How the stream ends.
    public enum Action: Sendable, Equatable {
        /// HEADERS (and DATA when there is a body): the normal case.
        case respond
        /// RST_STREAM with INTERNAL_ERROR and no answer (a server that failed mid-request).
        case resetStream
        /// Nothing at all: the stream stays open until the client gives up or the connection ends.
        case noAnswer
    }

    /// The `:status` (100…599).
    public var status: Int
    /// Response headers; names are sent in lower case. Give no `content-length`: the server adds it.
    public var headers: [SimulatorHTTP2Header]
    public var body: [UInt8]
    /// Seconds to hold the answer back (a latency fault). Other streams on the same connection
    /// are read and answered meanwhile; 0 answers at once.
    public var delay: Double
    public var action: Action

    public init(status: Int, headers: [SimulatorHTTP2Header] = [], body: [UInt8] = [], delay: Double = 0,
                action: Action = .respond) {
        self.status = status
        self.headers = headers
        self.body = body
        self.delay = delay
        self.action = action
    }

    /// A response with a JSON body and `content-type: application/json; charset=UTF-8`.
    public static func json(_ status: Int, _ text: String, headers: [SimulatorHTTP2Header] = []) -> SimulatorHTTP2Response {
        SimulatorHTTP2Response(status: status,
                               headers: [SimulatorHTTP2Header("content-type", "application/json; charset=UTF-8")] + headers,
                               body: Array(text.utf8))
    }
}

/// Why ``SimulatorHTTP2Server`` could not be set up or started; the message names the cause and the fix.
public struct SimulatorHTTP2ServerError: Error, CustomStringConvertible, Sendable, Equatable {
    public var description: String
    public init(_ description: String) { self.description = description }
    init(_ error: SimulatorSetupError) { self.init(error.description) }
}
