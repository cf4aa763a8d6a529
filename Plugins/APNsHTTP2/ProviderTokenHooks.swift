import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// Token auth on the HTTP/2 client's own threads: each attempt starts with the provider token
/// current then (``ProviderTokenCache/current()``), and a 403 ExpiredProviderToken is sent again
/// once with a newer token, unless the refused one is too young to be replaced.
///
/// Verdicts that end a request are ``DeliveryOutcome``s (``HTTP2Result/endedByHooks(_:)``).
final class ProviderTokenHooks: HTTP2RequestHooks {
    private let tokens: ProviderTokenCache
    private let logger: Logger
    private struct State {
        /// The header list for the newest token seen, kept so requests share one encoding.
        var generation = 0
        var headers: [HTTP2Header] = []
        /// The newest token generations a refresh, and a clock warning, were logged for.
        var loggedRefresh = 0
        var loggedClockWarning = 0
    }
    private let state = Locked(State())

    static let clockHint = "APNs judges a provider token's age by its iat, so check this host's system clock (NTP)"

    init(tokens: ProviderTokenCache, logger: Logger) {
        self.tokens = tokens
        self.logger = logger
    }

    func willStart(_ attempt: HTTP2Attempt) -> HTTP2AttemptStart {
        // Chosen as each attempt starts, not when it was queued: one queued, taken back or sent
        // again across the 50-minute rollover must not carry an older token to a connection that
        // has seen a newer one (APNs: 429 TooManyProviderTokenUpdates).
        let token: ProviderTokenCache.Token
        do { token = try tokens.current() } catch {
            return .end(DeliveryOutcome.setupFailure(reason: "cannot sign a provider token: \(error)"))
        }
        return .send(adding: state.withLock { s in
            if s.generation != token.generation {
                s.generation = token.generation
                s.headers = [HTTP2Header("authorization", token.header)]
            }
            return s.headers
        })
    }

    /// 403 ExpiredProviderToken: send again once, with a newer token. The cache makes no token
    /// younger than its minimum age (APNs would answer 429 TooManyProviderTokenUpdates, and a
    /// token that young can only be "expired" when this host's clock is wrong).
    func review(_ response: HTTP2Response, of attempt: HTTP2Attempt) -> HTTP2Review {
        guard response.status == 403,
              case .refreshProviderToken(let reason) = ResponseMapping.outcome(status: 403, body: response.body, apnsID: nil)
        else { return .accept }
        guard let used = attempt.addedHeaders.first(where: { $0.name == "authorization" })?.value, attempt.resends == 0 else {
            warnAboutTheClock("APNs says a provider token made just now expired; check the system clock")
            return .end(DeliveryOutcome.retry(after: nil, reason: "\(reason) even with a new provider token: \(Self.clockHint)"))
        }
        let refresh: ProviderTokenCache.Refresh
        do { refresh = try tokens.refresh(afterHeader: used) } catch {
            return .end(DeliveryOutcome.setupFailure(reason: "cannot sign a provider token: \(error)"))
        }
        switch refresh {
        case .tooSoon(let age):
            warnAboutTheClock("APNs says a provider token made \(Int(age)) s ago expired; check the system clock")
            let wait = ProviderTokenCache.minimumAge - age
            return .end(DeliveryOutcome.retry(after: wait, reason: "\(reason) for a provider token made \(Int(age)) s ago: \(Self.clockHint); "
                                                  + "no new token is made before the current one is \(Int(ProviderTokenCache.minimumAge / 60)) minutes old"))
        case .token(let fresh):
            let log = state.withLock { s -> Bool in
                defer { s.loggedRefresh = max(s.loggedRefresh, fresh.generation) }
                return fresh.generation > s.loggedRefresh
            }
            if log { logger.notice("provider token refreshed after ExpiredProviderToken") }
            return .resend
        }
    }

    /// Logs `message` once per token generation.
    private func warnAboutTheClock(_ message: String) {
        let generation = tokens.generation
        let log = state.withLock { s -> Bool in
            defer { s.loggedClockWarning = max(s.loggedClockWarning, generation) }
            return generation > s.loggedClockWarning
        }
        if log { logger.warning(message) }
    }
}
