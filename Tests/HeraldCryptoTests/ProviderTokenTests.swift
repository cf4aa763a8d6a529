import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct ProviderTokenTests {
    @Test func makeThenParseRoundTrip() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let issued = Date(timeIntervalSince1970: 1_700_000_000.75)
        let jwt = try ProviderToken.make(keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: issued, key: key)
        let parsed = try #require(ProviderToken.parse(jwt))
        #expect(parsed.algorithm == "ES256")
        #expect(parsed.keyID == "ABC123DEFG")
        #expect(parsed.issuer == "DEF123GHIJ")
        #expect(parsed.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(parsed.issuedAtIsInteger)
        #expect(parsed.signature.count == 64)
        #expect(parsed.signingInput == Array(jwt.split(separator: ".").prefix(2).joined(separator: ".").utf8))
        #expect(parsed.verify(with: try ES256VerifyingKey(pemFile: certs.authKeyPublic)))
    }

    @Test func headerAndClaimsAreExactlyWhatAPNsExpects() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let jwt = try ProviderToken.make(keyID: "ABC123DEFG", teamID: "DEF123GHIJ",
                                         issuedAt: Date(timeIntervalSince1970: 1_700_000_123), key: key)
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        #expect(!jwt.contains("="))
        let header = String(decoding: try #require(Base64URL.decode(parts[0])), as: UTF8.self)
        let claims = String(decoding: try #require(Base64URL.decode(parts[1])), as: UTF8.self)
        #expect(header == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(claims == #"{"iss":"DEF123GHIJ","iat":1700000123}"#)
        // Foundation's parser agrees that these are JSON objects with an integer iat.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(claims.utf8)) as? [String: Any])
        #expect(object["iat"] as? Int == 1_700_000_123)
    }

    @Test func tamperedTokenFailsVerification() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let jwt = try ProviderToken.make(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: Date(), key: key)
        let parts = jwt.split(separator: ".").map(String.init)
        let otherClaims = Base64URL.encode(Array(#"{"iss":"EVILTEAM00","iat":1700000000}"#.utf8))
        let forged = try #require(ProviderToken.parse([parts[0], otherClaims, parts[2]].joined(separator: ".")))
        #expect(forged.issuer == "EVILTEAM00")
        #expect(!forged.verify(with: key.verifyingKey))
    }

    @Test func identifiersAreJSONEscaped() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let jwt = try ProviderToken.make(keyID: "a\"b\\c", teamID: "t\n", issuedAt: Date(timeIntervalSince1970: 5), key: key)
        let parsed = try #require(ProviderToken.parse(jwt))
        #expect(parsed.keyID == "a\"b\\c")
        #expect(parsed.issuer == "t\n")
    }

    @Test func parseRejectsMalformedTokens() {
        let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"K"}"#.utf8))
        let claims = Base64URL.encode(Array(#"{"iss":"T","iat":1.5}"#.utf8))
        #expect(ProviderToken.parse("") == nil)
        #expect(ProviderToken.parse("a.b") == nil)
        #expect(ProviderToken.parse("\(header).\(claims)") == nil)
        #expect(ProviderToken.parse("\(header).\(claims).sig.extra") == nil)
        #expect(ProviderToken.parse("\(header).\(Base64URL.encode(Array("[1]".utf8))).AAAA") == nil)
        #expect(ProviderToken.parse("\(header).\(Base64URL.encode(Array("not json".utf8))).AAAA") == nil)
        #expect(ProviderToken.parse("\(header).\(claims).!!!") == nil)
        // Well-formed but odd: a fractional iat is reported as such.
        let odd = ProviderToken.parse("\(header).\(claims).AAAA")
        #expect(odd?.issuedAt == Date(timeIntervalSince1970: 1.5))
        #expect(odd?.issuedAtIsInteger == false)
    }
}
