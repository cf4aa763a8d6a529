import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// What a provider token (JWT) says once its form, algorithm, key and signature were checked.
public struct ProviderTokenClaims: Sendable, Equatable {
    /// The `kid` header: the key that signed the token.
    public var keyID: String
    /// The `iss` claim: the team.
    public var teamID: String
    /// The `iat` claim.
    public var issuedAt: Date

    /// Claims as a verified token carries them.
    public init(keyID: String, teamID: String, issuedAt: Date) {
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
    }
}

/// Checks a JWT's form and signature: `nil` means APNs would answer `InvalidProviderToken`.
///
/// The simulator's real checker (``HTTP2ES256TokenVerifier``) uses HeraldCrypto; tests of the
/// connection rules use a fake.
protocol HTTP2ProviderTokenVerifying: Sendable {
    func verify(_ jwt: String) -> ProviderTokenClaims?
}

/// The token-auth state of one connection (APNs binds a token, key and team to a connection).
struct HTTP2TokenAuthState: Sendable {
    /// The bytes of the token in force on this connection (empty before the first valid one).
    var token: [UInt8] = []
    /// When that token was installed (first accepted) on this connection.
    var installedAt: Date? = nil
    /// What that token says.
    var claims: ProviderTokenClaims? = nil

    var isAuthenticated: Bool { claims != nil }
}

/// APNs' provider-token rules, with an injected clock.
///
/// - No `authorization: bearer …` header (or an empty token) → 403 `MissingProviderToken`.
/// - Malformed, not ES256, unknown key, wrong team for the key, or bad signature → 403 `InvalidProviderToken`.
/// - A new token with another key id than the one in force on the connection → 403 `UnrelatedKeyIdInToken`.
/// - `iat` more than ``maxTokenAge`` ago (Apple: one hour) → 403 `ExpiredProviderToken`; this applies
///   to the token in force too, on every request.
/// - A new token on a connection less than ``updateInterval`` (Apple: 20 minutes) after the
///   previous one was installed → 429 `TooManyProviderTokenUpdates`, and the old token stays.
struct HTTP2TokenAuthenticator: Sendable {
    let verifier: any HTTP2ProviderTokenVerifying
    let clock: any WallClock
    var maxTokenAge: TimeInterval = 3600
    var updateInterval: TimeInterval = 1200

    /// Checks the `authorization` value (`nil` when absent); updates `state` when a new token is installed.
    /// - Returns: `nil` when the request is authenticated, else the reason to refuse it.
    func authenticate(_ header: UnsafeRawBufferPointer?, state: inout HTTP2TokenAuthState) -> APNsHTTP2Reason? {
        guard let header, let token = Self.bearerToken(header) else { return .missingProviderToken }
        let now = clock.now
        // The token in force: compare bytes, no parsing.
        if let claims = state.claims, token.count == state.token.count,
           state.token.withUnsafeBytes({ memcmp($0.baseAddress!, token.baseAddress!, token.count) == 0 }) {
            return now.timeIntervalSince(claims.issuedAt) > maxTokenAge ? .expiredProviderToken : nil
        }
        guard let claims = verifier.verify(String(decoding: token, as: UTF8.self)) else { return .invalidProviderToken }
        if let current = state.claims, current.keyID != claims.keyID { return .unrelatedKeyIdInToken }
        if now.timeIntervalSince(claims.issuedAt) > maxTokenAge { return .expiredProviderToken }
        if let installedAt = state.installedAt, now.timeIntervalSince(installedAt) < updateInterval {
            return .tooManyProviderTokenUpdates
        }
        state.token = Array(token)
        state.installedAt = now
        state.claims = claims
        return nil
    }

    /// The token after `bearer ` (scheme case-insensitive, spaces trimmed), or `nil` when there is none.
    static func bearerToken(_ header: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        let scheme: StaticString = "bearer"
        let n = scheme.utf8CodeUnitCount
        guard header.count > n else { return nil }
        for i in 0..<n where header[i] | 0x20 != scheme.utf8Start[i] { return nil }
        guard header[n] == UInt8(ascii: " ") || header[n] == UInt8(ascii: "\t") else { return nil }
        var start = n, end = header.count
        while start < end, header[start] == UInt8(ascii: " ") || header[start] == UInt8(ascii: "\t") { start += 1 }
        while end > start, header[end - 1] == UInt8(ascii: " ") || header[end - 1] == UInt8(ascii: "\t") { end -= 1 }
        guard end > start else { return nil }
        return UnsafeRawBufferPointer(rebasing: header[start..<end])
    }
}
