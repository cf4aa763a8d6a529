import FoundationEssentials
import Glibc
import HeraldCore

/// One push service's (origin's) state in a `webpush` transport: whether a batch is waiting on
/// its answers, its backoff, and whether it is paused for refusing the VAPID key. Pure (the time
/// comes in as an argument), so tests drive it without a network.
///
/// The rules, per push service:
/// - **One batch at a time.** While a batch waits on its answers, the service's deliveries in
///   other batches are not sent but deferred (attempt not counted), so a slow service holds at
///   most one of the worker's batch slots and the other services keep theirs.
/// - **Backoff.** 429, 5xx or no answer: the deliveries are retried (honouring `Retry-After`),
///   and the service's other deliveries are deferred until its backoff ends (1 s doubling to
///   `maxBackoff`, reset by an accepted message).
/// - **401/403.** At a service that has accepted this transport's VAPID key, the refusal is the
///   subscription's (it was made with another `applicationServerKey`): `rejected`. At a service
///   that has accepted none, it is retried; once `refusalsToPause` different subscriptions were
///   refused there, the key itself is refused: the service is paused (its deliveries deferred,
///   one sent every `probeInterval` to see whether it accepts again) and `/readyz` says why.
struct PushServiceState: Sendable {
    /// The tunables (from the configuration).
    struct Policy: Sendable {
        var refusalsToPause = 3
        var probeInterval: TimeInterval = 60
        var initialBackoff: TimeInterval = 1
        var maxBackoff: TimeInterval = 300
    }

    /// What a push service answered one request.
    enum Answer: Sendable, Equatable {
        case accepted(receipt: String?)
        case failed(WebPushFailure, retryAfter: TimeInterval?)
    }

    /// Which of a group of deliveries to this service go now.
    enum Admission: Sendable, Equatable {
        /// Send the first `count` (all, or one probe); hold the rest for `after` seconds.
        case send(count: Int, holdRest: TimeInterval, reason: String)
        /// Send none: defer them all for `after` seconds.
        case hold(after: TimeInterval, reason: String)
    }

    struct Pause: Sendable, Equatable {
        var reason: String
        var nextProbe: Date
    }

    let origin: PushServiceOrigin
    private(set) var busy = false
    /// Whether the service accepted a message signed with this transport's key since it started.
    private(set) var accepted = false
    private(set) var failures = 0
    private(set) var backoffUntil: Date?
    private(set) var lastFailure = ""
    private(set) var refused: Set<String> = []
    private(set) var pause: Pause?
    private var lastLatency: TimeInterval = 0.5
    /// The longest Retry-After (or computed delay) of the batch out, when it saw a temporary failure.
    private var batchBackoff: TimeInterval?

    init(origin: PushServiceOrigin) { self.origin = origin }

    /// Decides which of `count` deliveries go now; marks the service busy when any do.
    mutating func admit(count: Int, now: Date, policy: Policy) -> Admission {
        if var p = pause {
            guard !busy, now >= p.nextProbe else {
                return .hold(after: max(0.1, p.nextProbe.timeIntervalSince(now)), reason: "push service \(origin) is paused: \(p.reason)")
            }
            p.nextProbe = now.addingTimeInterval(policy.probeInterval)
            pause = p
            busy = true
            return .send(count: 1, holdRest: policy.probeInterval, reason: "push service \(origin) is paused: \(p.reason)")
        }
        if let until = backoffUntil, until > now {
            return .hold(after: until.timeIntervalSince(now), reason: "push service \(origin) is backing off after \(lastFailure)")
        }
        if busy {
            return .hold(after: min(5, max(0.25, lastLatency)), reason: "push service \(origin) is still answering an earlier batch")
        }
        busy = true
        return .send(count: count, holdRest: 0, reason: "")
    }

    /// The outcome of one answer, for the subscription `token`.
    mutating func record(_ answer: Answer, token: String, now: Date, policy: Policy) -> DeliveryOutcome {
        switch answer {
        case .accepted(let receipt):
            accepted = true
            failures = 0
            backoffUntil = nil
            refused = []
            pause = nil
            return .delivered(receipt: receipt)
        case .failed(let failure, let retryAfter):
            switch failure {
            case .notFound, .gone:
                return .tokenInvalid(since: nil, reason: failure.description)
            case .payloadTooLarge, .badRequest, .unknown:
                return .rejected(reason: failure.description)
            case .vapidRefused:
                if let p = pause {
                    return .deferred(after: max(0.1, p.nextProbe.timeIntervalSince(now)), reason: "push service \(origin) is paused: \(p.reason)")
                }
                if accepted {
                    return .rejected(reason: "\(failure); this push service accepts the VAPID key for other subscriptions, so this one was made with another applicationServerKey")
                }
                refused.insert(token)
                if refused.count >= policy.refusalsToPause {
                    let reason = "it refused the VAPID JWT for every subscription tried (\(refused.count)) and accepted none: \(failure); check vapidKey and subject (probing every \(Int(policy.probeInterval))s)"
                    pause = Pause(reason: reason, nextProbe: now.addingTimeInterval(policy.probeInterval))
                    return .deferred(after: policy.probeInterval, reason: "push service \(origin) is paused: \(reason)")
                }
                return .retry(after: nil, reason: "\(failure) (the push service has accepted no message with this VAPID key yet: the key or this subscription is at fault)")
            case .tooManyRequests, .serviceError, .noAnswer:
                lastFailure = failure.description
                let delay = max(retryAfter ?? 0, backoff(afterFailures: failures + 1, policy: policy))
                batchBackoff = max(batchBackoff ?? 0, delay)
                return .retry(after: delay, reason: failure.description)
            }
        }
    }

    /// The batch out has all its answers: the service takes the next one, after its backoff if it failed.
    mutating func batchEnded(latency: TimeInterval, now: Date) {
        busy = false
        lastLatency = latency
        if let delay = batchBackoff {
            failures += 1
            backoffUntil = now.addingTimeInterval(delay)
            batchBackoff = nil
        }
    }

    /// `initialBackoff × 2^(n−1)`, at most `maxBackoff`.
    func backoff(afterFailures n: Int, policy: Policy) -> TimeInterval {
        min(policy.maxBackoff, policy.initialBackoff * pow(2, Double(max(0, n - 1))))
    }
}
