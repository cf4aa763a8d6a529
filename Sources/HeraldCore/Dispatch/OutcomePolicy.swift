import FoundationEssentials
import Glibc

/// What the delivery engine does next with a delivery, decided by ``OutcomePolicy``.
public enum DeliveryAction: Sendable, Equatable {
    /// Done: record this final state and reason.
    case finish(DeliveryState, reason: String?)
    /// Send again at this time (attempt + 1).
    case retry(at: Date, reason: String)
    /// Mark the token invalid as of `since` in the store (timestamp rule), then finish as
    /// `invalid_token`.
    case invalidate(since: Date, reason: String)
    /// The transport cannot work until its setup is fixed: pause it, and put the delivery back
    /// in the queue without counting the attempt.
    case pause(reason: String)
    /// Wait for the device (its stream is closed) until `until`, state `parked`.
    case park(until: Date, reason: String)
    /// Hand the delivery to its fallback transport, due now.
    case reroute(to: String, reason: String)
    /// Put the delivery back, due at `until`, without counting the attempt (it was not sent).
    case postpone(until: Date, reason: String)
}

/// What the policy needs to know of an app's local (stream) delivery.
public struct LocalDeliveryRules: Sendable, Equatable {
    /// How long a notification waits for a device whose stream closed before it falls back.
    public var presenceGrace: TimeInterval
    /// How long a notification waits in the inbox for a device that is not connected.
    public var inboxTTL: TimeInterval

    public init(presenceGrace: TimeInterval = 0, inboxTTL: TimeInterval = 86_400) {
        self.presenceGrace = presenceGrace
        self.inboxTTL = inboxTTL
    }
}

/// Decides what follows a transport's outcome: finish, retry later, invalidate the token, or
/// pause the transport.
///
/// Pure and clock-free (the time comes in as an argument): the one place where an outcome
/// becomes an action, for the daemon's durable queue and the CLI's in-memory one alike.
public struct OutcomePolicy: Sendable {
    public var retry: RetryPolicy
    /// Per app id; apps without an entry use the defaults.
    public var local: [String: LocalDeliveryRules]

    public init(retry: RetryPolicy, local: [String: LocalDeliveryRules] = [:]) {
        self.retry = retry
        self.local = local
    }

    /// What follows `outcome` for `delivery`, accepted at `acceptedAt`: a fallback replaces
    /// finishing as `invalid_token` or `rejected`, and a local delivery whose device is not
    /// connected waits out the presence grace, falls back, or waits in the inbox until its TTL.
    public func action(for outcome: DeliveryOutcome, delivery d: Delivery, acceptedAt: Date, now: Date,
                       random: Double) -> DeliveryAction {
        switch outcome {
        case .notConnected(let since):
            let rules = local[d.app] ?? LocalDeliveryRules()
            if let since, since.addingTimeInterval(rules.presenceGrace) > now {
                return .park(until: since.addingTimeInterval(rules.presenceGrace),
                             reason: "device not connected; waiting \(Self.seconds(rules.presenceGrace)) (presenceGrace) for it to return")
            }
            if let fallback = d.fallback {
                return .reroute(to: fallback, reason: "device not connected; sent through \(fallback)")
            }
            let end = acceptedAt.addingTimeInterval(rules.inboxTTL)
            if end <= now || OutcomePolicy.hasExpired(d.payload, now: now) {
                return .finish(.expired, reason: "not connected within the inbox TTL (\(Self.seconds(rules.inboxTTL)))")
            }
            let until = min(end, d.payload.expirationDate ?? end)
            return .park(until: until, reason: "in the inbox until the device connects")
        case .rejected(let reason):
            if let fallback = d.fallback { return .reroute(to: fallback, reason: "\(reason); kept for \(fallback)") }
        case .tokenInvalid(let since, let reason):
            if d.fallback != nil { return .invalidate(since: since ?? now, reason: reason) }
        default:
            break
        }
        return action(for: outcome, attempt: d.attempt, expiration: d.payload.expiration, now: now, random: random)
    }

    private static func seconds(_ t: TimeInterval) -> String { "\(Int(t.rounded()))s" }

    /// - Parameters:
    ///   - attempt: the attempt that produced `outcome` (1-based).
    ///   - expiration: the rendered payload's expiration (``RenderedPayload/expiration``).
    ///   - random: a number in 0..<1 for the jitter.
    public func action(for outcome: DeliveryOutcome, attempt: Int, expiration: Int64?, now: Date,
                       random: Double) -> DeliveryAction {
        switch outcome {
        case .delivered(_, let evidence):
            return .finish(.delivered, reason: evidence)
        case .rejected(let reason):
            return .finish(.rejected, reason: reason)
        case .expired:
            return .finish(.expired, reason: nil)
        case .setupFailure(let reason):
            return .pause(reason: reason)
        case .tokenInvalid(let since, let reason):
            return .invalidate(since: since ?? now, reason: reason)
        case .notConnected:
            return .finish(.failed, reason: "device not connected")
        case .deferred(let after, let reason):
            let at = now.addingTimeInterval(max(0, after ?? 1))
            if expiration == 0 { return .finish(.expired, reason: "\(reason) (now or never: not sent)") }
            if let until = RenderedPayload(body: [], expiration: expiration).expirationDate, at > until {
                return .finish(.expired, reason: "\(reason) (expires before it can be sent)")
            }
            return .postpone(until: at, reason: reason)
        case .retry(let after, let reason):
            // An expiration of 0 means now-or-never: no second attempt.
            let until = expiration == 0 ? now : RenderedPayload(body: [], expiration: expiration).expirationDate
            switch retry.decide(afterAttempt: attempt, now: now, expiration: until, suggested: after, random: random) {
            case .retry(let at):
                return .retry(at: at, reason: reason)
            case .exhausted:
                return .finish(.failed, reason: "\(reason) (gave up after \(attempt) attempt\(attempt == 1 ? "" : "s"))")
            case .wouldExpire:
                return .finish(.expired, reason: "\(reason) (expires before the next attempt)")
            }
        }
    }

    /// Whether a delivery must not be sent any more because its expiration has passed.
    public static func hasExpired(_ payload: RenderedPayload, now: Date) -> Bool {
        guard let expiration = payload.expirationDate else { return false }
        return now > expiration
    }
}
