import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// Misbehaviour the HTTP/2 simulator can be told to show, each off by default.
///
/// Device-token faults apply to requests that pass every check of ``APNsHTTP2Simulator``'s
/// validator (so a test sees them only for otherwise valid notifications), in this order:
/// ``resetTokens`` and ``unansweredTokens`` (no answer at all), ``unregistered`` and ``expiredTokens``
/// (410 with `timestamp`), ``badDeviceTokens``, ``tokensNotForTopic``,
/// ``tooManyRequests`` / ``requestsPerDeviceLimit`` (429), then the counters
/// ``internalServerErrors`` (500), ``serviceUnavailable`` (503) and ``throttledRequests`` (429).
/// Tokens are compared case-insensitively.
public struct HTTP2Faults: Sendable, Equatable {
    /// Tokens whose streams are reset (`RST_STREAM INTERNAL_ERROR`, at once) instead of answered;
    /// the connection and its other streams carry on.
    public var resetTokens: Set<String> = []
    /// Tokens whose requests are never answered: the stream stays open until the client gives up
    /// on it, while the connection answers everything else.
    public var unansweredTokens: Set<String> = []
    /// Tokens answered 410 `Unregistered`; the value is the `timestamp` reported (Apple: when the
    /// token was last confirmed invalid for the topic).
    public var unregistered: [String: Date] = [:]
    /// Tokens answered 410 `ExpiredToken` ("the device token has expired"), with the `timestamp` reported.
    public var expiredTokens: [String: Date] = [:]
    /// Tokens answered 400 `BadDeviceToken` (as APNs does for a token of the other environment).
    public var badDeviceTokens: Set<String> = []
    /// Tokens answered 400 `DeviceTokenNotForTopic`.
    public var tokensNotForTopic: Set<String> = []
    /// Tokens answered 429 `TooManyRequests` ("too many requests to the same device").
    public var tooManyRequests: Set<String> = []
    /// When set, every device gets 429 `TooManyRequests` after this many accepted notifications.
    public var requestsPerDeviceLimit: Int? = nil
    /// The next N otherwise-accepted requests (over all connections) are answered 500 `InternalServerError`.
    public var internalServerErrors = 0
    /// After those, the next N are answered 503 `ServiceUnavailable`.
    public var serviceUnavailable = 0
    /// After those, the next N are answered 429 `TooManyRequests` (APNs throttling a provider).
    public var throttledRequests = 0
    /// After answering this many requests on a connection, send GOAWAY (`NO_ERROR`, last stream =
    /// the last one answered, debug data `{"reason":"Shutdown"}`), answer nothing more, and close.
    public var goAwayAfterStreams: Int? = nil
    /// After answering this many requests on a connection, close the socket without GOAWAY or TLS
    /// close_notify; later requests on it get no answer.
    public var closeAfterStreams: Int? = nil
    /// Time added before each response (the connection keeps serving other streams meanwhile).
    public var latency: TimeInterval = 0

    /// No faults.
    public init() {}

    /// Whether any per-token fault is set (the simulator skips token lookups otherwise).
    var hasTokenFaults: Bool {
        !resetTokens.isEmpty || !unansweredTokens.isEmpty || !unregistered.isEmpty || !expiredTokens.isEmpty
            || !badDeviceTokens.isEmpty || !tokensNotForTopic.isEmpty || !tooManyRequests.isEmpty
            || requestsPerDeviceLimit != nil
    }

    /// The same faults with every token in lower case.
    var normalized: HTTP2Faults {
        var copy = self
        copy.unregistered = Dictionary(unregistered.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        copy.expiredTokens = Dictionary(expiredTokens.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        copy.badDeviceTokens = Set(badDeviceTokens.map { $0.lowercased() })
        copy.tokensNotForTopic = Set(tokensNotForTopic.map { $0.lowercased() })
        copy.tooManyRequests = Set(tooManyRequests.map { $0.lowercased() })
        copy.resetTokens = Set(resetTokens.map { $0.lowercased() })
        copy.unansweredTokens = Set(unansweredTokens.map { $0.lowercased() })
        return copy
    }

    /// Reads an "unregistered" list: one token per line, optionally followed by whitespace and the
    /// timestamp in milliseconds since 1970 (default: `defaultTime`); `#` starts a comment.
    /// - Throws: ``HTTP2SimulatorError`` naming the file and line of a bad entry.
    public static func readUnregistered(file path: String, defaultTime: Date) throws(HTTP2SimulatorError) -> [String: Date] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw HTTP2SimulatorError("cannot read the unregistered-token list \"\(path)\"; check that the file exists and is readable")
        }
        var result: [String: Date] = [:]
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," || $0 == "\r" })
            guard let token = parts.first else { continue }
            guard token.allSatisfy(\.isHexDigit) else {
                throw HTTP2SimulatorError("\(path):\(n + 1): \"\(token)\" is not a hex device token")
            }
            var time = defaultTime
            if parts.count > 1 {
                guard let ms = Int64(parts[1]) else {
                    throw HTTP2SimulatorError("\(path):\(n + 1): \"\(parts[1])\" is not a timestamp in milliseconds")
                }
                time = Date(millisecondsSince1970: ms)
            }
            result[token.lowercased()] = time
        }
        return result
    }
}

/// A simulator could not be set up or started; the message names the cause and the fix.
public struct HTTP2SimulatorError: Error, CustomStringConvertible, Sendable {
    /// What went wrong and what to do about it.
    public var description: String
    /// An error with that message.
    public init(_ description: String) { self.description = description }
}
