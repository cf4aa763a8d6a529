import Foundation
import HeraldAPNs
import HeraldCore
import Testing
@testable import HeraldAPNsHTTP2

@Suite struct ResponseMappingTests {
    func map(_ status: Int, _ body: String, apnsID: String? = nil, retryAfter: TimeInterval? = nil) -> ResponseMapping.Mapped {
        ResponseMapping.outcome(status: status, body: Array(body.utf8), apnsID: apnsID, retryAfter: retryAfter)
    }

    @Test func successKeepsTheAPNsID() {
        #expect(map(200, "", apnsID: "abc") == .outcome(.delivered(receipt: "abc")))
    }

    @Test func deadTokens() {
        let t = Date(timeIntervalSince1970: 1_700_000_000.123)
        #expect(map(410, #"{"reason":"Unregistered","timestamp":1700000000123}"#)
                == .outcome(.tokenInvalid(since: t, reason: "Unregistered")))
        #expect(map(410, #"{"reason":"ExpiredToken"}"#) == .outcome(.tokenInvalid(since: nil, reason: "ExpiredToken")))
        #expect(map(400, #"{"reason":"BadDeviceToken"}"#) == .outcome(.tokenInvalid(since: nil, reason: "BadDeviceToken")))
        #expect(map(400, #"{"reason":"DeviceTokenNotForTopic"}"#) == .outcome(.tokenInvalid(since: nil, reason: "DeviceTokenNotForTopic")))
    }

    @Test func temporaryFailuresAreRetried() {
        #expect(map(429, #"{"reason":"TooManyRequests"}"#, retryAfter: 30) == .outcome(.retry(after: 30, reason: "TooManyRequests")))
        #expect(map(500, #"{"reason":"InternalServerError"}"#) == .outcome(.retry(after: nil, reason: "InternalServerError")))
        #expect(map(503, #"{"reason":"ServiceUnavailable"}"#) == .outcome(.retry(after: nil, reason: "ServiceUnavailable")))
        #expect(map(503, #"{"reason":"Shutdown"}"#) == .outcome(.retry(after: nil, reason: "Shutdown")))
        #expect(map(429, #"{"reason":"TooManyProviderTokenUpdates"}"#) == .outcome(.retry(after: nil, reason: "TooManyProviderTokenUpdates")))
        #expect(map(400, #"{"reason":"IdleTimeout"}"#) == .outcome(.retry(after: nil, reason: "IdleTimeout")))
        #expect(map(502, "<html>bad gateway</html>") == .outcome(.retry(after: nil, reason: "HTTP 502")))
    }

    @Test func refusedNotificationsAreRejectedWithTheReason() {
        for (status, reason) in [(413, "PayloadTooLarge"), (400, "BadTopic"), (400, "TopicDisallowed"), (403, "Forbidden"),
                                 (400, "BadCollapseId"), (400, "BadPriority"), (400, "BadExpirationDate"), (400, "MissingTopic"),
                                 (400, "InvalidPushType"), (404, "BadPath"), (405, "MethodNotAllowed"), (400, "SomethingNew")] {
            #expect(map(status, #"{"reason":"\#(reason)"}"#) == .outcome(.rejected(reason: reason)))
        }
    }

    @Test func credentialProblemsAreSetupFailuresWithAHint() {
        guard case .outcome(.setupFailure(let reason)) = map(403, #"{"reason":"InvalidProviderToken"}"#) else {
            Issue.record("expected a setup failure")
            return
        }
        #expect(reason == "InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile")
        #expect(map(403, #"{"reason":"ExpiredProviderToken"}"#) == .refreshProviderToken(reason: "ExpiredProviderToken"))
    }

    @Test func reasonsAreTypedAndUnknownOnesKeptVerbatim() {
        #expect(APNsErrorReason(rawValue: "BadDeviceToken") == .badDeviceToken)
        #expect(APNsErrorReason(rawValue: "SomethingNew") == .unknown("SomethingNew"))
        #expect(APNsErrorReason.unknown("SomethingNew").rawValue == "SomethingNew")
        #expect(APNsErrorReason.known.allSatisfy { APNsErrorReason(rawValue: $0.rawValue) == $0 })
        #expect(Set(APNsErrorReason.known.map(\.rawValue)).count == APNsErrorReason.known.count)
    }
}
