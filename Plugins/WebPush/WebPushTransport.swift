import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `webpush` transport: Web Push (RFC 8030) to browsers' push services, each message
/// encrypted for its subscription (RFC 8291, `aes128gcm`) and signed with VAPID (RFC 8292).
///
/// A batch is split by push service; each service's share goes out on that service's own
/// client at once, so services never wait for each other. Each service keeps its own backoff
/// and pause (``PushServiceState``): a slow or failing service has at most one batch waiting on
/// it, and its other deliveries are deferred (not sent, attempt not counted) instead of holding
/// the worker's batch slots that the other services use. A service's client unused for
/// `idleTimeout` is closed and dropped (``PushServiceClients``).
public final class WebPushTransport: TransportPlugin {
    public typealias Configuration = WebPushConfiguration

    public static let kind = "webpush"
    public static let overrideBlocks = [WebPushRendering.block]

    public static func configuration(from node: ConfigNode) -> WebPushConfiguration? { WebPushConfiguration.read(node) }

    public let name: String
    let configuration: WebPushConfiguration
    /// Signs (and caches, per origin) the VAPID JWTs.
    let signer: VAPIDSigner
    private let clients: PushServiceClients
    /// The subscriptions delivered to, parsed once.
    let subscriptions: SubscriptionCache
    private let services = Locked<[PushServiceOrigin: PushServiceState]>([:])
    private let policy: PushServiceState.Policy
    /// When idle clients were last looked for.
    private let lastEviction: Locked<Date>
    private let clock: any WallClock
    private let logger: Logger

    public var preferredBatchSize: Int { 200 }

    public init(name: String, configuration: WebPushConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.clock = context.clock
        self.lastEviction = Locked(context.clock.now)
        self.logger = context.logger
        do {
            signer = try VAPIDSigner(privateKey: configuration.vapidKey, subject: configuration.subject,
                                     lifetime: configuration.vapidLifetime, clock: context.clock)
        } catch {
            throw TransportError(transport: name, message: error.description)
        }
        policy = PushServiceState.Policy(refusalsToPause: configuration.refusalsToPause, probeInterval: configuration.probeInterval,
                                         maxBackoff: configuration.maxBackoff)
        subscriptions = SubscriptionCache(allowList: configuration.allowedEndpoints)
        clients = PushServiceClients(transport: name, configuration: configuration, logger: context.logger,
                                     metrics: context.metrics, clock: context.clock)
    }

    /// The push services that refuse the VAPID key, and why.
    public var impairment: String? {
        let paused = services.withLock { s in s.values.compactMap { st in st.pause.map { "\(st.origin): \($0.reason)" } } }.sorted()
        return paused.isEmpty ? nil : "push service " + paused.joined(separator: "; push service ")
    }

    /// The push services with a batch out (for tests).
    var busyServices: Set<String> {
        services.withLock { s in Set(s.values.filter(\.busy).map(\.origin.description)) }
    }

    public func checkReport() async -> [CheckFinding] {
        [CheckFinding(.ok, "VAPID key loaded from \(configuration.vapidKeySource); applicationServerKey \(configuration.vapidKey.publicKey.base64URL)"),
         CheckFinding(.ok, "VAPID subject \(configuration.subject)"),
         CheckFinding(.info, "push services allowed: \(configuration.allowedEndpoints)")]
    }

    public func shutdown() async {
        await clients.stop(deadline: configuration.timeout)
    }

    // MARK: Delivering

