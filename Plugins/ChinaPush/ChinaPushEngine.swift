import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// What a vendor answered one batch call (one notification to up to ``ChinaPushVendor/maxBatch`` devices).
public enum VendorAnswer: Sendable, Equatable {
    /// One outcome per device of the group, in order (success, invalid tokens, per-device refusals).
    case outcomes([DeliveryOutcome])
    /// The access token expired or was refused (HMS 80200003/80200001, OPPO 11, vivo 10000…):
    /// fetch a new one and send once more.
    case accessTokenExpired(String)
    /// The credentials are wrong (Xiaomi 21301, OPPO 14/16, vivo 10206/10200): pause the transport.
    case badCredentials(String)
    /// Too many requests now: retry with backoff (no sooner than `retryAfter` when given).
    case rateLimited(String, retryAfter: TimeInterval?)
    /// The vendor's daily quota is used up: retry after the vendor's day ends (midnight UTC+8).
    case dailyQuota(String)
    /// 5xx, `-1`, no answer: retry with backoff.
    case temporary(String, retryAfter: TimeInterval?)
    /// The vendor refused the notification itself (a field, a size): never retried.
    case rejected(String)

    /// The answer to a request that got no vendor answer at all (a lost connection, a
    /// refused request, a deadline): `nil` when `result` holds an answer the vendor's own reader reads.
    public static func transportFailure(_ result: HTTP2Result, vendor: String) -> VendorAnswer? {
        switch result {
        case .answered(let r):
            if r.status >= 500 { return .temporary("\(vendor) answered HTTP \(r.status)", retryAfter: r.retryAfter) }
            if r.status == 429 { return .rateLimited("\(vendor) answered HTTP 429", retryAfter: r.retryAfter) }
            return nil
        case .noAnswer(let reason): return .temporary("no answer from \(vendor): \(reason)", retryAfter: nil)
        case .failed(let error):
            if case .invalidRequest = error { return .rejected(error.description) }
            return .badCredentials("cannot reach \(vendor): \(error.description)")
        case .endedByHooks: return .temporary("ended by the HTTP client's hooks", retryAfter: nil)
        }
    }
}

/// What a vendor plugin tells the shared engine: how to get an access token, and how to send
/// one notification to a group of devices.
///
/// A vendor whose send is one request implements ``request(for:accessToken:)`` and
/// ``answer(_:for:)``: the engine then sends the requests of a whole batch in one call of the
/// shared HTTP client (one wake-up of its connection thread, not one per request). A vendor that
/// needs several requests for some groups (vivo's list push) returns `nil` for those and
/// implements ``send(_:accessToken:)``.
public protocol ChinaPushVendor: Sendable {
    /// The vendor's name in reasons, logs and `/readyz` (`HMS`, `Xiaomi`, `OPPO`, `vivo`).
    var label: String { get }
    /// The most devices in one batch call.
    var maxBatch: Int { get }
    /// Whether sends need an access token (Xiaomi's key goes on every request instead).
    var usesAccessToken: Bool { get }
    /// How long before an access token expires to refresh it.
    var refreshMargin: TimeInterval { get }
    /// The connections ``request(for:accessToken:)``'s requests go on (`nil`: only ``send(_:accessToken:)``).
    var http: VendorHTTP? { get }
    /// Asks the auth endpoint for a token, once.
    func fetchAccessToken() async -> TokenGrant
    /// The one request that sends `group`'s notification to its devices, or `nil` when it takes
    /// more (then ``send(_:accessToken:)``).
    func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request?
    /// Reads the vendor's answer to ``request(for:accessToken:)``.
    func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer
    /// Sends one notification (the group's deliveries share a payload) to the group's devices.
    func send(_ group: [Delivery], accessToken: Secret?) async -> VendorAnswer
    /// Opens the vendor's connections (default: ``http``'s).
    func start() throws(HTTP2ClientError)
    /// Closes them once in-flight requests finish or `deadline` seconds pass (default: ``http``'s).
    func stop(deadline: TimeInterval) async
}

extension ChinaPushVendor {
    public var usesAccessToken: Bool { true }
    public var refreshMargin: TimeInterval { 300 }
    public var http: VendorHTTP? { nil }
    public func start() throws(HTTP2ClientError) { try http?.start() }
    public func stop(deadline: TimeInterval) async { await http?.stop(deadline: deadline) }
    public func fetchAccessToken() async -> TokenGrant { .refused("\(label) has no access token") }
    public func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request? { nil }
    public func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer {
        .temporary("\(label) has no reader of single answers", retryAfter: nil)
    }

    /// One request (``request(for:accessToken:)``) on ``http``.
    public func send(_ group: [Delivery], accessToken: Secret?) async -> VendorAnswer {
        guard let http, let request = request(for: group, accessToken: accessToken) else {
            return .rejected("the rendered \(label) message cannot be read")
        }
        return answer(await http.send([request])[0], for: group)
    }
}

