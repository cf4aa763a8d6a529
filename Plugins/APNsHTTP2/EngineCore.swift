import CCurl
import CLinux  // epoll and eventfd
import Dispatch
import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldCrypto
#if canImport(Glibc)
import Glibc
#endif

/// Everything an engine needs from the transport.
struct EngineSettings: Sendable {
    var configuration: APNsHTTP2Configuration
    var name: String
    var logger: Logger
    var tokens: ProviderTokenCache?
    var metrics: TransportMetrics
}

/// One HTTP/2 connection to APNs as the transport sees it: requests go in, each ends in its
/// batch's ``BatchCompletion``. ``CurlEngine`` (libcurl) and ``NGHTTP2Engine`` (libnghttp2 on
/// OpenSSL) implement it, both on top of ``EngineCore``.
protocol APNsEngine: AnyObject, Sendable {
    /// Starts the engine's thread.
    func start()
    /// Queues requests (any thread).
    func submit(_ requests: [PendingRequest])
    /// Finishes in-flight work (up to `deadline` seconds), then stops the thread.
    func stop(deadline: TimeInterval)
}

/// What both engines share, written once: the queue of waiting requests and its deadlines, the
/// provider token chosen as each request starts, the one-stream rule on a new connection,
/// resends (``connectionRetries``), 403 ExpiredProviderToken, and the backoff between failing
/// connections. An engine subclass owns the connection and calls these on its own thread.
class EngineCore: @unchecked Sendable {
    let settings: EngineSettings
    let index: Int
    let epfd: Int32
    let wakeFD: Int32
    let inbox = Locked<(requests: [PendingRequest], stopping: Bool)>(([], false))
    let stopped = DispatchSemaphore(value: 0)

    // Engine-thread state.
    var waiting: [PendingRequest] = []
    var waitingHead = 0
    var inFlight = 0
    var pausedUntil: UInt64 = 0
    /// Connection failures since the last answered request (a burst counts once).
    var incidentsSinceAnswer = 0
    /// The loop turn of the last counted incident, and the current turn.
    var lastIncidentTurn = -1
    var turn = 0
    var lastError = ""
    var stopping = false
    /// Whether the current connection has answered a request. Until it has, only one request is
    /// in flight: APNs allows a single stream on a new token-auth connection until a request with
    /// a valid token succeeds, and sending more first would only churn connections.
    var warm = false
    /// When a request last finished (monotonic nanoseconds).
    var lastDoneAt: UInt64 = 0
    /// When the connection last answered a request (monotonic nanoseconds).
    var lastAnswerAt: UInt64 = 0
    /// The newest provider token generations this engine logged a refresh, and a clock warning, for.
    var loggedRefresh = 0
    var loggedClockWarning = 0
    var responseCounters: [Int: Counter] = [:]

