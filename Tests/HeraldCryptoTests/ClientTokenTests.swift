import Foundation
import HeraldCore
import HeraldCrypto
import Testing

@Suite struct ClientTokenTests {
    static let secret = Secret("herald-test-client-secret-0123456789abcdef")
    static let device = "00112233445566778899aabbccddeeff"
    static let issued = Date(timeIntervalSince1970: 1_700_000_000)
    static let claims = ClientTokenClaims(user: "alice", app: "com.example.app", device: device,
                                          issuedAt: issued, expiresAt: issued.addingTimeInterval(3600))

    /// Computed once with Python's hmac/hashlib/base64 (not with Herald):
    /// `base64url(header) "." base64url(claims) "." base64url(HMAC-SHA256(secret, signing input))`.
    static let pythonVector = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImFwcCI6ImNvbS5leGFtcGxlLmFwcCIsImRldmljZSI6IjAwMTEyMjMzNDQ1NTY2Nzc4ODk5YWFiYmNjZGRlZWZmIiwiaWF0IjoxNzAwMDAwMDAwLCJleHAiOjE3MDAwMDM2MDB9.-YRMzjSNNCeIFIZTXWG0LKB6xK1onAXXglBo7cMmL-Q"

    func verify(_ token: String, secret: Secret = secret, app: String = "com.example.app",
                now: Date = issued.addingTimeInterval(60)) throws(ClientTokenError) -> ClientTokenClaims {
        try ClientToken.verify(token, secret: secret, app: app, now: now)
    }

    func error(_ token: String, secret: Secret = secret, app: String = "com.example.app",
               now: Date = issued.addingTimeInterval(60)) -> ClientTokenError? {
        do { _ = try verify(token, secret: secret, app: app, now: now); return nil } catch { return error }
    }

