import FoundationEssentials

/// One attempt of a request: what hooks see.
public struct HTTP2Attempt: Sendable {
    /// The request as given to ``HTTP2Client/send(_:)``.
    public var request: HTTP2Request
    /// 1 for the first attempt; one more for each resend (a hook's or after a lost connection).
    public var number: Int
    /// How often the hooks answered ``HTTP2Review/resend`` for this request so far.
    public var resends: Int
    /// The headers ``HTTP2RequestHooks/willStart(_:)`` added to this attempt (empty before it is asked).
    public var addedHeaders: [HTTP2Header]

    /// An attempt (the client makes them; public for hooks' tests).
    public init(request: HTTP2Request, number: Int = 1, resends: Int = 0, addedHeaders: [HTTP2Header] = []) {
        self.request = request
        self.number = number
        self.resends = resends
        self.addedHeaders = addedHeaders
    }
}

/// What ``HTTP2RequestHooks/willStart(_:)`` decided.
public enum HTTP2AttemptStart: Sendable {
    /// Send the attempt with these headers added (APNs: `authorization: bearer <JWT>`).
    ///
    /// - Important: return the same array (the same storage) for as long as it does not change:
    ///   the client reuses the encoding it built for an array equal to the last one.
    case send(adding: [HTTP2Header])
    /// Do not send; the request ends with ``HTTP2Result/endedByHooks(_:)`` carrying this verdict.
    case end(any Sendable)
}

/// What ``HTTP2RequestHooks/review(_:of:)`` decided about an answer.
public enum HTTP2Review: Sendable {
    /// The answer is the request's result.
    case accept
    /// Send the request again as a new attempt (``HTTP2RequestHooks/willStart(_:)`` is asked again),
    /// with a new deadline; spends no ``HTTP2ClientConfiguration/connectionRetries``.
    case resend
    /// The request ends with ``HTTP2Result/endedByHooks(_:)`` carrying this verdict.
    case end(any Sendable)
}

/// Per-attempt decisions a caller makes on the client's own thread: APNs chooses the provider
/// token as each attempt starts, and resends once with a newer token after 403 ExpiredProviderToken.
///
/// - Important: called on the client's connection threads; must not block (no I/O, no waiting
///   on locks held across I/O), and must be cheap: it runs for every attempt.
public protocol HTTP2RequestHooks: Sendable {
    /// An attempt is about to be sent (a stream is free for it).
    func willStart(_ attempt: HTTP2Attempt) -> HTTP2AttemptStart
    /// The server answered `attempt` with `response`.
    func review(_ response: HTTP2Response, of attempt: HTTP2Attempt) -> HTTP2Review
}