/// The delivery loop the vendor plugins share: groups a batch by notification into the vendor's
/// batch calls, holds an access token (one refresh at a time, a second try after the vendor says it
/// expired), and turns limits into retries.
///
/// - A rate limit is retried with the delivery engine's backoff (or the vendor's `Retry-After`).
/// - A daily quota closes the route, for the kind of message it counts (``MessageKind``:
///   operational or system), until the vendor's day ends (midnight UTC+8): those deliveries are
///   deferred to then unsent, or end `expired` when their expiration comes first, while the other
///   kind goes on; ``impairment`` names the quota for `/readyz` meanwhile.
/// - Bad credentials (refused at the auth endpoint, or by the send) are setup failures: the host
///   pauses the transport until a reload with fixed secrets.
/// Both limits are counted in `herald_vendor_limited_total{transport,vendor,limit}`.
public final class ChinaPushEngine: Sendable {
    public let name: String
    public let vendor: any ChinaPushVendor
    private let clock: any WallClock
    private let logger: Logger
    private let tokens: AccessTokenCache?
    private let rateLimited: Counter
    private let quotaHits: Counter
    /// Per kind of message (``MessageKind``): when its daily quota opens again.
    private let quotaUntil = Locked<[String: Date]>([:])

    public init(name: String, vendor: any ChinaPushVendor, context: TransportContext) {
        self.name = name
        self.vendor = vendor
        clock = context.clock
        logger = context.logger.labeled("transport.\(name)")
        if vendor.usesAccessToken {
            tokens = AccessTokenCache(label: vendor.label, clock: context.clock, logger: logger, refreshMargin: vendor.refreshMargin) {
                await vendor.fetchAccessToken()
            }
        } else {
            tokens = nil
        }
        let help = "Sends a China vendor refused for a rate limit or a used-up daily quota, by transport."
        rateLimited = context.metrics.counter("herald_vendor_limited_total", help: help,
                                              labels: [("transport", name), ("vendor", vendor.label), ("limit", "rate")])
        quotaHits = context.metrics.counter("herald_vendor_limited_total", help: help,
                                            labels: [("transport", name), ("vendor", vendor.label), ("limit", "daily_quota")])
    }

    /// How many access tokens were fetched (tests).
    public var tokensFetched: Int { get async { await tokens?.fetched ?? 0 } }

    /// The daily quotas used up, while they are: `/readyz` shows them.
    public var impairment: String? {
        let now = clock.now
        let closed = quotaUntil.withLock { $0 }.filter { now < $0.value }
        guard let until = closed.values.max() else { return nil }
        let kinds = closed.keys.sorted().joined(separator: " and ")
        return "\(vendor.label) daily quota used up on route \(name) until \(Self.beijingTime(until)) (midnight UTC+8) for \(kinds) messages"
    }

