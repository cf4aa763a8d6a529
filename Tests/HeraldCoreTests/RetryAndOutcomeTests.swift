import Foundation
import HeraldAPNs
import HeraldCore
import Testing

@Suite struct RetryPolicyTests {
    let policy = RetryPolicy(maxAttempts: 5, initialDelay: 1, maxDelay: 10, multiplier: 2, jitter: 0.2)

    @Test func exponentialWithCap() {
        #expect(policy.delay(afterAttempt: 1, random: 1) == 1)
        #expect(policy.delay(afterAttempt: 2, random: 1) == 2)
        #expect(policy.delay(afterAttempt: 3, random: 1) == 4)
        #expect(policy.delay(afterAttempt: 4, random: 1) == 8)
        #expect(policy.delay(afterAttempt: 5, random: 1) == 10)
        #expect(policy.delay(afterAttempt: 30, random: 1) == 10)
    }

    @Test func jitterSpreadsDownward() {
        #expect(policy.delay(afterAttempt: 3, random: 0) == 4 * 0.8)
        #expect(abs(policy.delay(afterAttempt: 3, random: 0.5) - 3.6) < 1e-9)
    }

    @Test func suggestedDelayIsAFloor() {
        #expect(policy.delay(afterAttempt: 1, suggested: 30, random: 0) == 30)
    }

    @Test func decisions() {
        let now = Date(timeIntervalSince1970: 1000)
        #expect(policy.decide(afterAttempt: 1, now: now, expiration: nil, random: 1) == .retry(at: now.addingTimeInterval(1)))
        #expect(policy.decide(afterAttempt: 5, now: now, expiration: nil, random: 1) == .exhausted)
        #expect(policy.decide(afterAttempt: 2, now: now, expiration: now.addingTimeInterval(1.5), random: 1) == .wouldExpire)
    }
}

@Suite struct OutcomePolicyTests {
    let policy = OutcomePolicy(retry: RetryPolicy(maxAttempts: 3, initialDelay: 1, maxDelay: 60, multiplier: 2, jitter: 0))
    let now = Date(timeIntervalSince1970: 2_000_000_000)
    let expiration: Int64? = nil

    @Test func finalOutcomes() {
        #expect(policy.action(for: .delivered(receipt: "a"), attempt: 1, expiration: expiration, now: now, random: 0) == .finish(.delivered, reason: nil))
        #expect(policy.action(for: .rejected(reason: "BadTopic"), attempt: 1, expiration: expiration, now: now, random: 0) == .finish(.rejected, reason: "BadTopic"))
        #expect(policy.action(for: .expired, attempt: 1, expiration: expiration, now: now, random: 0) == .finish(.expired, reason: nil))
        #expect(policy.action(for: .setupFailure(reason: "no"), attempt: 1, expiration: expiration, now: now, random: 0) == .pause(reason: "no"))
    }

    @Test func invalidTokenUsesApplesTimestampOrNow() {
        let t = Date(timeIntervalSince1970: 1_900_000_000)
        #expect(policy.action(for: .tokenInvalid(since: t, reason: "Unregistered"), attempt: 1, expiration: expiration, now: now, random: 0)
                == .invalidate(since: t, reason: "Unregistered"))
        #expect(policy.action(for: .tokenInvalid(since: nil, reason: "BadDeviceToken"), attempt: 1, expiration: expiration, now: now, random: 0)
                == .invalidate(since: now, reason: "BadDeviceToken"))
    }

    @Test func retriesThenGivesUp() {
        #expect(policy.action(for: .retry(after: nil, reason: "ServiceUnavailable"), attempt: 1, expiration: expiration, now: now, random: 0)
                == .retry(at: now.addingTimeInterval(1), reason: "ServiceUnavailable"))
        #expect(policy.action(for: .retry(after: nil, reason: "ServiceUnavailable"), attempt: 2, expiration: expiration, now: now, random: 0)
                == .retry(at: now.addingTimeInterval(2), reason: "ServiceUnavailable"))
        #expect(policy.action(for: .retry(after: nil, reason: "ServiceUnavailable"), attempt: 3, expiration: expiration, now: now, random: 0)
                == .finish(.failed, reason: "ServiceUnavailable (gave up after 3 attempts)"))
    }

    @Test func neverRetriesPastExpiration() {
        var c = Int64(now.timeIntervalSince1970) + 1
        #expect(policy.action(for: .retry(after: 5, reason: "TooManyRequests"), attempt: 1, expiration: c, now: now, random: 0)
                == .finish(.expired, reason: "TooManyRequests (expires before the next attempt)"))
        c = 0
        #expect(policy.action(for: .retry(after: nil, reason: "InternalServerError"), attempt: 1, expiration: c, now: now, random: 0)
                == .finish(.expired, reason: "InternalServerError (expires before the next attempt)"))
    }
}
