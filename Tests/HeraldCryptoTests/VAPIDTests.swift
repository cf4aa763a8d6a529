import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct VAPIDTests {
    private let endpoint = "https://fcm.googleapis.com/fcm/send/dXNlcg:APA91b"

    @Test func subjectsArePushServiceShaped() {
        for good in ["mailto:ops@example.com", "MAILTO:ops+push@sub.example.co.uk", "https://example.com",
                     "https://example.com/contact", "https://push.example.com:8443/x"] {
            #expect(throws: Never.self, "\(good)") { try VAPIDSigner.validateSubject(good) }
        }
        let cases: [(String, String)] = [
            ("", "is empty"),
            ("mailto: ops@example.com", "contains spaces"),
            ("mailto:ops@example.com\n", "contains spaces"),
            ("mailto:ops", "is not mailto: followed by one address"),
            ("mailto:@example.com", "is not mailto: followed by one address"),
            ("mailto:a@b@example.com", "is not mailto: followed by one address"),
            ("mailto:ops@localhost", "is localhost"),
            ("mailto:ops@push.localhost", "is localhost"),
            ("mailto:ops@example", "has no dot"),
            ("mailto:ops@exa_mple.com", "has characters a host name cannot hold"),
            ("mailto:o<p>s@example.com", "has characters an address cannot hold"),
            ("https://localhost/contact", "is localhost"),
            ("https://LOCALHOST:8443", "is localhost"),
            ("https:/example.com", "is not an https:// URL"),
            ("https://", "is empty"),
            ("https://user@example.com", "has user information"),
            ("http://example.com", "must start with mailto: or https:"),
            ("ops@example.com", "must start with mailto: or https:"),
        ]
        for (subject, reason) in cases {
            let error = #expect(throws: VAPIDError.self, "\(subject)") { try VAPIDSigner.validateSubject(subject) }
            guard case .invalidSubject(let why)? = error else { continue }
            #expect(why.contains(reason), "\(subject): \(why)")
        }
    }

    @Test func audienceIsTheEndpointsOrigin() throws {
        let cases: [(String, String)] = [
            ("https://fcm.googleapis.com/fcm/send/abc", "https://fcm.googleapis.com"),
            ("https://Updates.Push.Services.Mozilla.com/wpush/v2/gAAA?x=1", "https://updates.push.services.mozilla.com"),
            ("https://web.push.apple.com:443/QGuQyavXutnMH", "https://web.push.apple.com"),
            ("https://127.0.0.1:8443/push/1", "https://127.0.0.1:8443"),
            ("http://127.0.0.1:80/push", "http://127.0.0.1"),
            ("HTTP://127.0.0.1:9000", "http://127.0.0.1:9000"),
            ("https://[::1]:4433/p", "https://[::1]:4433"),
            ("https://[::1]/p", "https://[::1]"),
            ("https://push.example.net#frag", "https://push.example.net"),
        ]
        for (url, origin) in cases { #expect(try VAPIDSigner.audience(of: url) == origin, "\(url)") }
        for bad in ["fcm.googleapis.com/fcm/send", "ftp://example.com/x", "https:///path", "https://user:pw@example.com/",
                    "https://example.com:0/", "https://example.com:99999/", "https://example.com:12a/", "https://[::1/x",
                    "https://exa mple.com/"] {
            #expect(throws: VAPIDError.self, "\(bad)") { try VAPIDSigner.audience(of: bad) }
        }
    }

    @Test func tokenHasAudExpSubAndTheHeaderCarriesTheKey() throws {
        let clock = TestClock(start: Date(timeIntervalSince1970: 1_800_000_000.6))
        let key = try P256PrivateKey.generate()
        let signer = try VAPIDSigner(privateKey: key, subject: "mailto:ops@example.com", clock: clock)
        #expect(signer.lifetime == 12 * 3600)
        let token = try signer.token(for: endpoint)
        #expect(token.audience == "https://fcm.googleapis.com")
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_800_000_000 + 12 * 3600))
        #expect(token.authorization == "vapid t=\(token.jwt), k=\(key.publicKey.base64URL)")
        #expect(signer.publicKeyBase64URL.count == 87)

        let pieces = token.jwt.split(separator: ".")
        #expect(String(decoding: Base64URL.decode(pieces[0]) ?? [], as: UTF8.self) == #"{"alg":"ES256","typ":"JWT"}"#)
        #expect(String(decoding: Base64URL.decode(pieces[1]) ?? [], as: UTF8.self)
                == #"{"aud":"https://fcm.googleapis.com","exp":1800043200,"sub":"mailto:ops@example.com"}"#)

        let credentials = try VAPIDSigner.verify(authorization: token.authorization)
        #expect(credentials.publicKey == key.publicKey)
        #expect(credentials.audience == "https://fcm.googleapis.com")
        #expect(credentials.expiresAt == token.expiresAt)
        #expect(credentials.subject == "mailto:ops@example.com")
        #expect(credentials.jwt == token.jwt)
        #expect(throws: Never.self) { try credentials.check(expectedAudience: "https://fcm.googleapis.com", now: clock.now) }
    }

    @Test func oneTokenPerOriginRenewedAnHourBeforeExpiry() throws {
        let clock = TestClock()
        let signer = try VAPIDSigner(privateKey: try P256PrivateKey.generate(), subject: "https://example.com", clock: clock)
        #expect(signer.renewalMargin == 3600)
        let first = try signer.token(for: endpoint)
        // Same origin, other path: the cached token.
        #expect(try signer.token(for: "https://fcm.googleapis.com/fcm/send/other") == first)
        // Another origin: its own token.
        let mozilla = try signer.token(for: "https://updates.push.services.mozilla.com/wpush/v2/x")
        #expect(mozilla.audience == "https://updates.push.services.mozilla.com" && mozilla.jwt != first.jwt)
        #expect(signer.cachedOrigins == 2)

        // Just before the renewal point (exp - 1 h): still the first token.
        clock.advance(by: 11 * 3600 - 1)
        #expect(try signer.token(for: endpoint) == first)
        // At exp - 1 h: a new one, valid 12 h from now.
        clock.advance(by: 1)
        let second = try signer.token(for: endpoint)
        #expect(second != first)
        #expect(second.issuedAt == clock.now)
        #expect(second.expiresAt == first.expiresAt.addingTimeInterval(11 * 3600))
        #expect(try signer.token(for: endpoint) == second)
        #expect(try VAPIDSigner.verify(authorization: second.authorization).expiresAt == second.expiresAt)
    }

    @Test func shortLifetimesRenewAtATenthAndAClockSetBackGetsAFreshToken() throws {
        let clock = TestClock()
        let signer = try VAPIDSigner(privateKey: try P256PrivateKey.generate(), subject: "mailto:a@example.com",
                                     lifetime: 3600, clock: clock)
        #expect(signer.renewalMargin == 360)
        let first = try signer.token(for: endpoint)
        clock.advance(by: 3600 - 360 - 1)
        #expect(try signer.token(for: endpoint) == first)
        clock.advance(by: 1)
        let second = try signer.token(for: endpoint)
        #expect(second != first)

        // The clock steps back (NTP, an operator): a token "issued in the future" is replaced.
        clock.advance(by: -120)
        let third = try signer.token(for: endpoint)
        #expect(third != second)
        #expect(third.issuedAt == clock.now)
        #expect(third.expiresAt == Date(timeIntervalSince1970: (clock.now.timeIntervalSince1970 + 3600).rounded(.down)))
    }

    @Test func lifetimeIsBoundedBy24Hours() throws {
        let key = try P256PrivateKey.generate()
        #expect(throws: VAPIDError.self) { try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", lifetime: 24 * 3600 + 1) }
        #expect(throws: VAPIDError.self) { try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", lifetime: 60) }
        #expect(throws: VAPIDError.self) { try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", lifetime: .infinity) }
        let longest = try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", lifetime: 24 * 3600, clock: TestClock())
        #expect(longest.renewalMargin == 3600)
        #expect(throws: VAPIDError.self) { try VAPIDSigner(privateKey: key, subject: "mailto:a@localhost") }
    }

    @Test func theCacheIsBounded() throws {
        let signer = try VAPIDSigner(privateKey: try P256PrivateKey.generate(), subject: "mailto:a@example.com", clock: TestClock())
        for i in 0...VAPIDSigner.maxCachedOrigins {
            _ = try signer.token(for: "https://push\(i).example.net/x")
        }
        #expect(signer.cachedOrigins == VAPIDSigner.maxCachedOrigins)
    }

    @Test func verifyParsesTheHeaderLeniently() throws {
        let key = try P256PrivateKey.generate()
        let signer = try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", clock: TestClock())
        let token = try signer.token(for: endpoint)
        let k = key.publicKey.base64URL
        for header in ["vapid t=\(token.jwt), k=\(k)", "VAPID k=\(k),t=\(token.jwt)", "  vapid   t=\"\(token.jwt)\" ,  k=\"\(k)\"  ",
                       "vapid T=\(token.jwt), K=\(k)"] {
            #expect(try VAPIDSigner.verify(authorization: header).audience == "https://fcm.googleapis.com", "\(header)")
        }
    }

    @Test func verifyRefusesWhatAPushServiceRefuses() async throws {
        let clock = TestClock()
        let key = try P256PrivateKey.generate()
        let signer = try VAPIDSigner(privateKey: key, subject: "mailto:a@example.com", clock: clock)
        let token = try signer.token(for: endpoint)
        let k = key.publicKey.base64URL
        func failure(_ header: String) -> VAPIDVerificationError? {
            do { _ = try VAPIDSigner.verify(authorization: header); return nil } catch { return error }
        }
        #expect(failure("Bearer \(token.jwt)") == .malformedHeader("the scheme is \"Bearer\", not vapid"))
        #expect(failure("WebPush \(token.jwt)")?.description.contains("not supported") == true)
        #expect(failure("vapid t=\(token.jwt)") == .malformedHeader("no k= parameter (the public key)"))
        #expect(failure("vapid k=\(k)") == .malformedHeader("no t= parameter (the JWT)"))
        #expect(failure("vapid t=\(token.jwt), t=\(token.jwt), k=\(k)") == .malformedHeader("parameter t appears twice"))
        #expect(failure("vapid t=\(token.jwt) k=\(k)") != nil)
        #expect(failure("vapid t=\(token.jwt), k=AAAA") == .invalidPublicKey)
        // Signed by another key than k; claims altered.
        let other = try P256PrivateKey.generate().publicKey.base64URL
        #expect(failure("vapid t=\(token.jwt), k=\(other)") == .token(.badSignature))
        let parts = token.jwt.split(separator: ".").map(String.init)
        let altered = [parts[0], Base64URL.encode(Array(#"{"aud":"https://evil.example","exp":1}"#.utf8)), parts[2]].joined(separator: ".")
        #expect(failure("vapid t=\(altered), k=\(k)") == .token(.badSignature))
        // An RS256 token is not VAPID.
        let rsa = try await JWT.sign(["aud": "https://fcm.googleapis.com", "exp": 1], key: try RS256SigningKey(pem: try RSAKeys.shared().pkcs8))
        #expect(failure("vapid t=\(rsa), k=\(k)") == .token(.unsupportedAlgorithm(found: "RS256", expected: .es256)))
        // Missing and mistyped claims, signed properly.
        let noAud = try JWT.sign(["exp": 1_800_000_000], key: key.signingKey)
        #expect(failure("vapid t=\(noAud), k=\(k)") == .missingClaim("aud"))
        let noExp = try JWT.sign(["aud": "https://fcm.googleapis.com"], key: key.signingKey)
        #expect(failure("vapid t=\(noExp), k=\(k)") == .missingClaim("exp"))
        let textExp = try JWT.sign(["aud": "https://fcm.googleapis.com", "exp": "soon"], key: key.signingKey)
        #expect(failure("vapid t=\(textExp), k=\(k)")?.description.contains("\"exp\" must be a whole number") == true)
        let noSub = try JWT.sign(["aud": "https://fcm.googleapis.com", "exp": 1_800_000_000], key: key.signingKey)
        #expect(try VAPIDSigner.verify(authorization: "vapid t=\(noSub), k=\(k)").subject == nil)

        // Claim checks: audience, expiry, and exp too far ahead.
        let credentials = try VAPIDSigner.verify(authorization: token.authorization)
        #expect(throws: VAPIDVerificationError.wrongAudience(found: "https://fcm.googleapis.com", expected: "https://web.push.apple.com")) {
            try credentials.check(expectedAudience: "https://web.push.apple.com", now: clock.now)
        }
        #expect(throws: VAPIDVerificationError.expired(at: token.expiresAt)) {
            try credentials.check(expectedAudience: "https://fcm.googleapis.com", now: token.expiresAt)
        }
        let tooLong = try JWT.sign(["aud": "https://fcm.googleapis.com", "exp": JWTClaims.seconds(clock.now.addingTimeInterval(24 * 3600 + 1))],
                                   key: key.signingKey)
        let far = try VAPIDSigner.verify(authorization: "vapid t=\(tooLong), k=\(k)")
        let error = #expect(throws: VAPIDVerificationError.self) { try far.check(expectedAudience: "https://fcm.googleapis.com", now: clock.now) }
        guard case .expiresTooLate? = error else {
            Issue.record("expected expiresTooLate, got \(String(describing: error))")
            return
        }
    }
}