    init(settings: EngineSettings, index: Int) throws {
        self.settings = settings
        self.index = index
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epfd >= 0, wakeFD >= 0 else {
            throw TransportError(transport: settings.name, message: "cannot create epoll/eventfd: \(String(cString: strerror(errno)))")
        }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: wakeFD))
        epoll_ctl(epfd, EPOLL_CTL_ADD, wakeFD, &event)
    }

    deinit {
        close(epfd)
        close(wakeFD)
    }

    // MARK: Overridden by each engine

    /// Puts `r` on the connection (opening one if needed); counts it in ``inFlight``.
    func begin(_ r: PendingRequest, now: UInt64) { fatalError("begin(_:now:) is the engine's") }

    /// Most requests in flight now: the configured `maxConcurrentStreams` (and the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS where the engine knows it), one before the first answer.
    var streamLimit: Int { warm ? settings.configuration.maxConcurrentStreams : 1 }

    // MARK: Any thread

    func submit(_ requests: [PendingRequest]) {
        let accepted = inbox.withLock { box -> Bool in
            if box.stopping { return false }
            box.requests.append(contentsOf: requests)
            return true
        }
        if !accepted {
            for r in requests { r.batch.complete(r.slot, .retry(after: nil, reason: "transport \(settings.name) is shutting down")) }
            return
        }
        wake()
    }

    func stop(deadline: TimeInterval) {
        inbox.withLock { $0.stopping = true }
        wake()
        if stopped.wait(timeout: .now() + deadline + 1) == .timedOut {
            settings.logger.warning("engine did not stop in time", ["engine": String(index)])
        }
    }

    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    // MARK: Engine thread

    var waitingCount: Int { waiting.count - waitingHead }

    var timeoutNanoseconds: UInt64 { UInt64(settings.configuration.timeout * 1e9) }

    /// `idleTimeout` as libcurl applies it (whole seconds, at least one); both engines use it.
    var idleNanoseconds: UInt64 { UInt64(max(1, Int(settings.configuration.idleTimeout))) * 1_000_000_000 }

    /// The configured `timeout` for messages: `10 s`, `300 ms`.
    var timeoutText: String {
        let t = settings.configuration.timeout
        return t >= 1 && t == t.rounded() ? "\(Int(t)) s" : "\(Int((t * 1000).rounded())) ms"
    }

    /// Reads the wake-up eventfd and moves queued requests to ``waiting``.
    func takeInbox() {
        var value: UInt64 = 0
        _ = read(wakeFD, &value, 8)
        let (requests, stop) = inbox.withLock { box -> ([PendingRequest], Bool) in
            let r = box.requests
            box.requests.removeAll(keepingCapacity: true)
            return (r, box.stopping)
        }
        if stop { stopping = true }
        let deadline = Self.monotonic() + timeoutNanoseconds
        for r in requests {
            r.waitDeadline = deadline
            waiting.append(r)
        }
    }

    /// Gives up on requests that waited too long, then starts waiting requests while the
    /// connection has room, each with the provider token current now.
    func startWaiting() {
        let now = Self.monotonic()
        if warm && inFlight == 0 && lastDoneAt != 0 && now &- lastDoneAt >= idleNanoseconds {
            // Idle past `idleTimeout`: the connection is closed and the next request opens a new
            // one, which APNs lets carry one stream until it answers.
            warm = false
        }
        let limit = streamLimit
        // Give up on requests that waited too long (paused connection, starved streams). The queue
        // is in deadline order (appended with now + timeout; see takeBack), so the head decides.
        while waitingHead < waiting.count, waiting[waitingHead].waitDeadline < now, inFlight >= limit || now < pausedUntil {
            let r = waiting[waitingHead]
            waitingHead += 1
            let why = lastError.isEmpty ? "no free HTTP/2 stream" : lastError
            finish(r, .retry(after: nil, reason: "no answer within \(timeoutText): \(why)"))
        }
        if now >= pausedUntil {
            // The provider token is chosen as each request starts, not when it was queued: one
            // queued, taken back or sent again across the 50-minute rollover must not carry an
            // older token to a connection that has seen a newer one (APNs: 429 TooManyProviderTokenUpdates).
            var token: Result<ProviderTokenCache.Token, CryptoError>? = nil
            while inFlight < streamLimit && waitingHead < waiting.count {
                let r = waiting[waitingHead]
                waitingHead += 1
                if let tokens = settings.tokens {
                    if token == nil { token = Result(catching: { () throws(CryptoError) -> ProviderTokenCache.Token in try tokens.current() }) }
                    switch token! {
                    case .success(let current):
                        // A request refreshed after ExpiredProviderToken already has the newest token.
                        if r.token.map({ current.generation > $0.generation }) ?? true {
                            r.token = current
                            r.shapeKey.authorization = current.header
                        }
                    case .failure(let error):
                        finish(r, .setupFailure(reason: "cannot sign a provider token: \(error)"))
                        continue
                    }
                }
                begin(r, now: now)
            }
        }
        if waitingHead > 1024 && waitingHead * 2 > waiting.count {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        } else if waitingHead == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
        }
    }

    /// The connection answered `r` with `status`: the outcome from ``ResponseMapping``, or a
    /// resend with a newer provider token.
    func answered(_ r: PendingRequest, status: Int, body: [UInt8], retryAfter: TimeInterval?, now: UInt64) {
        incidentsSinceAnswer = 0
        lastError = ""
        lastAnswerAt = now
        if status != 403 { warm = true }
        responseCounter(status).increment()
        switch ResponseMapping.outcome(status: status, body: body, apnsID: r.delivery.messageID.lowercasedString, retryAfter: retryAfter) {
        case .outcome(let outcome):
            finish(r, outcome)
        case .refreshProviderToken(let reason):
            resendWithNewerToken(r, reason: reason, now: now)
        }
    }

    /// `r` failed without an answer: sent again while it has `connectionRetries` left, else `failure`.
    func retryOrFinish(_ r: PendingRequest, now: UInt64, failure: DeliveryOutcome) {
        settings.metrics.noAnswer.increment()
        if r.retriesLeft > 0 && !stopping {
            r.retriesLeft -= 1
            r.waitDeadline = now + timeoutNanoseconds
            waiting.append(r)
        } else {
            finish(r, failure)
        }
    }

    func responseCounter(_ status: Int) -> Counter {
        if let c = responseCounters[status] { return c }
        let c = settings.metrics.responses(status: status)
        responseCounters[status] = c
        return c
    }

    func finish(_ r: PendingRequest, _ outcome: DeliveryOutcome) {
        r.batch.complete(r.slot, outcome)
    }

    /// Fails everything still queued (shutdown); the engine fails what it has in flight.
    func abandonWaiting(reason: String) {
        takeInbox()
        for i in waitingHead..<waiting.count { finish(waiting[i], .retry(after: nil, reason: reason)) }
        waiting.removeAll()
        waitingHead = 0
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
            r.waitDeadline = now + timeoutNanoseconds
            waiting.append(r)
        }
    }

    /// Requests taken back from a lost connection (GOAWAY, a drop) go again, ahead of the queue.
    ///
    /// Only a request that was on the lost connection spends one of its `connectionRetries`; one
    /// not yet on it goes again free. A request whose connections keep failing under it is left
    /// to the dispatcher's backoff after `connectionRetries`. They go first, with no later deadline
    /// than the queue's head: the queue stays in deadline order, so giving up at the head alone
    /// keeps every request's wait within `timeout`.
    func takeBack(_ taken: [(request: PendingRequest, wasOnIt: Bool)], message: String) {
        guard !taken.isEmpty else { return }
        if taken.contains(where: \.wasOnIt) { noteConnectionFailure(now: Self.monotonic(), message: message) }
        var deadline = Self.monotonic() + timeoutNanoseconds
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
    /// stream at once, seen in one turn of the loop) counts as one incident; every new connection
    /// that fails counts again, so a refused endpoint is retried at 0, 100, 200, 400 ms … not as
    /// fast as the requests waiting for it.
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

    static func monotonic() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
