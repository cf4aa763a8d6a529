import Foundation
import HeraldCore
import HeraldEvents
import Testing

/// `Herald-Signature`, checked against HMAC-SHA256 computed by Python's `hmac` module.
struct WebhookSignatureTests {
    let body = Array(#"{"events":[]}"#.utf8)

    @Test func signsAsStripeDoesWithOneV1PerSecret() {
        let header = WebhookSignature.sign(body, secrets: [Secret("whsec_new"), Secret("whsec_old")], timestamp: 1_767_225_600)
        #expect(header == "t=1767225600,v1=1021f889ccc285087e161248aa3d4ee1c8882dd3a96762635e0cf338ed0b568b,"
                + "v1=0f729e787dae3982faa4eeaa94190b5522d3cf147b9f81e69157bc1782d75993")
    }

    @Test func verifiesWithEitherSecretWithinTheTolerance() {
        let t = Date(timeIntervalSince1970: 1_767_225_600)
        let header = WebhookSignature.sign(body, secrets: [Secret("whsec_new"), Secret("whsec_old")], timestamp: 1_767_225_600)
        #expect(WebhookSignature.verify(header, body: body, secret: Secret("whsec_new"), now: t))
        #expect(WebhookSignature.verify(header, body: body, secret: Secret("whsec_old"), now: t.addingTimeInterval(299)))
        #expect(!WebhookSignature.verify(header, body: body, secret: Secret("whsec_other"), now: t))
        #expect(!WebhookSignature.verify(header, body: body, secret: Secret("whsec_new"), now: t.addingTimeInterval(301)))
        #expect(!WebhookSignature.verify(header, body: body + [32], secret: Secret("whsec_new"), now: t))
    }

    @Test func eventsGoOutAsDocumented() throws {
        let e = EventRecord(sequence: 7, id: "0b8e0f6e-0000-4000-8000-000000000001", type: "transport.paused",
                            createdAt: Date(timeIntervalSince1970: 1_767_225_600.25), app: "", data: #"{"transport":"apns","reason":"x"}"#)
        let text = String(decoding: EventRecord.body([e], next: "7"), as: UTF8.self)
        #expect(text == #"{"events":[{"id":"0b8e0f6e-0000-4000-8000-000000000001","type":"transport.paused","created_at":"2026-01-01T00:00:00.250Z","app":"","data":{"transport":"apns","reason":"x"}}],"next":"7"}"#)
    }
}