    /// A token with the given header and payload JSON, signed with `secret`.
    func forge(header: String, payload: String, secret: Secret = secret) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return input + "." + Base64URL.encode(HMACSHA256.mac(key: Array(secret.value.utf8), message: Array(input.utf8)))
    }

    @Test func signMatchesAnIndependentImplementation() throws {
        #expect(ClientToken.sign(Self.claims, secret: Self.secret) == Self.pythonVector)
        #expect(try verify(Self.pythonVector) == Self.claims)
    }

    @Test func verifyAcceptsATokenSerialisedDifferently() throws {
        // Also from Python: header and claims in another key order, with spaces.
        let token = "eyJ0eXAiOiAiSldUIiwgImFsZyI6ICJIUzI1NiJ9.eyJleHAiOiAxNzAwMDAzNjAwLCAiaWF0IjogMTcwMDAwMDAwMCwgImRldmljZSI6ICIwMDExMjIzMzQ0NTU2Njc3ODg5OWFhYmJjY2RkZWVmZiIsICJhcHAiOiAiY29tLmV4YW1wbGUuYXBwIiwgInN1YiI6ICJib2IifQ.dk0P_hU8XIP16HR7iUE8dOcATWDldxNuR0Ozxh-etJw"
        let claims = try verify(token)
        #expect(claims.user == "bob")
        #expect(claims.expiresAt == Date(timeIntervalSince1970: 1_700_003_600))
    }

    @Test func hmacMatchesRFC4231() {
        // RFC 4231 test case 2.
        let mac = HMACSHA256.mac(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(mac.map { String(format: "%02x", $0) }.joined() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func roundTripKeepsEveryClaim() throws {
        let claims = ClientTokenClaims(user: "ünïcode \"user\"\n", app: "org.other.app", device: String(repeating: "ab", count: 32),
                                       issuedAt: Date(timeIntervalSince1970: 1_800_000_000.9),
                                       expiresAt: Date(timeIntervalSince1970: 1_800_086_400.2))
        let token = ClientToken.sign(claims, secret: Self.secret)
        #expect(!token.contains("="))
        let back = try ClientToken.verify(token, secret: Self.secret, app: "org.other.app", now: Date(timeIntervalSince1970: 1_800_000_001))
        #expect(back.user == claims.user)
        #expect(back.device == claims.device)
        #expect(back.issuedAt == Date(timeIntervalSince1970: 1_800_000_000))
        #expect(back.expiresAt == Date(timeIntervalSince1970: 1_800_086_400))
    }

    @Test func signatureByAnotherSecretIsRefused() {
        let forged = ClientToken.sign(Self.claims, secret: Secret("another-secret-that-is-32-bytes-long!!"))
        #expect(error(forged) == .badSignature)
        #expect(ClientTokenError.badSignature.description.contains("bad signature"))
    }

    @Test func tamperedPayloadIsRefused() {
        let parts = Self.pythonVector.split(separator: ".").map(String.init)
        let payload = #"{"sub":"mallory","app":"com.example.app","device":"00112233445566778899aabbccddeeff","iat":1700000000,"exp":1700003600}"#
        let tampered = [parts[0], Base64URL.encode(Array(payload.utf8)), parts[2]].joined(separator: ".")
        #expect(error(tampered) == .badSignature)
        // One flipped signature character too.
        var signature = Array(parts[2])
        signature[0] = signature[0] == "A" ? "B" : "A"
        #expect(error([parts[0], parts[1], String(signature)].joined(separator: ".")) == .badSignature)
    }

    @Test func expiredTokenNamesTheTime() {
        let at = Self.issued.addingTimeInterval(3600)
        #expect(error(Self.pythonVector, now: at) == .expired(at: at))
        #expect(error(Self.pythonVector, now: at.addingTimeInterval(-1)) == nil)
        #expect(ClientTokenError.expired(at: at).description.hasPrefix("client token expired at 2023-11-14T23:13:20"))
    }

    @Test func tokenForAnotherAppIsRefused() {
        // Same secret, another app claim: the signature holds, the app does not.
        #expect(error(Self.pythonVector, app: "org.other.app") == .wrongApp(issuedFor: "com.example.app", expected: "org.other.app"))
        // Another app's secret and claim: reported as the app mismatch, the more useful reason.
        var other = Self.claims
        other.app = "org.other.app"
        let token = ClientToken.sign(other, secret: Secret("org-other-app-secret-0123456789abcdef"))
        let e = error(token)
        #expect(e == .wrongApp(issuedFor: "org.other.app", expected: "com.example.app"))
        #expect(e?.description == "client token was issued for app org.other.app, not com.example.app")
    }

    @Test func algNoneAndOtherAlgorithmsAreRefused() {
        let payload = #"{"sub":"alice","app":"com.example.app","device":"00112233445566778899aabbccddeeff","iat":1700000000,"exp":1700003600}"#
        let none = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + "."
        #expect(error(none) == .unsupportedAlgorithm("none"))
        // Even with a valid HS256 MAC attached, a header naming another algorithm is refused.
        #expect(error(forge(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: payload)) == .unsupportedAlgorithm("HS512"))
        #expect(error(forge(header: #"{"alg":"hs256"}"#, payload: payload)) == .unsupportedAlgorithm("hs256"))
        #expect(error(forge(header: #"{"alg":null}"#, payload: payload)) == .unsupportedAlgorithm("null"))
        #expect(error(forge(header: #"{"typ":"JWT"}"#, payload: payload)) == .malformed("the header has no \"alg\""))
        #expect(error(forge(header: #"{"alg":"HS256","crit":["exp"]}"#, payload: payload)) != nil)
        // Same token with only "alg" in the header is fine.
        #expect(error(forge(header: #"{"alg":"HS256"}"#, payload: payload)) == nil)
    }

    @Test func malformedTokensSayWhat() {
        let cases: [(String, String)] = [
            ("", "expected three base64url parts separated by dots, found 1"),
            ("a.b", "expected three base64url parts separated by dots, found 2"),
            ("a.b.c.d", "expected three base64url parts separated by dots, found 4"),
            ("!!!.e30.AAAA", "the header is not unpadded base64url"),
            (Base64URL.encode(Array("[1]".utf8)) + ".e30.AAAA", "the header is not a JSON object"),
            (Base64URL.encode(Array(#"{"alg":"HS256","alg":"HS256"}"#.utf8)) + ".e30.AAAA", "the header is not a JSON object"),
            (Base64URL.encode(Array(#"{"alg":"HS256"}"#.utf8)) + ".e30.AAAA", "the signature is not 32 bytes of unpadded base64url"),
        ]
        for (token, why) in cases {
            #expect(error(token) == .malformed(why), "\(token)")
        }
        #expect(error(String(repeating: "a", count: ClientToken.maxLength + 1)) == .malformed("longer than 4096 bytes"))
        // Padding on the signature is refused (unpadded base64url only).
        #expect(error(Self.pythonVector + "=") != nil)
    }

    @Test func missingAndMistypedClaims() {
        let header = #"{"alg":"HS256","typ":"JWT"}"#
        #expect(error(forge(header: header, payload: #"{"sub":"a","app":"com.example.app","device":"00112233445566778899aabbccddeeff","iat":1700000000}"#))
                == .missingClaim("exp"))
        #expect(error(forge(header: header, payload: #"{"app":"com.example.app","device":"00112233445566778899aabbccddeeff","iat":1,"exp":1800000000}"#))
                == .missingClaim("sub"))
        #expect(error(forge(header: header, payload: #"{"sub":"a","app":"com.example.app","iat":1,"exp":1800000000}"#))
                == .missingClaim("device"))
        #expect(error(forge(header: header, payload: #"{"sub":"a","app":"com.example.app","device":"00112233445566778899aabbccddeeff","iat":1,"exp":"tomorrow"}"#))
                == .malformed("claim \"exp\" must be a whole number of seconds since 1970, before the year 10000"))
        #expect(error(forge(header: header, payload: #"{"sub":"a","app":"com.example.app","device":"not hex!","iat":1700000000,"exp":1700003600}"#))
                == .malformed("claim \"device\": device token has a character that is not hexadecimal: \"n\""))
        #expect(ClientTokenError.missingClaim("exp").description == "client token has no \"exp\" claim")
    }

    @Test func errorsNeverContainTheSecretOrTheToken() {
        let tokens = [Self.pythonVector, ClientToken.sign(Self.claims, secret: Secret("another-secret-that-is-32-bytes-long!!")), "x.y.z"]
        for token in tokens {
            for app in ["com.example.app", "org.other.app"] {
                for now in [Self.issued, Self.issued.addingTimeInterval(7200)] {
                    guard let e = error(token, app: app, now: now) else { continue }
                    #expect(!e.description.contains(Self.secret.value))
                    #expect(!e.description.contains(token) || token == "x.y.z")
                    #expect(!e.description.contains(String(token.split(separator: ".").last ?? "")) || token == "x.y.z")
                }
            }
        }
    }

    @Test func issueAppliesOneSetOfRules() throws {
        var app = AppConfiguration(id: "com.example.app", routes: ["local"])
        #expect(throws: ClientTokenIssueError.self) {
            try ClientToken.issue(app: app, user: "alice", device: Self.device, lifetime: 60, now: Self.issued)
        }
        app.clientSecret = Self.secret
        let minted = try ClientToken.issue(app: app, user: "alice", device: "<0011 2233 4455 6677 8899 AABB CCDD EEFF>",
                                           lifetime: 3600, now: Self.issued.addingTimeInterval(0.7))
        #expect(minted.token == Self.pythonVector)
        #expect(minted.claims == Self.claims)
        func field(_ user: String, _ device: String, _ lifetime: TimeInterval) -> String? {
            do { _ = try ClientToken.issue(app: app, user: user, device: device, lifetime: lifetime, now: Self.issued); return nil } catch {
                return error.field
            }
        }
        #expect(field("", Self.device, 60) == "user")
        #expect(field(String(repeating: "u", count: 257), Self.device, 60) == "user")
        #expect(field("alice", "zz", 60) == "device")
        #expect(field("alice", Self.device, 0) == "ttl")
        #expect(field("alice", Self.device, 31 * 86_400) == "ttl")
        #expect(field("alice", Self.device, 30 * 86_400) == nil)
    }

    // MARK: Times bounded whoever signed (issue 24, item 12)

    func token(iat: Int64, exp: Int64, user: String = "alice") -> String {
        forge(header: #"{"alg":"HS256","typ":"JWT"}"#,
              payload: #"{"sub":"\#(user)","app":"com.example.app","device":"\#(Self.device)","iat":\#(iat),"exp":\#(exp)}"#)
    }

    @Test func anIssuedAtMoreThanAMinuteAheadIsRefused() {
        let now = Self.issued  // 1_700_000_000
        // Ten years ahead, correctly signed with the app's secret: refused, naming the time.
        let future = token(iat: 1_700_000_000 + 10 * 365 * 86_400, exp: 1_700_000_000 + 10 * 365 * 86_400 + 3600)
        #expect(error(future, now: now) == .issuedInFuture(at: Date(timeIntervalSince1970: 1_700_000_000 + 10 * 365 * 86_400)))
        // 61 s ahead is refused; 60 s ahead (clock skew) is accepted.
        #expect(error(token(iat: 1_700_000_061, exp: 1_700_003_600), now: now) == .issuedInFuture(at: Date(timeIntervalSince1970: 1_700_000_061)))
        #expect(error(token(iat: 1_700_000_060, exp: 1_700_003_600), now: now) == nil)
        #expect(ClientTokenError.issuedInFuture(at: Date(timeIntervalSince1970: 1_700_000_061)).description
                .hasPrefix("client token is issued at 2023-11-14T22:14:21"))
        #expect(ClientTokenError.issuedInFuture(at: Date(timeIntervalSince1970: 1_700_000_061)).description
                .contains("more than 60 s ahead of this server's clock"))
    }

    @Test func aLifetimeLongerThanMintingAllowsIsRefused() {
        let now = Self.issued.addingTimeInterval(10)
        // exp 9999-12-31: a valid signature, but no minting would have made it.
        #expect(error(token(iat: 1_700_000_000, exp: 253_402_300_799), now: now) == .lifetimeOutOfRange(seconds: 253_402_300_799 - 1_700_000_000))
        // 30 days and a second is refused, 30 days exactly is accepted (ClientToken.maxLifetime).
        #expect(error(token(iat: 1_700_000_000, exp: 1_700_000_000 + 30 * 86_400 + 1), now: now) == .lifetimeOutOfRange(seconds: 30 * 86_400 + 1))
        #expect(error(token(iat: 1_700_000_000, exp: 1_700_000_000 + 30 * 86_400), now: now) == nil)
        // exp not after iat is no lifetime at all.
        #expect(error(token(iat: 1_700_000_000, exp: 1_700_000_000), now: Self.issued.addingTimeInterval(-10)) == .lifetimeOutOfRange(seconds: 0))
        // Times past the year 9999 (which would overflow the arithmetic) are malformed, not a crash.
        #expect(error(token(iat: 1_700_000_000, exp: Int64.max), now: now)
                == .malformed("claim \"exp\" must be a whole number of seconds since 1970, before the year 10000"))
        #expect(ClientTokenError.lifetimeOutOfRange(seconds: 2_592_001).description
                == "client token lifetime (exp - iat) is 2592001 s; it must be between 1 s and 2592000 s (30 days); mint a new one")
    }

    @Test func aSubjectLongerThanAUserIdMayBeIsRefused() {
        let long = String(repeating: "u", count: FieldLimits.userIDBytes.upperBound + 1)
        #expect(error(token(iat: 1_700_000_000, exp: 1_700_003_600, user: long))
                == .malformed("claim \"sub\": must be at most 256 bytes, found 257"))
        #expect(error(token(iat: 1_700_000_000, exp: 1_700_003_600, user: String(repeating: "u", count: 256))) == nil)
    }
}