    /// One outcome per delivery, in order.
    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        guard !batch.isEmpty else { return [] }
        var outcomes = [DeliveryOutcome?](repeating: nil, count: batch.count)
        // A kind of message whose daily quota is used up waits for the vendor's next day unsent.
        let now = clock.now
        let closed = quotaUntil.withLock { $0 }.filter { now < $0.value }
        // One notification's deliveries share a payload: one batch call per notification per maxBatch devices.
        var groups: [[Int]] = []
        var byNotification: [String: Int] = [:]
        for (i, d) in batch.enumerated() {
            if let until = closed[MessageKind.of(d.payload)] {
                outcomes[i] = quotaOutcome(d, until: until)
                continue
            }
            if let g = byNotification[d.notificationID], groups[g].count < vendor.maxBatch {
                groups[g].append(i)
            } else {
                byNotification[d.notificationID] = groups.count
                groups.append([i])
            }
        }
        guard !groups.isEmpty else { return outcomes.map { $0 ?? .retry(after: nil, reason: "not sent") } }
        let results = await send(groups.map { $0.map { batch[$0] } })
        for (indices, result) in zip(groups, results) {
            for (i, o) in zip(indices, result) { outcomes[i] = o }
        }
        return outcomes.map { $0 ?? .retry(after: nil, reason: "not sent") }
    }

    /// Stops a token refresh in flight.
    public func stop() async { await tokens?.stop() }

    /// Sends each group (one notification to its devices); an access token the vendor calls
    /// expired is fetched again and the groups it refused sent once more.
    private func send(_ groups: [[Delivery]]) async -> [[DeliveryOutcome]] {
        var outcomes = [[DeliveryOutcome]?](repeating: nil, count: groups.count)
        var pending = Array(groups.indices)
        for round in 0..<2 {
            var token: Secret? = nil
            if let tokens {
                do { token = try await tokens.token() } catch {
                    let outcome: DeliveryOutcome
                    switch error {
                    case .setup(let reason): outcome = .setupFailure(reason: reason)
                    case .temporary(let reason, let after): outcome = .retry(after: after, reason: reason)
                    }
                    for i in pending { outcomes[i] = groups[i].map { _ in outcome } }
                    break
                }
            }
            let answers = await answers(pending.map { groups[$0] }, token: token)
            var again: [Int] = []
            for (i, answer) in zip(pending, answers) {
                if case .accessTokenExpired(let reason) = answer {
                    if round == 0, token != nil {
                        again.append(i)
                    } else {
                        outcomes[i] = groups[i].map { _ in .setupFailure(reason: "\(vendor.label) refused a freshly fetched access token: \(reason)") }
                    }
                    continue
                }
                outcomes[i] = outcomesOf(answer, group: groups[i])
            }
            guard !again.isEmpty, let token, let tokens else { break }
            logger.info("\(vendor.label) says the access token expired; fetching a new one and sending once more", ["groups": String(again.count)])
            await tokens.invalidate(token)
            pending = again
        }
        return groups.indices.map { outcomes[$0] ?? groups[$0].map { _ in .retry(after: nil, reason: "not sent") } }
    }

    /// The vendor's answer to each group: single requests together in one call of the HTTP
    /// client, the others (several requests each) side by side.
    private func answers(_ groups: [[Delivery]], token: Secret?) async -> [VendorAnswer] {
        var answers = [VendorAnswer?](repeating: nil, count: groups.count)
        var single: [(index: Int, request: HTTP2Request)] = []
        var multi: [Int] = []
        let http = vendor.http
        for (i, g) in groups.enumerated() {
            if http != nil, let r = vendor.request(for: g, accessToken: token) { single.append((i, r)) } else { multi.append(i) }
        }
        let vendor = self.vendor
        let requests = single.map(\.request)
        async let results: [HTTP2Result] = requests.isEmpty ? [] : (http?.send(requests) ?? [])
        let others = await withTaskGroup(of: (Int, VendorAnswer).self) { tasks -> [(Int, VendorAnswer)] in
            for i in multi {
                let g = groups[i]
                tasks.addTask { (i, await vendor.send(g, accessToken: token)) }
            }
            var all: [(Int, VendorAnswer)] = []
            for await a in tasks { all.append(a) }
            return all
        }
        for (i, a) in others { answers[i] = a }
        for ((i, _), r) in zip(single, await results) { answers[i] = vendor.answer(r, for: groups[i]) }
        return answers.map { $0 ?? .temporary("no answer", retryAfter: nil) }
    }

    /// What an answer (other than an expired token) means for each device of the group.
    private func outcomesOf(_ answer: VendorAnswer, group: [Delivery]) -> [DeliveryOutcome] {
        switch answer {
        case .outcomes(let outcomes) where outcomes.count == group.count:
            return outcomes
        case .outcomes(let outcomes):
            return group.map { _ in .retry(after: nil, reason: "\(vendor.label) answered \(outcomes.count) results for \(group.count) devices") }
        case .accessTokenExpired(let reason):
            return group.map { _ in .setupFailure(reason: "\(vendor.label) refused a freshly fetched access token: \(reason)") }
        case .badCredentials(let reason):
            return group.map { _ in .setupFailure(reason: reason) }
        case .rateLimited(let reason, let after):
            rateLimited.increment(by: Int64(group.count))
            return group.map { _ in .retry(after: after, reason: "rate limited: \(reason)") }
        case .dailyQuota(let reason):
            quotaHits.increment(by: Int64(group.count))
            let until = VendorDay.end(of: clock.now)
            let kind = MessageKind.of(group[0].payload)
            let first = quotaUntil.withLock { u -> Bool in
                defer { u[kind] = until }
                return u[kind] != until
            }
            if first {
                logger.warning("\(vendor.label) daily quota used up; holding these messages until midnight UTC+8",
                               ["reason": reason, "until": Self.beijingTime(until), "kind": kind])
            }
            return group.map { quotaOutcome($0, until: until) }
        case .temporary(let reason, let after):
            return group.map { _ in .retry(after: after, reason: reason) }
        case .rejected(let reason):
            return group.map { _ in .rejected(reason: reason) }
        }
    }

    /// Deferred to the end of the vendor day, or expired when the notification expires first.
    private func quotaOutcome(_ d: Delivery, until: Date) -> DeliveryOutcome {
        if let e = d.payload.expiration, e == 0 || TimeInterval(e) < until.timeIntervalSince1970 { return .expired }
        return .deferred(after: max(1, until.timeIntervalSince(clock.now)),
                         reason: "\(vendor.label) daily quota used up until \(Self.beijingTime(until)) (midnight UTC+8)")
    }

    /// `2026-12-07T00:00+08:00`.
    static func beijingTime(_ date: Date) -> String {
        let t = Int64(date.timeIntervalSince1970 + VendorDay.utcOffset)
        let days = t >= 0 ? t / 86_400 : (t - 86_399) / 86_400
        let secs = t - days * 86_400
        // Civil date from days since 1970 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(y)-\(two(m))-\(two(d))T\(two(secs / 3600)):\(two(secs % 3600 / 60))+08:00"
    }
}

/// Per-device outcomes from a batch answer.
public enum BatchOutcomes {
    /// `.delivered(receipt)` for each token, `.tokenInvalid(since: now)` for those in `invalid`.
    public static func map(_ group: [Delivery], invalid: Set<String>, receipt: String?, now: Date, vendor: String,
                           reason: String = "the vendor reports the token invalid") -> [DeliveryOutcome] {
        group.map { d in
            invalid.contains(d.token) ? .tokenInvalid(since: now, reason: "\(vendor): \(reason)") : .delivered(receipt: receipt)
        }
    }
}
