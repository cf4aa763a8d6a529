import FoundationEssentials
import HeraldCore

/// What a vendor's auth endpoint answered.
public enum TokenGrant: Sendable, Equatable {
    /// An access token and how long it lasts, in seconds.
    case token(Secret, lifetime: TimeInterval)
    /// Refused: the credentials are wrong (the transport pauses).
    case refused(String)
    /// Worth trying again (5xx, rate limited, no answer), no sooner than `retryAfter` when given.
    case temporary(String, retryAfter: TimeInterval?)
}

/// Why no access token could be had.
public enum TokenError: Error, Sendable, Equatable {
    /// The credentials are wrong: pause the transport.
    case setup(String)
    /// The auth endpoint fails for now: retry the deliveries later.
    case temporary(String, retryAfter: TimeInterval?)
}

/// One vendor account's access token, shared by every send of its transport.
///
/// Refreshed before it expires: from `min(refreshMargin, half its lifetime)` before expiry a send
/// still gets the current token while one refresh runs; only an expired (or invalidated) token
/// makes sends wait. At most one refresh is in flight, and every waiting send shares it.
/// Temporary failures are retried ``retries`` times with exponential backoff and jitter.
///
/// - Important: tokens never reach a log or an error (``Secret``).
public actor AccessTokenCache {
    private struct Current {
        var token: Secret
        var expiry: Date
        var refreshAt: Date
    }

    private let label: String
    private let clock: any WallClock
    private let logger: Logger
    private let refreshMargin: TimeInterval
    private let retries: Int
    private let backoff: TimeInterval
    private let fetch: @Sendable () async -> TokenGrant
    private var current: Current?
    private var refreshing: Task<Result<Current, TokenError>, Never>?
    /// How many tokens were fetched.
    public private(set) var fetched = 0

    /// - Parameters:
    ///   - label: the vendor, in logs and errors (`HMS`).
    ///   - refreshMargin: refresh this long before expiry (at most half the lifetime).
    ///   - fetch: asks the auth endpoint for a token, once.
    public init(label: String, clock: any WallClock, logger: Logger, refreshMargin: TimeInterval,
                retries: Int = 2, backoff: TimeInterval = 1, fetch: @escaping @Sendable () async -> TokenGrant) {
        self.label = label
        self.clock = clock
        self.logger = logger
        self.refreshMargin = refreshMargin
        self.retries = retries
        self.backoff = backoff
        self.fetch = fetch
    }

    /// A token good for a send now; starts a refresh when one is due.
    public func token() async throws(TokenError) -> Secret {
        let now = clock.now
        if let c = current, now < c.expiry {
            if now >= c.refreshAt { startRefresh() }
            return c.token
        }
        startRefresh()
        switch await refreshing!.value {
        case .success(let c): return c.token
        case .failure(let e): throw e
        }
    }

    /// Forgets `token` after the vendor answered that it expired, so the next ``token()`` fetches one.
    public func invalidate(_ token: Secret) {
        if current?.token == token { current = nil }
    }

    /// Waits for a refresh in flight (cancelled).
    public func stop() async {
        refreshing?.cancel()
        _ = await refreshing?.value
        refreshing = nil
    }

    private func startRefresh() {
        guard refreshing == nil else { return }
        refreshing = Task { await self.refresh() }
    }

    private func refresh() async -> Result<Current, TokenError> {
        let result = await fetchWithRetries()
        if case .success(let c) = result { current = c }
        refreshing = nil
        return result
    }

    private func fetchWithRetries() async -> Result<Current, TokenError> {
        var attempt = 0
        while true {
            // The lifetime counts from when the request went out.
            let asked = clock.now
            switch await fetch() {
            case .token(let token, let lifetime):
                fetched += 1
                let margin = min(refreshMargin, lifetime / 2)
                logger.debug("\(label) access token fetched", ["expires_in": String(Int(lifetime))])
                return .success(Current(token: token, expiry: asked.addingTimeInterval(lifetime), refreshAt: asked.addingTimeInterval(lifetime - margin)))
            case .refused(let reason):
                logger.error("\(label) refused the credentials", ["reason": reason])
                return .failure(.setup("\(label) refused the credentials: \(reason)"))
            case .temporary(let reason, let retryAfter):
                attempt += 1
                if attempt > retries || Task.isCancelled {
                    logger.warning("\(label) auth endpoint keeps failing", ["reason": reason, "attempts": String(attempt)])
                    return .failure(.temporary("no \(label) access token: \(reason)", retryAfter: retryAfter))
                }
                let wait = max(retryAfter ?? 0, backoff * Double(1 << (attempt - 1)) * Double.random(in: 0.5...1.0))
                do { try await clock.sleep(for: wait) } catch {
                    return .failure(.temporary("no \(label) access token: \(reason)", retryAfter: retryAfter))
                }
            }
        }
    }
}
