import CCurl
import FoundationEssentials
import HeraldCore
import Glibc

/// How the engine treats failures: a stream failing alone, an expired provider token, a lost
/// connection, and the backoff between failing connections.
extension CurlEngine {
    /// Whether a transfer failed without its connection failing: the server reset its stream
    /// (`CURLE_HTTP2_STREAM`) on a connection that has answered, or its deadline passed while the
    /// connection answered requests meanwhile. Anything else (`CURLE_HTTP2`, send, receive, TLS and
    /// connect errors, a deadline on a silent connection) is the connection's failure.
    func failedAlone(_ code: CURLcode, _ r: PendingRequest) -> Bool {
        switch code {
        case CURLE_HTTP2_STREAM: return warm
        case CURLE_OPERATION_TIMEDOUT: return lastAnswerAt > r.startedAt
        default: return false
        }
    }

    /// 403 ExpiredProviderToken: send `r` again once, with a newer token. The cache makes no
    /// token younger than its minimum age (APNs would answer 429 TooManyProviderTokenUpdates,
    /// and a token that young can only be "expired" when this host's clock is wrong).
    func resendWithNewerToken(_ r: PendingRequest, reason: String, now: UInt64) {
        let clockHint = "APNs judges a provider token's age by its iat, so check this host's system clock (NTP)"
        guard let tokens = settings.tokens, let used = r.token, !r.refreshedToken else {
            if let used = r.token, used.generation > loggedClockWarning {
                loggedClockWarning = used.generation
                settings.logger.warning("APNs says a provider token made just now expired; check the system clock", ["engine": String(index)])
            }
            finish(r, .retry(after: nil, reason: "\(reason) even with a new provider token: \(clockHint)"))
            return
        }
        let refresh: ProviderTokenCache.Refresh
        do {
            refresh = try tokens.refresh(after: used)
        } catch {
            finish(r, .setupFailure(reason: "cannot sign a provider token: \(error)"))
            return
        }
        switch refresh {
        case .tooSoon(let age):
            if used.generation > loggedClockWarning {
                loggedClockWarning = used.generation
                settings.logger.warning("APNs says a provider token made \(Int(age)) s ago expired; check the system clock",
                                        ["engine": String(index)])
            }
            let wait = ProviderTokenCache.minimumAge - age
            finish(r, .retry(after: wait, reason: "\(reason) for a provider token made \(Int(age)) s ago: \(clockHint); "
                                 + "no new token is made before the current one is \(Int(ProviderTokenCache.minimumAge / 60)) minutes old"))
        case .token(let fresh):
            if fresh.generation > loggedRefresh {
                loggedRefresh = fresh.generation
                settings.logger.notice("provider token refreshed after ExpiredProviderToken", ["engine": String(index)])
            }
            r.refreshedToken = true
            r.token = fresh
            r.shapeKey.authorization = fresh.header
            r.waitDeadline = now + UInt64(settings.configuration.timeout * 1e9)
            waiting.append(r)
        }
    }

    /// The connection died (GOAWAY, reset, close) with requests in flight. libcurl would resend
    /// them all at once on a fresh connection, where APNs refuses all but one stream before the
    /// first answer, which makes libcurl drop that connection too. So take every in-flight
    /// request back, and let them go again one at a time until the new connection answers.
    /// Requests that were answered have completed already; these got no answer.
    ///
    /// Only a request that was on the lost connection spends one of its `connectionRetries`; one
    /// libcurl had not put on it yet (waiting for a stream, or for the next connection) goes again free.
    func connectionLost(message: String) {
        warm = false
        var taken: [(request: PendingRequest, wasOnIt: Bool)] = []
        for easy in all where easy.request != nil {
            let wasOnIt = easy.localPort != 0 && lostPorts.contains(easy.localPort)
            curl_multi_remove_handle(multi, easy.handle)
            taken.append((easy.request!, wasOnIt))
            easy.shape?.inUse -= 1
            easy.request = nil
            easy.shape = nil
            idle.append(easy)
            inFlight -= 1
            settings.metrics.inFlight.add(-1)
        }
        guard !taken.isEmpty else { return }
        if taken.contains(where: \.wasOnIt) { noteConnectionFailure(now: Self.monotonic(), message: message) }
        // Each take-back is a resend: a request whose connections keep failing under it is left
        // to the dispatcher's backoff after `connectionRetries`, like one libcurl failed itself.
        // They go first, with no later deadline than the queue's head: the queue stays in deadline
        // order, so giving up at the head alone keeps every request's wait within `timeout`.
        var deadline = Self.monotonic() + UInt64(settings.configuration.timeout * 1e9)
        if waitingHead < waiting.count { deadline = min(deadline, waiting[waitingHead].waitDeadline) }
        var again: [PendingRequest] = []
        for (r, wasOnIt) in taken {
            if stopping {
                finish(r, .retry(after: nil, reason: "no answer: \(message)"))
            } else if !wasOnIt {
                r.waitDeadline = deadline
                again.append(r)
            } else if r.retriesLeft > 0 {
                r.retriesLeft -= 1
                r.waitDeadline = deadline
                again.append(r)
            } else {
                finish(r, .retry(after: nil, reason: "no answer: \(message)"))
            }
        }
        waiting = again + waiting[waitingHead...]
        waitingHead = 0
    }

    /// Backs off after a failure without an answer. A burst (a GOAWAY or a drop failing every
    /// stream at once, which libcurl reports in one turn of the loop) counts as one incident;
    /// every new connection that fails counts again, so a refused endpoint is retried at
    /// 0, 100, 200, 400 ms … not as fast as the requests waiting for it.
    func noteConnectionFailure(now: UInt64, message: String) {
        lastError = message
        guard turn != lastIncidentTurn else { return }
        lastIncidentTurn = turn
        settings.metrics.reconnects.increment()
        incidentsSinceAnswer += 1
        if incidentsSinceAnswer == 1 {
            // A connection that worked and then closed (GOAWAY, idle close, a reset): reconnect at once.
            settings.logger.info("APNs connection closed; reconnecting", ["error": message, "engine": String(index)])
            return
        }
        // Failing again before any answer: back off exponentially, 100 ms up to 30 s, with jitter.
        let backoff = min(0.1 * pow(2, Double(incidentsSinceAnswer - 2)), 30)
        let jittered = backoff * Double.random(in: 0.8...1.0)
        pausedUntil = max(pausedUntil, now + UInt64(jittered * 1e9))
        settings.logger.warning("APNs connection failed again; backing off",
                                ["error": message, "backoff_ms": String(Int(jittered * 1000)), "engine": String(index)])
    }
}
