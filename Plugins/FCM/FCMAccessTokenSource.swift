import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// What the OAuth token endpoint answered one assertion.
enum FCMTokenGrant: Sendable, Equatable {
    /// An access token and its lifetime in seconds.
    case token(Secret, expiresIn: TimeInterval)
    /// Refused for good (`invalid_grant`, `invalid_client`, 401/403): the credentials are wrong.
    case refused(String)
    /// Worth trying again (500/503/504/408/429, no answer), no sooner than `retryAfter` when given.
    case temporary(String, retryAfter: TimeInterval?)
}

/// Exchanges a signed assertion for an access token (the JWT-bearer grant, RFC 7523).
protocol FCMTokenEndpoint: Sendable {
    func exchange(assertion: String) async -> FCMTokenGrant
    /// Releases connections; called once, when the last transport using it stops.
    func stop() async
}

/// Why no access token could be had.
enum FCMTokenError: Error, Sendable, Equatable {
    /// The credentials are wrong (a refused grant, an unusable key): pause the transport.
    case setup(String)
    /// The token endpoint is failing for now: retry the deliveries later.
    case temporary(String, retryAfter: TimeInterval?)
}

/// The access token of one service account, shared by every connection and transport that use it.
///
/// Refreshed before it expires: from `min(5 min, half its lifetime)` before expiry a send still
/// gets the current token while one refresh runs; only an expired (or refused) token makes
/// sends wait. At most one refresh is in flight. Token-endpoint 500/503/504/408/429 and lost
/// answers are retried with exponential backoff and jitter (``retries`` times) before the
/// deliveries are retried later; a refused grant or an unusable key is a setup failure.
///
/// - Important: the token, the assertion and the key never reach a log or an error.
actor FCMAccessTokenSource {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// Refresh at least this long before expiry (when the lifetime allows).
    static let refreshMargin: TimeInterval = 300

    private struct Current {
        var token: Secret
        var expiry: Date
        var refreshAt: Date
    }

    let credentials: FCMCredentials
    private let endpoint: any FCMTokenEndpoint
    private let clock: any WallClock
    private let logger: Logger
    let retries: Int
    let backoff: TimeInterval
    private var current: Current?
    private var refreshing: Task<Result<Current, FCMTokenError>, Never>?
    /// How many tokens were fetched (for tests and metrics).
    private(set) var fetched = 0

    init(credentials: FCMCredentials, endpoint: any FCMTokenEndpoint, clock: any WallClock, logger: Logger,
         retries: Int = 3, backoff: TimeInterval = 1) {
        self.credentials = credentials
        self.endpoint = endpoint
        self.clock = clock
        self.logger = logger
        self.retries = retries
        self.backoff = backoff
    }

    /// A token good for a send now; refreshes when due.
    func token() async throws(FCMTokenError) -> Secret {
        let now = clock.now
        if let c = current, now < c.expiry {
            if now >= c.refreshAt { startRefresh() }
            return c.token
        }
        startRefresh()
        let result = await refreshing!.value
        switch result {
        case .success(let c): return c.token
        case .failure(let e): throw e
        }
    }

    /// Forgets `token` after FCM refused it (401), so the next ``token()`` fetches a new one.
    func invalidate(_ token: Secret) {
        if current?.token == token { current = nil }
    }

    /// Waits for a refresh in flight, then closes the endpoint's connections (when the last user stops).
    func stop() async {
        refreshing?.cancel()
        _ = await refreshing?.value
        refreshing = nil
        await endpoint.stop()
    }

    private func startRefresh() {
        guard refreshing == nil else { return }
        refreshing = Task { await self.refresh() }
    }

    private func refresh() async -> Result<Current, FCMTokenError> {
        let result = await fetch()
        if case .success(let c) = result { current = c }
        refreshing = nil
        return result
    }

    private func fetch() async -> Result<Current, FCMTokenError> {
        guard let key = credentials.signingKey else {
            return .failure(.setup(credentials.keyProblem ?? "\(credentials.source): private_key cannot be used"))
        }
        var attempt = 0
        while true {
            let assertion: String
            do {
                let iat = Int64(clock.now.timeIntervalSince1970) - 10
                let claims: JWTClaims = ["iss": .string(credentials.clientEmail), "scope": .string(Self.scope),
                                         "aud": .string(credentials.tokenURI.description), "iat": .number(Double(iat)),
                                         "exp": .number(Double(iat + 3600))]
                assertion = try JWT.sign(claims, key: key, keyID: credentials.privateKeyID)
            } catch {
                return .failure(.setup("\(credentials.source): cannot sign the OAuth assertion: \(error.message)"))
            }
            // The lifetime counts from when the request went out, not from when the answer came
            // back: the endpoint issued the token somewhere in between.
            let asked = clock.now
            switch await endpoint.exchange(assertion: assertion) {
            case .token(let token, let lifetime):
                fetched += 1
                let now = asked
                let margin = min(Self.refreshMargin, lifetime / 2)
                logger.debug("FCM access token fetched", ["account": credentials.clientEmail, "expires_in": String(Int(lifetime))])
                return .success(Current(token: token, expiry: now.addingTimeInterval(lifetime), refreshAt: now.addingTimeInterval(lifetime - margin)))
            case .refused(let reason):
                logger.error("the token endpoint refused the service account", ["account": credentials.clientEmail, "reason": reason])
                return .failure(.setup("\(credentials.tokenURI) refused \(credentials.description): \(reason)"))
            case .temporary(let reason, let retryAfter):
                attempt += 1
                if attempt > retries || Task.isCancelled {
                    logger.warning("the token endpoint keeps failing", ["account": credentials.clientEmail, "reason": reason,
                                                                         "attempts": String(attempt)])
                    return .failure(.temporary("no FCM access token: \(reason)", retryAfter: retryAfter))
                }
                let wait = max(retryAfter ?? 0, backoff * Double(1 << (attempt - 1)) * Double.random(in: 0.5...1.0))
                logger.info("token endpoint failed; trying again", ["reason": reason, "in_s": String(format2(wait))])
                do { try await clock.sleep(for: wait) } catch {
                    return .failure(.temporary("no FCM access token: \(reason)", retryAfter: retryAfter))
                }
            }
        }
    }

    private func format2(_ x: Double) -> String { String(Double(Int(x * 100)) / 100) }
}

/// The access-token sources in this process, one per service account, shared by the transports that use it.
enum FCMAccessTokenSources {
    private static let shared = Locked<[String: (source: FCMAccessTokenSource, users: Int)]>([:])

    /// The source for `credentials`, made with `make` when there is none; pair with ``release(_:)``.
    static func acquire(_ credentials: FCMCredentials, make: () -> FCMAccessTokenSource) -> FCMAccessTokenSource {
        shared.withLock { all in
            let key = credentials.identity
            if let entry = all[key] {
                all[key] = (entry.source, entry.users + 1)
                return entry.source
            }
            let source = make()
            all[key] = (source, 1)
            return source
        }
    }

    /// Drops one user; returns true when it was the last (the caller then stops the source and its endpoint).
    static func release(_ source: FCMAccessTokenSource) -> Bool {
        shared.withLock { all in
            let key = source.credentials.identity
            guard let entry = all[key], entry.source === source else { return true }
            if entry.users <= 1 {
                all[key] = nil
                return true
            }
            all[key] = (entry.source, entry.users - 1)
            return false
        }
    }
}
