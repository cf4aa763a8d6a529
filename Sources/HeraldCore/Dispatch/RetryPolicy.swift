import FoundationEssentials
import Glibc

/// Exponential backoff with jitter and a bounded number of attempts.
///
/// The delay before attempt `n + 1` is `initialDelay × multiplier^(n-1)`, capped at `maxDelay`,
/// then spread by `jitter` (0.2 → anywhere in 80–100 % of that), and never shorter than a delay
/// the transport asked for. A retry is never scheduled past the notification's expiration.
public struct RetryPolicy: Sendable, Equatable {
    /// Total attempts, the first included. Default 5.
    public var maxAttempts: Int = 5
    /// Delay after the first failed attempt. Default 1 s.
    public var initialDelay: TimeInterval = 1
    /// Longest delay between attempts. Default 300 s.
    public var maxDelay: TimeInterval = 300
    /// Growth factor per attempt. Default 2.
    public var multiplier: Double = 2
    /// Fraction of the delay that is randomised, 0…1. Default 0.2.
    public var jitter: Double = 0.2

    public init(maxAttempts: Int = 5, initialDelay: TimeInterval = 1, maxDelay: TimeInterval = 300,
                multiplier: Double = 2, jitter: Double = 0.2) {
        self.maxAttempts = maxAttempts
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// The delay after `attempt` (1-based) failed.
    /// - Parameters:
    ///   - suggested: a delay the transport asked for (Retry-After); the result is at least this.
    ///   - random: a number in 0..<1 (injected so tests are deterministic).
    public func delay(afterAttempt attempt: Int, suggested: TimeInterval? = nil, random: Double) -> TimeInterval {
        let exponent = Double(max(0, attempt - 1))
        let base = min(maxDelay, initialDelay * pow(multiplier, exponent))
        let spread = base * jitter
        let jittered = base - spread + spread * min(max(random, 0), 1)
        return max(jittered, suggested ?? 0)
    }

    /// What to do after `attempt` failed with a retryable outcome.
    public enum Decision: Sendable, Equatable {
        /// Try again at this time.
        case retry(at: Date)
        /// Stop: attempts are used up.
        case exhausted
        /// Stop: the next attempt would be after the notification's expiration.
        case wouldExpire
    }

    public func decide(afterAttempt attempt: Int, now: Date, expiration: Date?, suggested: TimeInterval? = nil,
                       random: Double) -> Decision {
        guard attempt < maxAttempts else { return .exhausted }
        let at = now.addingTimeInterval(delay(afterAttempt: attempt, suggested: suggested, random: random))
        if let expiration, at > expiration { return .wouldExpire }
        return .retry(at: at)
    }
}
