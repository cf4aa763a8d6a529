import FoundationEssentials
import HeraldCore

/// One send the FCM simulator accepted (answered 200), as it arrived.
public struct FCMReceivedMessage: Sendable, Equatable {
    /// Where the message went.
    public enum Target: Sendable, Equatable {
        case token(String), topic(String), condition(String)
    }

    /// When it was answered (the simulator's clock).
    public var time: Date
    public var connectionID: Int
    public var streamID: Int
    /// The project in the request path.
    public var projectID: String
    /// The service account whose access token authorised it.
    public var clientEmail: String
    public var target: Target
    /// `validate_only` was set: checked, answered, not delivered.
    public var validateOnly: Bool
    /// The `name` answered (`projects/p/messages/…`).
    public var name: String
    /// The `message` object as sent.
    public var message: JSONValue
    /// Its size in bytes of compact JSON without the target (what the 4096-byte limit counts).
    public var bytes: Int

    /// The registration token, for a message sent to one.
    public var token: String? { if case .token(let t) = target { return t } else { return nil } }

    /// `message.data`, when every value is a string.
    public var data: [String: String] {
        var out: [String: String] = [:]
        for (k, v) in message["data"]?.objectValue ?? [:] { if let s = v.stringValue { out[k] = s } }
        return out
    }

    /// The JSON Lines record: the message and where it went; never the access token.
    var recordLine: [UInt8] {
        var w = JSONWriter(capacity: 256 + bytes)
        w.object { o in
            o.string("time", time.iso8601)
            o.int("connection", connectionID)
            o.int("stream", streamID)
            o.string("project", projectID)
            o.string("client_email", clientEmail)
            switch target {
            case .token(let t): o.string("token", t)
            case .topic(let t): o.string("topic", t)
            case .condition(let c): o.string("condition", c)
            }
            o.bool("validate_only", validateOnly)
            o.string("name", name)
            o.value("message", message)
        }
        w.raw(UInt8(ascii: "\n"))
        return w.bytes
    }
}

/// Counts of what the FCM simulator saw since it started.
public struct FCMSimulatorCounters: Sendable, Equatable {
    /// Requests to the token endpoint, and access tokens it issued.
    public var tokenRequests = 0
    public var accessTokensIssued = 0
    /// Token-endpoint refusals by OAuth error (`invalid_grant`, …).
    public var tokenRefusals: [String: Int] = [:]
    /// Requests to `messages:send`.
    public var sends = 0
    /// Sends answered 200 (validate-only ones included) and, of them, validate-only.
    public var accepted = 0
    public var validateOnly = 0
    /// Send errors by FcmError code, else status (`UNREGISTERED`, `UNAUTHENTICATED`, `INVALID_ARGUMENT`).
    public var errors: [String: Int] = [:]
    /// Sends left unanswered on purpose.
    public var unanswered = 0

    public init() {}

    /// One line for logs and the CLI's exit summary.
    public var summary: String {
        var parts = ["\(tokenRequests) token requests (\(accessTokensIssued) issued)", "\(sends) sends", "\(accepted) accepted"]
        if validateOnly > 0 { parts.append("\(validateOnly) validate-only") }
        for (k, v) in errors.sorted(by: { $0.key < $1.key }) { parts.append("\(v) \(k)") }
        for (k, v) in tokenRefusals.sorted(by: { $0.key < $1.key }) { parts.append("\(v) token \(k)") }
        if unanswered > 0 { parts.append("\(unanswered) unanswered") }
        return parts.joined(separator: ", ")
    }
}
