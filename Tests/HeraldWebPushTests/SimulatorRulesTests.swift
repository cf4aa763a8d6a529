import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// The Web Push simulator's checks and faults, request by request (no network): what Herald's
/// crypto produces passes and decrypts; each broken part is refused as a push service would.
@Suite struct SimulatorRulesTests {
    let origin = "https://127.0.0.1:8443"
    let clock = TestClock()

    func request(index: Int = 0, seed: String = "rules", headers: [String: String?] = [:], body: [UInt8]? = nil,
                 signer: VAPIDSigner? = nil, plaintext: String = #"{"id":"n1"}"#) throws -> WebPushServiceRules.Request {
        let subs = SimulatedSubscriptions(seed: seed)
        let s = subs.subscription(index)
        let signer = try signer ?? VAPIDSigner(privateKey: P256PrivateKey.generate(), subject: "mailto:push@example.com", clock: clock)
        let encrypted = try WebPushEncryption.encrypt(plaintext: Array(plaintext.utf8), userAgentPublicKey: s.privateKey.publicKey, authSecret: s.auth)
        var h: [String: String] = ["ttl": "60", "content-encoding": "aes128gcm", "urgency": "high", "topic": "news",
                                   "authorization": try signer.authorization(for: origin + s.path)]
        for (k, v) in headers { h[k] = v }
        return .init(method: "POST", path: s.path, headers: h.map { (name: $0.key, value: $0.value) }, body: body ?? encrypted, origin: origin)
    }

    func rules(_ faults: WebPushServiceRules.Faults = .init()) throws -> WebPushServiceRules {
        try WebPushServiceRules(subscriptions: SimulatedSubscriptions(seed: "rules"), faults: faults, clock: clock)
    }

    func reason(_ a: WebPushServiceRules.Answer) -> String { (try? JSONValue.parse(a.body))?["reason"]?.stringValue ?? "" }

    @Test func aGoodMessageIsDecryptedAndRecorded() throws {
        let r = try rules()
        let a = r.answer(try request(plaintext: #"{"id":"n1","title":"Hi"}"#))
        #expect(a.status == 201 && a.headers["location"]?.hasPrefix(origin + "/message/0-") == true, "\(a) \(reason(a))")
        let got = try #require(r.received.first)
        #expect(got.json?["title"]?.stringValue == "Hi" && got.ttl == 60 && got.urgency == "high" && got.topic == "news")
        #expect(got.vapidAudience == origin && got.vapidSubject == "mailto:push@example.com" && got.subscription == 0)
    }

    @Test func eachBrokenPartIsRefusedAsAPushServiceWould() throws {
        let r = try rules()
        #expect(r.answer(try request(headers: ["ttl": nil])).status == 400)
        #expect(reason(r.answer(try request(headers: ["ttl": nil]))) == "MissingTTL")
        #expect(reason(r.answer(try request(headers: ["urgency": "urgent"]))) == "BadUrgency")
        #expect(reason(r.answer(try request(headers: ["topic": String(repeating: "a", count: 33)]))) == "BadWebPushTopic")
        #expect(reason(r.answer(try request(headers: ["topic": "has space"]))) == "BadWebPushTopic")
        #expect(reason(r.answer(try request(headers: ["content-encoding": "aesgcm"]))) == "UnsupportedContentEncoding")
        #expect(r.answer(try request(body: [UInt8](repeating: 1, count: 4097))).status == 413)
        #expect(r.answer(try request(headers: ["authorization": nil])).status == 401)
        var other = try request()
        other.origin = "https://127.0.0.1:9999"
        let wrongAud = r.answer(other)
        #expect(wrongAud.status == 403 && reason(wrongAud).contains("aud"), "\(reason(wrongAud))")
        // A JWT signed with one key but carrying another's k fails its signature.
        let a = try VAPIDSigner(privateKey: P256PrivateKey.generate(), subject: "mailto:a@example.com", clock: clock)
        let b = try VAPIDSigner(privateKey: P256PrivateKey.generate(), subject: "mailto:a@example.com", clock: clock)
        let path = SimulatedSubscriptions(seed: "rules").subscription(0).path
        let forged = try a.token(for: origin + path).jwt
        let bad = r.answer(try request(headers: ["authorization": "vapid t=\(forged), k=\(b.publicKeyBase64URL)"]))
        #expect(bad.status == 403 && reason(bad).hasPrefix("BadJwtToken"), "\(reason(bad))")
        // Expired: the clock moves past exp.
        let signer = try VAPIDSigner(privateKey: P256PrivateKey.generate(), subject: "mailto:a@example.com", lifetime: 600, clock: clock)
        let early = try request(signer: signer)
        clock.advance(by: 601)
        #expect(reason(r.answer(early)).hasPrefix("BadJwtToken"))
        // A body for other keys does not decrypt.
        let foreign = try request(index: 1).body
        #expect(reason(r.answer(try request(body: foreign))).hasPrefix("DecryptionFailed"))
        #expect(r.answer(try request(index: 0, seed: "another")).status == 404)
        #expect(r.received.isEmpty)
    }

    @Test func faultsPlayForTheSubscriptionsNamed() throws {
        var f = WebPushServiceRules.Faults()
        f.gone = [1]; f.notFound = [2]; f.mismatchedKey = [3]; f.tooManyRequests = 1; f.serverErrors = 1; f.retryAfter = 7
        let r = try rules(f)
        #expect(r.answer(try request(index: 1)).status == 410)
        #expect(r.answer(try request(index: 2)).status == 404)
        #expect(reason(r.answer(try request(index: 3))) == "VapidPkHashMismatch")
        let first = r.answer(try request(index: 0)), second = r.answer(try request(index: 0))
        #expect(first.status == 429 && first.headers["retry-after"] == "7" && second.status == 503 && second.headers["retry-after"] == "7")
        #expect(r.answer(try request(index: 0)).status == 201)
        var bound = WebPushServiceRules.Faults()
        let key = try P256PrivateKey.generate()
        bound.applicationServerKey = key.publicKey
        let strict = try rules(bound)
        #expect(reason(strict.answer(try request())) == "VapidPkHashMismatch")
        #expect(strict.answer(try request(signer: VAPIDSigner(privateKey: key, subject: "https://example.com", clock: clock))).status == 201)
    }
}
