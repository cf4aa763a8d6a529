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
}

/// Decides what follows a transport's outcome: finish, retry later, invalidate the token, or
/// pause the transport.
///
/// Pure and clock-free (the time comes in as an argument): the one place where an outcome
/// becomes an action, for the daemon's durable queue and the CLI's in-memory one alike.
public struct OutcomePolicy: Sendable {
    public var retry: RetryPolicy

    public init(retry: RetryPolicy) { self.retry = retry }

    /// - Parameters:
    ///   - attempt: the attempt that produced `outcome` (1-based).
    ///   - random: a number in 0..<1 for the jitter.
    public func action(for outcome: DeliveryOutcome, attempt: Int, content: NotificationContent, now: Date,
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
        case .retry(let after, let reason):
            // apns-expiration 0 means now-or-never: no second attempt.
            let expiration = content.apns.expiration == 0 ? now : content.expirationDate
            switch retry.decide(afterAttempt: attempt, now: now, expiration: expiration, suggested: after, random: random) {
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
    public static func hasExpired(_ content: NotificationContent, now: Date) -> Bool {
        guard let expiration = content.expirationDate else { return false }
        return now > expiration
    }
}
