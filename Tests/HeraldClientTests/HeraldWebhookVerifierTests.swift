import Foundation
import HeraldClient
import Testing

/// The app-side verifier of webhook signatures, against values computed by Python's `hashlib` and `hmac`.
struct HeraldWebhookVerifierTests {
    let body = Array(#"{"events":[]}"#.utf8)
    let t = Date(timeIntervalSince1970: 1_767_225_600)
    /// Herald's header for `body` at `t`, signed with whsec_new and whsec_old (a rotation).
    let header = "t=1767225600,v1=1021f889ccc285087e161248aa3d4ee1c8882dd3a96762635e0cf338ed0b568b,"
        + "v1=0f729e787dae3982faa4eeaa94190b5522d3cf147b9f81e69157bc1782d75993"

    @Test func acceptsEitherSecretOfARotation() {
        #expect(HeraldWebhookVerifier(secret: "whsec_new").isValid(signature: header, body: body, now: t))
        #expect(HeraldWebhookVerifier(secret: "whsec_old").isValid(signature: header, body: Data(body), now: t.addingTimeInterval(-299)))
    }

    @Test func refusesAnotherSecretABodyChangedOrAnOldTimestamp() {
        #expect(!HeraldWebhookVerifier(secret: "whsec_other").isValid(signature: header, body: body, now: t))
        #expect(!HeraldWebhookVerifier(secret: "whsec_new").isValid(signature: header, body: body + [0x20], now: t))
        #expect(!HeraldWebhookVerifier(secret: "whsec_new").isValid(signature: header, body: body, now: t.addingTimeInterval(301)))
        #expect(!HeraldWebhookVerifier(secret: "whsec_new").isValid(signature: nil, body: body, now: t))
        #expect(!HeraldWebhookVerifier(secret: "whsec_new").isValid(signature: "v1=1021f889ccc285087e161248aa3d4ee1c8882dd3a96762635e0cf338ed0b568b", body: body, now: t))
    }

    @Test func aKeyLongerThanABlockIsHashedFirst() {
        let long = String(repeating: "k", count: 100)
        #expect(HeraldWebhookVerifier(secret: long).isValid(
            signature: "t=1767225600,v1=b65ea1da66d185bd015c77c4678e3b03ce48d762a476a56abec6a131a06fea10", body: body, now: t))
    }
}