    /// One delivery ready to go: its index in the batch, its subscription and its request.
    private struct Prepared {
        var index: Int
        var token: String
        var request: HTTP2Request
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        await evictIdleClients(now: clock.now)
        var outcomes = [DeliveryOutcome?](repeating: nil, count: batch.count)
        var groups: [PushServiceOrigin: [(Int, WebPushSubscription)]] = [:]
        var order: [PushServiceOrigin] = []
        for (i, d) in batch.enumerated() {
            do throws(AddressProblem) {
                let s = try subscriptions.subscription(stored: d.token)
                if groups[s.origin] == nil { order.append(s.origin) }
                groups[s.origin, default: []].append((i, s))
            } catch {
                outcomes[i] = .rejected(reason: "not a usable subscription for route \(name): \(error)")
            }
        }
        let now = clock.now
        var sends: [(PushServiceOrigin, [Prepared])] = []
        for origin in order {
            let group = groups[origin]!
            let admission = services.withLock { s in
                var st = s[origin] ?? PushServiceState(origin: origin)
                let a = st.admit(count: group.count, now: now, policy: policy)
                s[origin] = st
                return a
            }
            let count: Int
            switch admission {
            case .hold(let after, let reason):
                for (i, _) in group { outcomes[i] = .deferred(after: after, reason: reason) }
                continue
            case .send(let n, let holdRest, let reason):
                count = n
                for (i, _) in group.dropFirst(n) { outcomes[i] = .deferred(after: holdRest, reason: reason) }
            }
            var prepared: [Prepared] = []
            for (i, subscription) in group.prefix(count) {
                switch request(for: batch[i], subscription, now: now) {
                case .success(let r): prepared.append(Prepared(index: i, token: batch[i].token, request: r))
                case .failure(let box): outcomes[i] = box.outcome
                }
            }
            if prepared.isEmpty {
                services.withLock { $0[origin]?.batchEnded(latency: 0, now: now) }
            } else {
                sends.append((origin, prepared))
            }
        }
        // Each service's answers are recorded as soon as they come, so a service is free for the
        // next batch once it answered, however long another service of this batch takes.
        let answered = await withTaskGroup(of: [(Int, DeliveryOutcome)].self) { group in
            for (origin, prepared) in sends {
                group.addTask { [self] in
                    let started = clock.now
                    var results = await send(prepared.map(\.request), to: origin)
                    // A service without HTTP/2 on the nghttp2 engine: once, its requests go again over HTTP/1.1.
                    let noHTTP2 = results.indices.filter { if case .failed(.noHTTP2) = results[$0] { return true }; return false }
                    if !noHTTP2.isEmpty, await clients.fallBackToHTTP1(origin) {
                        let again = await send(noHTTP2.map { prepared[$0].request }, to: origin)
                        for (i, r) in zip(noHTTP2, again) { results[i] = r }
                    }
                    return record(results, of: prepared, origin: origin, latency: clock.now.timeIntervalSince(started))
                }
            }
            var all: [(Int, DeliveryOutcome)] = []
            for await r in group { all += r }
            return all
        }
        for (index, outcome) in answered { outcomes[index] = outcome }
        return outcomes.map { $0 ?? .retry(after: nil, reason: "no outcome recorded") }
    }

    /// Sends `requests` on `origin`'s client (made on first use, released after).
    private func send(_ requests: [HTTP2Request], to origin: PushServiceOrigin) async -> [HTTP2Result] {
        do throws(HTTP2ClientError) {
            guard let client = try clients.client(for: origin) else {
                return requests.map { _ in .noAnswer(reason: "the transport is shutting down") }
            }
            defer { clients.release(origin) }
            return await client.send(requests)
        } catch {
            return requests.map { _ in .failed(error) }
        }
    }

    /// Closes the clients of push services unused for `idleTimeout`, and forgets their state
    /// unless it still matters (a pause, a backoff not over, a batch out). Runs from
    /// ``deliver(_:)`` at most once per quarter of `idleTimeout` (and at least once a minute).
    func evictIdleClients(now: Date) async {
        let due = lastEviction.withLock { last -> Bool in
            guard now.timeIntervalSince(last) >= min(60, configuration.idleTimeout / 4) || now < last else { return false }
            last = now
            return true
        }
        guard due else { return }
        let evicted = await clients.evictIdle()
        guard !evicted.isEmpty else { return }
        services.withLock { s in
            for origin in evicted {
                guard let st = s[origin], !st.busy, st.pause == nil, (st.backoffUntil ?? .distantPast) <= now else { continue }
                s[origin] = nil
            }
        }
    }

    /// How many push services have a client now (for tests).
    var openClients: Int { clients.count }

