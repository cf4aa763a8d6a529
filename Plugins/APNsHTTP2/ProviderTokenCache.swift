import FoundationEssentials
import Glibc
import HeraldCore
import HeraldCrypto

/// One APNs provider token (JWT) per key, shared by every connection of a transport.
///
/// Apple rejects tokens older than an hour and answers 429 TooManyProviderTokenUpdates when a
/// connection sees a new token sooner than 20 minutes after the last. So the token is refreshed
/// after ``refreshAfter`` (50 minutes) and never sooner than ``minimumAge`` (20 minutes), except
/// once when APNs says it expired. The clock is injected so tests drive refresh without sleeping.
final class ProviderTokenCache: Sendable {
    struct Token: Sendable, Equatable {
        /// The `authorization` header value: `bearer <JWT>`.
        var header: String
        var issuedAt: Date
        /// Increases with every new token, so header lists built for an old one are rebuilt.
        var generation: Int
    }

    static let refreshAfter: TimeInterval = 50 * 60
    static let minimumAge: TimeInterval = 20 * 60

    private let key: ES256SigningKey
    private let keyID: String
    private let teamID: String
    private let clock: any WallClock
    private let state = Locked<Token?>(nil)

    init(key: ES256SigningKey, keyID: String, teamID: String, clock: any WallClock) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.clock = clock
    }

    /// The token to send now, made or refreshed when due.
    func current() throws(CryptoError) -> Token {
        let now = clock.now
        return try state.withLock { (token: inout Token?) throws(CryptoError) -> Token in
            if let t = token, now.timeIntervalSince(t.issuedAt) < Self.refreshAfter, now >= t.issuedAt { return t }
            let fresh = try make(now: now, generation: (token?.generation ?? 0) + 1)
            token = fresh
            return fresh
        }
    }

    /// After 403 ExpiredProviderToken for `rejected`: a new token, unless another request
    /// already replaced it. Refreshing sooner than 20 minutes happens only here.
    func refresh(after rejected: Token) throws(CryptoError) -> Token {
        let now = clock.now
        return try state.withLock { (token: inout Token?) throws(CryptoError) -> Token in
            if let t = token, t.generation != rejected.generation { return t }
            let fresh = try make(now: now, generation: rejected.generation + 1)
            token = fresh
            return fresh
        }
    }

    private func make(now: Date, generation: Int) throws(CryptoError) -> Token {
        let jwt = try ProviderToken.make(keyID: keyID, teamID: teamID, issuedAt: now, key: key)
        return Token(header: "bearer \(jwt)", issuedAt: now, generation: generation)
    }
}
