internal import CLinux  // epoll and eventfd
import Dispatch
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/2 connection as the client sees it: requests go in, each ends in its batch's
/// ``BatchCompletion``. ``CurlEngine`` (libcurl) and ``NGHTTP2Engine`` (libnghttp2 on OpenSSL)
/// implement it, both on top of ``EngineCore``.
protocol HTTP2ConnectionEngine: AnyObject, Sendable {
    /// Starts the engine's thread.
    func start()
    /// Queues requests (any thread).
    func submit(_ requests: [PendingRequest])
    /// Asks the thread to finish in-flight work (up to `deadline` seconds) and end (any thread).
    func requestStop(deadline: TimeInterval)
    /// Returns when the thread has ended (at once when it never started).
    func ended() async
}

/// What both engines share, written once: the queue of waiting requests and its deadlines, the
/// hooks asked as each attempt starts and about each answer, the one-stream rule on a new
/// connection, resends (``HTTP2ClientConfiguration/connectionRetries``), and the backoff between
/// failing connections. An engine subclass owns the connection and calls these on its own thread.
class EngineCore: @unchecked Sendable {
    let settings: ClientSettings
    let index: Int
    let epfd: Int32
    let wakeFD: Int32
    let inbox = Locked<(requests: [PendingRequest], stopDeadline: TimeInterval?)>(([], nil))
    /// Whether the thread ran and ended, and who waits for it to end.
    private let ending = Locked<(started: Bool, ended: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, false, []))

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
    /// The headers the hooks added that last passed the field check (checked once per list).
    var checkedAdded = SharedHeaders()
    /// Whether the current connection has answered a request (not 401 or 403). Until it has, with
    /// ``HTTP2ClientConfiguration/singleStreamUntilFirstAnswer``, only one request is in flight:
    /// APNs allows a single stream on a new token-auth connection until a request with a valid
    /// token succeeds, and sending more first would only churn connections.
    var warm = false
    /// When the run loop gives up on in-flight work after a stop (monotonic nanoseconds).
    var stopDeadline: UInt64 = .max
    /// When a request last finished (monotonic nanoseconds).
    var lastDoneAt: UInt64 = 0
    /// When the connection last answered a request (monotonic nanoseconds).
    var lastAnswerAt: UInt64 = 0
    var responseCounters: [Int: Counter] = [:]

    init(settings: ClientSettings, index: Int) throws(HTTP2ClientError) {
        self.settings = settings
        self.index = index
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epfd >= 0, wakeFD >= 0 else {
            throw .resources("cannot create epoll/eventfd: \(String(cString: strerror(errno)))")
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
    /// SETTINGS_MAX_CONCURRENT_STREAMS where the engine knows it), one before the first answer
    /// with ``HTTP2ClientConfiguration/singleStreamUntilFirstAnswer``.
    var streamLimit: Int {
        warm || !settings.configuration.singleStreamUntilFirstAnswer ? settings.configuration.maxConcurrentStreams : 1
    }

    // MARK: Any thread

    func submit(_ requests: [PendingRequest]) {
        let accepted = inbox.withLock { box -> Bool in
            if box.stopDeadline != nil { return false }
            box.requests.append(contentsOf: requests)
            return true
        }
        if !accepted {
            for r in requests { r.batch.complete(r.slot, .noAnswer(reason: "transport \(settings.name) is shutting down")) }
            return
        }
        wake()
    }

    /// Asks the thread to finish in-flight work within `deadline` seconds and end.
    func requestStop(deadline: TimeInterval) {
        inbox.withLock { if $0.stopDeadline == nil { $0.stopDeadline = deadline } }
        wake()
    }

    func ended() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = ending.withLock { e -> Bool in
                if e.ended || !e.started { return true }
                e.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    /// Runs `loop` on a thread of the engine's own; ``ended()`` returns after it ended.
    func startThread(_ loop: @escaping @Sendable () -> Void) {
        ending.withLock { $0.started = true }
        OSThread.start(name: "herald-h2-\(settings.name)-\(index)", stackSize: 1 << 20) { [self] in
            loop()
            let waiters = ending.withLock { e -> [CheckedContinuation<Void, Never>] in
                e.ended = true
                defer { e.waiters = [] }
                return e.waiters
            }
            for w in waiters { w.resume() }
        }
    }

    /// Whether the loop should end now: stopping, and nothing left or the stop deadline passed.
    func shouldEnd() -> Bool {
        guard stopping else { return false }
        if stopDeadline == .max { stopDeadline = Self.monotonic() + stopNanoseconds }
        return (inFlight == 0 && waitingCount == 0) || Self.monotonic() > stopDeadline
    }

    private var stopNanoseconds: UInt64 = 0

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
        let (requests, stop) = inbox.withLock { box -> ([PendingRequest], TimeInterval?) in
            let r = box.requests
            box.requests.removeAll(keepingCapacity: true)
            return (r, box.stopDeadline)
        }
        if let stop, !stopping {
            stopping = true
            stopNanoseconds = UInt64(max(0, stop) * 1e9)
        }
        let deadline = Self.monotonic() + timeoutNanoseconds
        for r in requests {
            r.waitDeadline = deadline
            waiting.append(r)
        }
    }

    /// Gives up on requests that waited too long, then starts waiting requests while the
    /// connection has room, each with the headers the hooks give it now.
    func startWaiting() {
        let now = Self.monotonic()
        if warm && inFlight == 0 && lastDoneAt != 0 && now &- lastDoneAt >= idleNanoseconds {
            // Idle past `idleTimeout`: the connection is closed and the next request opens a new
            // one (which, with singleStreamUntilFirstAnswer, carries one stream until it answers).
            warm = false
        }
        let limit = streamLimit
        // Give up on requests that waited too long (paused connection, starved streams). The queue
        // is in deadline order (appended with now + timeout; see takeBack), so the head decides.
        while waitingHead < waiting.count, waiting[waitingHead].waitDeadline < now, inFlight >= limit || now < pausedUntil {
            let r = waiting[waitingHead]
            waitingHead += 1
            let why = lastError.isEmpty ? "no free HTTP/2 stream" : lastError
            finish(r, .noAnswer(reason: "no answer within \(timeoutText): \(why)"))
        }
        if now >= pausedUntil {
            // The hooks choose an attempt's headers as it starts, not when it was queued: APNs's
            // provider token for one queued, taken back or sent again across the 50-minute rollover
            // must not be older than one the connection has seen (429 TooManyProviderTokenUpdates).
            let hooks = settings.hooks
            while inFlight < streamLimit && waitingHead < waiting.count {
                let r = waiting[waitingHead]
                waitingHead += 1
                r.attempts += 1
                if let hooks {
                    switch hooks.willStart(r.attempt) {
                    case .send(let added):
                        if let problem = checkedAdded.problem(added) {
                            finish(r, .failed(.invalidRequest(problem + " (added by the hooks); not sent")))
                            continue
                        }
                        r.added = added
                    case .end(let verdict):
                        finish(r, .endedByHooks(verdict))
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

    /// The connection answered `r`: the hooks review the answer (accept it, resend, or end the
    /// request with their verdict), then it is the request's result.
    func answered(_ r: PendingRequest, status: Int, headers: [HTTP2Header], body: [UInt8], now: UInt64) {
        incidentsSinceAnswer = 0
        lastError = ""
        lastAnswerAt = now
        // An answer to a refused credential does not show that the connection works for others.
        if status != 401 && status != 403 { warm = true }
        responseCounter(status).increment()
        let response = HTTP2Response(status: status, headers: headers, body: body, receivedAt: settings.clock.now, attempts: r.attempts)
        if let hooks = settings.hooks {
            switch hooks.review(response, of: r.attempt) {
            case .accept:
                break
            case .resend:
                r.resends += 1
                r.waitDeadline = now + timeoutNanoseconds
                waiting.append(r)
                return
            case .end(let verdict):
                finish(r, .endedByHooks(verdict))
                return
            }
        }
        finish(r, .answered(response))
    }

    /// `r` failed without an answer: sent again while it has `connectionRetries` left, else `failure`.
    func retryOrFinish(_ r: PendingRequest, now: UInt64, failure: HTTP2Result) {
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

    func finish(_ r: PendingRequest, _ result: HTTP2Result) {
        r.batch.complete(r.slot, result)
    }

    /// Fails everything still queued (shutdown); the engine fails what it has in flight.
    func abandonWaiting(reason: String) {
        takeInbox()
        for i in waitingHead..<waiting.count { finish(waiting[i], .noAnswer(reason: reason)) }
        waiting.removeAll()
        waitingHead = 0
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
                finish(r, .noAnswer(reason: "no answer: \(message)"))
            } else if !wasOnIt {
                r.waitDeadline = deadline
                again.append(r)
            } else if r.retriesLeft > 0 {
                r.retriesLeft -= 1
                r.waitDeadline = deadline
                again.append(r)
            } else {
                finish(r, .noAnswer(reason: "no answer: \(message)"))
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
            settings.logger.info("\(settings.service) connection closed; reconnecting", ["error": message, "engine": String(index)])
            return
        }
        // Failing again before any answer: back off exponentially, 100 ms up to 30 s, with jitter.
        let backoff = min(0.1 * pow(2, Double(incidentsSinceAnswer - 2)), 30)
        let jittered = backoff * Double.random(in: 0.8...1.0)
        pausedUntil = max(pausedUntil, now + UInt64(jittered * 1e9))
        settings.logger.warning("\(settings.service) connection failed again; backing off",
                                ["error": message, "backoff_ms": String(Int(jittered * 1000)), "engine": String(index)])
    }

    static func monotonic() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}