    /// Records one service's answers in its state; the outcomes by batch index.
    private func record(_ results: [HTTP2Result], of prepared: [Prepared], origin: PushServiceOrigin, latency: TimeInterval) -> [(Int, DeliveryOutcome)] {
        let now = clock.now
        let (outcomes, wasPaused, pause): ([(Int, DeliveryOutcome)], Bool, PushServiceState.Pause?) = services.withLock { s in
            var st = s[origin] ?? PushServiceState(origin: origin)
            let was = st.pause != nil
            var out: [(Int, DeliveryOutcome)] = []
            for (p, result) in zip(prepared, results) { out.append((p.index, outcome(of: result, token: p.token, state: &st, now: now))) }
            st.batchEnded(latency: latency, now: now)
            s[origin] = st
            return (out, was, st.pause)
        }
        if let pause, !wasPaused {
            logger.error("push service paused: it refuses this transport's VAPID key; its deliveries wait. Fix vapidKey or subject and send SIGHUP",
                         ["push_service": origin.description, "reason": pause.reason])
        } else if pause == nil, wasPaused {
            logger.notice("push service resumed: it accepted the VAPID key again", ["push_service": origin.description])
        }
        return outcomes
    }

    /// The request for one delivery: encrypted body and headers, or the outcome when it cannot be sent.
    private func request(for d: Delivery, _ s: WebPushSubscription, now: Date) -> Result<HTTP2Request, DeliveryOutcomeBox> {
        let plaintext = WebPushRendering.plaintext(d.payload.body, createdAt: d.acceptedAt ?? now)
        let body: [UInt8]
        do throws(WebPushEncryptionError) {
            body = try WebPushEncryption.encrypt(plaintext: plaintext, userAgentPublicKey: s.userAgentPublicKey, authSecret: s.auth)
        } catch {
            switch error {
            case .plaintextTooLong, .invalidUserAgentPublicKey, .invalidAuthSecret:
                return .failure(DeliveryOutcomeBox(.rejected(reason: "cannot encrypt for this subscription: \(error)")))
            default:
                return .failure(DeliveryOutcomeBox(.retry(after: nil, reason: "encryption failed: \(error)")))
            }
        }
        let authorization: String
        do throws(VAPIDError) {
            authorization = try signer.authorization(for: s.endpoint)
        } catch {
            return .failure(DeliveryOutcomeBox(.setupFailure(reason: error.description)))
        }
        var headers = [HTTP2Header("ttl", String(WebPushRendering.ttl(d.payload, now: now))),
                       HTTP2Header("content-encoding", "aes128gcm"),
                       HTTP2Header("content-type", "application/octet-stream"),
                       HTTP2Header("authorization", authorization)]
        if let u = d.payload.headers[WebPushRendering.Header.urgency] { headers.append(HTTP2Header("urgency", u)) }
        if let t = d.payload.headers[WebPushRendering.Header.topic] { headers.append(HTTP2Header("topic", t)) }
        return .success(HTTP2Request(method: "POST", path: s.path, headers: headers, body: HTTP2Body(body)))
    }

    /// What one result means, through the service's state.
    private func outcome(of result: HTTP2Result, token: String, state st: inout PushServiceState, now: Date) -> DeliveryOutcome {
        switch result {
        case .answered(let r):
            if let failure = WebPushFailure(status: r.status, body: r.body) {
                return st.record(.failed(failure, retryAfter: r.retryAfter), token: token, now: now, policy: policy)
            }
            return st.record(.accepted(receipt: r.header("location")), token: token, now: now, policy: policy)
        case .noAnswer(let reason):
            return st.record(.failed(.noAnswer(reason), retryAfter: nil), token: token, now: now, policy: policy)
        case .failed(let error):
            switch error {
            case .invalidRequest: return .rejected(reason: "\(error)")
            case .tls, .unsupportedProxy, .noHTTP2: return .setupFailure(reason: "push service \(st.origin): \(error)")
            default: return st.record(.failed(.noAnswer(error.description), retryAfter: nil), token: token, now: now, policy: policy)
            }
        case .endedByHooks:
            return .retry(after: nil, reason: "ended by the client's hooks")
        }
    }
}

/// A ``DeliveryOutcome`` as an error, for `Result`.
struct DeliveryOutcomeBox: Error {
    var outcome: DeliveryOutcome
    init(_ outcome: DeliveryOutcome) { self.outcome = outcome }
}
