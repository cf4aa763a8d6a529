import Foundation
import HeraldCore
@testable import HeraldWebPush
import Testing

/// Every row of the answers table, through one push service's state, and its backoff, batch
/// and pause rules.
@Suite struct AnswerTests {
    let origin = PushServiceOrigin(host: "push.example.com", port: 443)
    let policy = PushServiceState.Policy(refusalsToPause: 3, probeInterval: 60, initialBackoff: 1, maxBackoff: 300)
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func answer(_ status: Int, _ body: String = "", retryAfter: TimeInterval? = nil, state: inout PushServiceState, token: String = "s1") -> DeliveryOutcome {
        let a: PushServiceState.Answer = WebPushFailure(status: status, body: Array(body.utf8)).map { .failed($0, retryAfter: retryAfter) }
            ?? .accepted(receipt: "https://push.example.com/m/1")
        return state.record(a, token: token, now: t0, policy: policy)
    }

    @Test func eachStatusBecomesItsOutcome() {
        var s = PushServiceState(origin: origin)
        #expect(answer(201, state: &s) == .delivered(receipt: "https://push.example.com/m/1"))
        guard case .tokenInvalid(nil, let r404) = answer(404, state: &s), case .tokenInvalid(nil, let r410) = answer(410, #"{"errno":106,"message":"Unsubscribed"}"#, state: &s) else {
            Issue.record("404/410 must retire the subscription"); return
        }
        #expect(r404.hasPrefix("404") && r410 == "410 subscription gone: Unsubscribed")
        #expect(answer(413, state: &s) == .rejected(reason: "413 payload too large"))
        #expect(answer(400, #"{"reason":"BadWebPushTopic"}"#, state: &s) == .rejected(reason: "400 bad request: BadWebPushTopic"))
        #expect(answer(400, #"{"error":{"code":400,"message":"Invalid TTL"}}"#, state: &s) == .rejected(reason: "400 bad request: Invalid TTL"))
        #expect(answer(418, "teapot", state: &s) == .rejected(reason: "HTTP 418: teapot"))
        guard case .retry(let after429, let reason429) = answer(429, retryAfter: 30, state: &s) else { Issue.record("429 retries"); return }
        #expect(after429 == 30 && reason429.hasPrefix("429"))
        guard case .retry(let after503, _) = answer(503, state: &s) else { Issue.record("5xx retries"); return }
        #expect(after503 == 1)
        guard case .retry(_, let none) = s.record(.failed(.noAnswer("connection refused"), retryAfter: nil), token: "s1", now: t0, policy: policy) else {
            Issue.record("no answer retries"); return
        }
        #expect(none == "no answer: connection refused")
    }

    @Test func aFailureBacksTheServiceOffAndASuccessEndsIt() {
        var s = PushServiceState(origin: origin)
        #expect(s.admit(count: 3, now: t0, policy: policy) == .send(count: 3, holdRest: 0, reason: ""))
        // While its batch is out, the service's deliveries in other batches wait.
        guard case .hold(_, let busy) = s.admit(count: 2, now: t0, policy: policy) else { Issue.record("a busy service holds"); return }
        #expect(busy.contains("still answering an earlier batch"))
        _ = answer(503, retryAfter: 20, state: &s)
        s.batchEnded(latency: 0.1, now: t0)
        guard case .hold(let wait, let why) = s.admit(count: 1, now: t0.addingTimeInterval(5), policy: policy) else { Issue.record("backing off"); return }
        #expect(abs(wait - 15) < 0.001 && why.contains("backing off after 503"))
        #expect(s.admit(count: 1, now: t0.addingTimeInterval(21), policy: policy) == .send(count: 1, holdRest: 0, reason: ""))
        // The second failure in a row doubles the backoff; a success resets it.
        guard case .retry(let second, _) = answer(500, state: &s) else { Issue.record("retry"); return }
        #expect(second == 2)
        s.batchEnded(latency: 0.1, now: t0)
        _ = s.admit(count: 1, now: t0.addingTimeInterval(3), policy: policy)
        _ = answer(201, state: &s)
        s.batchEnded(latency: 0.1, now: t0.addingTimeInterval(3))
        #expect(s.failures == 0 && s.backoffUntil == nil)
    }

