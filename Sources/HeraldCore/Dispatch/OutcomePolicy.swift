import FoundationEssentials
import Glibc

/// Decides what follows a transport's outcome: finish, retry later, or invalidate the token.
///
/// Pure and clock-free (the time comes in as an argument), so the in-process dispatcher and the
/// daemon's durable queue make exactly the same decisions, and tests check them directly.
public struct OutcomePolicy: Sendable {
    public var retry: RetryPolicy

    public init(retry: RetryPolicy) { self.retry = retry }

    /// The next step for a delivery.
    public enum Action: Sendable, Equatable {
        /// Done; report this outcome and reason.
        case finish(DeliveryReport.Outcome, reason: String?)
        /// Send again at this time (attempt + 1).
        case retry(at: Date, reason: String)
        /// Mark the token invalid as of `since` in the store (timestamp rule), then finish as
        /// `invalid_token`.
        case invalidate(since: Date, reason: String)
    }

    /// - Parameters:
    ///   - attempt: the attempt that produced `outcome` (1-based).
    ///   - random: a number in 0..<1 for the jitter.
    public func action(for outcome: DeliveryOutcome, attempt: Int, content: NotificationContent, now: Date,
                       random: Double) -> Action {
        switch outcome {
        case .delivered:
            return .finish(.delivered, reason: nil)
        case .rejected(let reason):
            return .finish(.rejected, reason: reason)
        case .expired:
            return .finish(.expired, reason: nil)
        case .failed(let reason):
            return .finish(.failed, reason: reason)
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
