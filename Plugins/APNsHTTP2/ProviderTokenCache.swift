import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// One APNs provider token (JWT) per key, shared by every connection of a transport and, through
/// ``shared(key:keyID:teamID:clock:)``, by every transport of the process that signs with the
/// same key (a sandbox and a production transport, or a transport rebuilt by a reload).
///
/// Apple rejects tokens older than an hour and answers 429 TooManyProviderTokenUpdates when a
/// connection sees a new token sooner than 20 minutes after the last. So the token is refreshed
/// after ``refreshAfter`` (50 minutes) and never sooner than ``minimumAge`` (20 minutes), not
/// even when APNs answers 403 ExpiredProviderToken: a token that young cannot have expired
/// unless this host's clock is wrong, and a new one would be just as wrong.
///
/// A token's age is the time the clock moved forward since it was made: a clock set back (NTP
/// stepping it, an operator fixing it) neither makes the token look brand new nor triggers a
/// new token per request. The clock is injected so tests drive refresh without sleeping.
final class ProviderTokenCache: Sendable {
    struct Token: Sendable, Equatable {
        /// The `authorization` header value: `bearer <JWT>`.
        var header: String
        /// The JWT's `iat`.
        var issuedAt: Date
        /// Increases with every new token, so header lists built for an old one are rebuilt.
        var generation: Int
    }

    /// What ``refresh(after:)`` decided.
    enum Refresh: Sendable, Equatable {
        /// Send again with this token (a new one, or one another request already got).
        case token(Token)
        /// The refused token is only `age` seconds old: no new token before ``minimumAge``.
        case tooSoon(age: TimeInterval)
    }

    static let refreshAfter: TimeInterval = 50 * 60
    static let minimumAge: TimeInterval = 20 * 60

    private struct State {
        var token: Token?
        /// Seconds the clock moved forward since `token` was made (backward steps count 0).
        var age: TimeInterval = 0
        /// The clock's reading when `age` was last brought up to date.
        var lastSeen: Date = .distantPast

        mutating func observe(_ now: Date) {
            if token != nil { age += max(0, now.timeIntervalSince(lastSeen)) }
            lastSeen = now
        }
    }

    private let key: ES256SigningKey
    private let keyID: String
    private let teamID: String
    private let clock: any WallClock
    private let state = Locked(State())

    init(key: ES256SigningKey, keyID: String, teamID: String, clock: any WallClock) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.clock = clock
    }

    /// The cache for this signing key (team, key id and key material) and clock: the same
    /// instance for every transport of the process, so they send one token between them and a
    /// transport rebuilt by a reload goes on with the token in use instead of making a new one
    /// sooner than Apple allows. A clock that is an object (a test clock) gets caches of its own.
    static func shared(key: ES256SigningKey, keyID: String, teamID: String, clock: any WallClock) -> ProviderTokenCache {
        let clockID = type(of: clock) is AnyClass ? "\(ObjectIdentifier(clock as AnyObject))" : String(reflecting: type(of: clock))
        let id = SharedKey(teamID: teamID, keyID: keyID, publicKeyPEM: key.publicKeyPEM, clock: clockID)
        return registry.withLock { caches in
            if let cache = caches[id] { return cache }
            let cache = ProviderTokenCache(key: key, keyID: keyID, teamID: teamID, clock: clock)
            caches[id] = cache
            return cache
        }
    }

    private struct SharedKey: Hashable {
        var teamID: String
        var keyID: String
        var publicKeyPEM: String
        var clock: String
    }

    /// Every shared cache made so far: one per key and clock, kept for the process's life.
    private static let registry = Locked<[SharedKey: ProviderTokenCache]>([:])

    /// The token to send now, made or refreshed when due.
    func current() throws(CryptoError) -> Token {
        let now = clock.now
        return try state.withLock { (s: inout State) throws(CryptoError) -> Token in
            s.observe(now)
            if let t = s.token, s.age < Self.refreshAfter { return t }
            return try install(&s, now: now, generation: (s.token?.generation ?? 0) + 1)
        }
    }

    /// After 403 ExpiredProviderToken for `rejected`: a new token, unless another request
    /// already replaced it, or unless `rejected` is younger than ``minimumAge``.
    func refresh(after rejected: Token) throws(CryptoError) -> Refresh {
        try refresh(afterHeader: rejected.header)
    }

    /// ``refresh(after:)`` for the token sent as this `authorization` header value.
    func refresh(afterHeader rejected: String) throws(CryptoError) -> Refresh {
        let now = clock.now
        return try state.withLock { (s: inout State) throws(CryptoError) -> Refresh in
            s.observe(now)
            if let t = s.token, t.header != rejected { return .token(t) }
            if s.token != nil, s.age < Self.minimumAge { return .tooSoon(age: s.age) }
            return .token(try install(&s, now: now, generation: (s.token?.generation ?? 0) + 1))
        }
    }

    /// The generation of the token in use (0 before the first); for tests and metrics.
    var generation: Int { state.withLock { $0.token?.generation ?? 0 } }

    private func install(_ s: inout State, now: Date, generation: Int) throws(CryptoError) -> Token {
        let jwt = try ProviderToken.make(keyID: keyID, teamID: teamID, issuedAt: now, key: key)
        let fresh = Token(header: "bearer \(jwt)", issuedAt: now, generation: generation)
        s.token = fresh
        s.age = 0
        s.lastSeen = now
        return fresh
    }
}