    @Test func a403AtAServiceThatAcceptsTheKeyRejectsThatSubscriptionOnly() {
        var s = PushServiceState(origin: origin)
        _ = answer(201, state: &s, token: "good")
        guard case .rejected(let reason) = answer(403, #"{"reason":"VapidPkHashMismatch"}"#, state: &s, token: "other-key") else {
            Issue.record("a mismatched subscription is rejected"); return
        }
        #expect(reason.contains("VapidPkHashMismatch") && reason.contains("another applicationServerKey"))
        #expect(s.pause == nil)
    }

    @Test func a401Or403FromEverySubscriptionPausesTheServiceUntilItAcceptsAProbe() {
        var s = PushServiceState(origin: origin)
        _ = s.admit(count: 3, now: t0, policy: policy)
        guard case .retry = answer(403, #"{"reason":"BadJwtToken"}"#, state: &s, token: "a"),
              case .retry = answer(401, state: &s, token: "b"),
              case .retry = answer(403, state: &s, token: "b") else { Issue.record("before the rule is met: retried"); return }
        #expect(s.pause == nil)
        guard case .deferred(let after, let reason) = answer(403, #"{"reason":"BadJwtToken"}"#, state: &s, token: "c") else {
            Issue.record("the third subscription refused pauses the service"); return
        }
        #expect(after == 60 && reason.contains("refused the VAPID JWT for every subscription tried (3)") && reason.contains("BadJwtToken"))
        s.batchEnded(latency: 0.1, now: t0)
        // Paused: deliveries wait until the probe is due, then one goes.
        guard case .hold(let wait, _) = s.admit(count: 5, now: t0.addingTimeInterval(10), policy: policy) else { Issue.record("paused holds"); return }
        #expect(abs(wait - 50) < 0.001)
        guard case .send(1, 60, _) = s.admit(count: 5, now: t0.addingTimeInterval(61), policy: policy) else { Issue.record("a probe goes"); return }
        // A refused probe keeps it paused (deferred, not counted); an accepted one resumes it.
        guard case .deferred = s.record(.failed(.vapidRefused(status: 403, detail: ""), retryAfter: nil), token: "d", now: t0.addingTimeInterval(61), policy: policy) else {
            Issue.record("a refused probe is deferred"); return
        }
        s.batchEnded(latency: 0.1, now: t0.addingTimeInterval(61))
        #expect(s.pause != nil)
        _ = s.admit(count: 1, now: t0.addingTimeInterval(122), policy: policy)
        #expect(s.record(.accepted(receipt: nil), token: "d", now: t0.addingTimeInterval(122), policy: policy) == .delivered(receipt: nil))
        s.batchEnded(latency: 0.1, now: t0.addingTimeInterval(122))
        #expect(s.pause == nil && s.admit(count: 4, now: t0.addingTimeInterval(122), policy: policy) == .send(count: 4, holdRest: 0, reason: ""))
    }

    @Test func aDeferredDeliveryIsPostponedWithoutCountingAndExpiresOnTime() {
        let p = OutcomePolicy(retry: RetryPolicy(maxAttempts: 1))
        #expect(p.action(for: .deferred(after: 5, reason: "held"), attempt: 1, expiration: nil, now: t0, random: 0)
                == .postpone(until: t0.addingTimeInterval(5), reason: "held"))
        #expect(p.action(for: .deferred(after: nil, reason: "held"), attempt: 1, expiration: nil, now: t0, random: 0)
                == .postpone(until: t0.addingTimeInterval(1), reason: "held"))
        guard case .finish(.expired, _) = p.action(for: .deferred(after: 60, reason: "held"), attempt: 1, expiration: Int64(t0.timeIntervalSince1970) + 30, now: t0, random: 0),
              case .finish(.expired, _) = p.action(for: .deferred(after: 1, reason: "held"), attempt: 1, expiration: 0, now: t0, random: 0) else {
            Issue.record("a deferral past the expiration ends it as expired"); return
        }
    }
}
