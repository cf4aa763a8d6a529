import HeraldCore

/// How ``FCMSimulator`` misbehaves on purpose, in the style of the APNs simulators' faults.
///
/// Token faults name registration tokens; counted faults apply to the next N sends that pass
/// every check (counted over all connections), in this order: ``unauthenticatedSends`` (before
/// the access token is even checked), the token faults, ``quotaExceeded``, ``internalErrors``,
/// ``unavailable``. ``latency`` delays every answer of the send endpoint.
public struct FCMFaults: Sendable, Equatable {
    /// Tokens answered 404 NOT_FOUND with FcmError `UNREGISTERED`.
    public var unregisteredTokens: Set<String> = []
    /// Tokens answered 400 INVALID_ARGUMENT "The registration token is not a valid FCM registration token".
    public var invalidTokens: Set<String> = []
    /// Tokens answered 403 PERMISSION_DENIED with FcmError `SENDER_ID_MISMATCH`.
    public var senderMismatchTokens: Set<String> = []
    /// Tokens answered 401 with FcmError `THIRD_PARTY_AUTH_ERROR` (APNs or Web Push refused FCM).
    public var thirdPartyAuthErrorTokens: Set<String> = []
    /// Tokens whose sends are never answered (the stream stays open).
    public var unansweredTokens: Set<String> = []
    /// The next N sends get 401 UNAUTHENTICATED, whatever their access token.
    public var unauthenticatedSends = 0
    /// The next N valid sends get 429 RESOURCE_EXHAUSTED with FcmError `QUOTA_EXCEEDED`.
    public var quotaExceeded = 0
    /// `Retry-After` seconds on the 429s; `nil` sends none.
    public var quotaRetryAfter: Int? = nil
    /// The next N valid sends get 500 INTERNAL.
    public var internalErrors = 0
    /// The next N valid sends get 503 UNAVAILABLE.
    public var unavailable = 0
    /// `Retry-After` seconds on the 500s and 503s; `nil` sends none.
    public var serverErrorRetryAfter: Int? = nil
    /// Seconds to hold back every answer of the send endpoint (other streams go on meanwhile).
    public var latency: Double = 0
    /// The token endpoint answers every assertion 400 `invalid_grant` (a revoked or deleted key).
    public var invalidGrant = false
    /// The next N token requests get 503 (Google's token endpoint unavailable).
    public var tokenEndpointUnavailable = 0

    public init() {}

    /// Whether any fault is set.
    public var isEmpty: Bool { self == FCMFaults() }
}
