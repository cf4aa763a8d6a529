import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldSimulator

/// Provider-token rules with a test clock, and the ES256 checker against tokens made by `openssl`.
@Suite("HTTP/2 provider tokens")
struct HTTP2TokenAuthTests {
    /// Accepts tokens of the form `kid.team.iat` (seconds); anything else is invalid.
    struct FakeVerifier: HTTP2ProviderTokenVerifying {
        func verify(_ jwt: String) -> ProviderTokenClaims? {
            let parts = jwt.split(separator: ".")
            guard parts.count == 3, let iat = Double(parts[2]) else { return nil }
            return ProviderTokenClaims(keyID: String(parts[0]), teamID: String(parts[1]), issuedAt: Date(timeIntervalSince1970: iat))
        }
    }

    let clock = TestClock()

    var authenticator: HTTP2TokenAuthenticator { HTTP2TokenAuthenticator(verifier: FakeVerifier(), clock: clock) }

    func token(kid: String = "ABC123DEFG", ageSeconds: Double = 0) -> String {
        "\(kid).DEF123GHIJ.\(Int(clock.now.timeIntervalSince1970 - ageSeconds))"
    }

    func authenticate(_ header: String?, _ state: inout HTTP2TokenAuthState, _ auth: HTTP2TokenAuthenticator? = nil) -> APNsHTTP2Reason? {
        let a = auth ?? authenticator
        guard var header else { return a.authenticate(nil, state: &state) }
        return header.withUTF8 { a.authenticate(UnsafeRawBufferPointer($0), state: &state) }
    }

    @Test func missingToken() {
        var state = HTTP2TokenAuthState()
        #expect(authenticate(nil, &state) == .missingProviderToken)
        #expect(authenticate("bearer", &state) == .missingProviderToken)
        #expect(authenticate("bearer   ", &state) == .missingProviderToken)
        #expect(authenticate("basic dXNlcjpwYXNz", &state) == .missingProviderToken)
        #expect(!state.isAuthenticated)
    }

    @Test func invalidToken() {
        var state = HTTP2TokenAuthState()
        #expect(authenticate("bearer not-a-token", &state) == .invalidProviderToken)
        #expect(!state.isAuthenticated)
    }

    @Test func validTokenIsInstalledAndReused() {
        var state = HTTP2TokenAuthState()
        let t = token()
        #expect(authenticate("bearer \(t)", &state) == nil)
        #expect(state.isAuthenticated)
        #expect(state.claims?.teamID == "DEF123GHIJ")
        #expect(authenticate("Bearer  \(t) ", &state) == nil)  // scheme in any case, spaces trimmed
        clock.advance(by: 3000)
        #expect(authenticate("bearer \(t)", &state) == nil)
    }

    @Test func tokenOlderThanAnHourExpires() {
        var state = HTTP2TokenAuthState()
        #expect(authenticate("bearer \(token(ageSeconds: 3601))", &state) == .expiredProviderToken)
        #expect(authenticate("bearer \(token(ageSeconds: 3599))", &state) == nil)
        // The token in force expires too.
        let t = token()
        var fresh = HTTP2TokenAuthState()
        #expect(authenticate("bearer \(t)", &fresh) == nil)
        clock.advance(by: 3601)
        #expect(authenticate("bearer \(t)", &fresh) == .expiredProviderToken)
    }

    @Test func newTokenSoonerThan20MinutesIsThrottled() {
        var state = HTTP2TokenAuthState()
        let first = token()
        #expect(authenticate("bearer \(first)", &state) == nil)
        clock.advance(by: 19 * 60)
        let second = token()
        #expect(authenticate("bearer \(second)", &state) == .tooManyProviderTokenUpdates)
        #expect(APNsHTTP2Reason.tooManyProviderTokenUpdates.status == 429)
        // The first token stays in force.
        #expect(authenticate("bearer \(first)", &state) == nil)
        clock.advance(by: 60)
        #expect(authenticate("bearer \(second)", &state) == nil)
        #expect(state.token == Array(second.utf8))
    }

    @Test func updateWindowIsConfigurable() {
        var state = HTTP2TokenAuthState()
        let quick = HTTP2TokenAuthenticator(verifier: FakeVerifier(), clock: clock, maxTokenAge: 3600, updateInterval: 5)
        #expect(authenticate("bearer \(token())", &state, quick) == nil)
        clock.advance(by: 4)
        #expect(authenticate("bearer \(token())", &state, quick) == .tooManyProviderTokenUpdates)
        clock.advance(by: 1)
        #expect(authenticate("bearer \(token())", &state, quick) == nil)
    }

    @Test func anotherKeyOnTheSameConnectionIsUnrelated() {
        var state = HTTP2TokenAuthState()
        #expect(authenticate("bearer \(token(kid: "ABC123DEFG"))", &state) == nil)
        clock.advance(by: 3000)
        #expect(authenticate("bearer \(token(kid: "ZZZ999YYYY"))", &state) == .unrelatedKeyIdInToken)
    }

    // MARK: ES256 checking (HeraldCrypto) against tokens made by openssl

    func verifier() throws -> (HTTP2ES256TokenVerifier, TestCertificates) {
        let certs = try TestCertificates.shared()
        let v = try HTTP2ES256TokenVerifier(keys: [.init(keyID: certs.authKeyID, teamID: certs.teamID, publicKeyFile: certs.authKeyPublic)])
        return (v, certs)
    }

    @Test func es256AcceptsAnOpenSSLToken() throws {
        let (v, certs) = try verifier()
        let now = Date(timeIntervalSince1970: 1_767_225_600)
        let jwt = try TestJWT.make(keyFile: certs.authKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: now)
        let claims = try #require(v.verify(jwt))
        #expect(claims == ProviderTokenClaims(keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: now))
    }

    @Test func es256RefusesWhatAPNsRefuses() throws {
        let (v, certs) = try verifier()
        let now = Date()
        func make(key: String? = nil, kid: String? = nil, team: String? = nil, header: String? = nil, claims: String? = nil) throws -> String {
            try TestJWT.make(keyFile: key ?? certs.authKey, keyID: kid ?? certs.authKeyID, teamID: team ?? certs.teamID,
                             issuedAt: now, header: header, claims: claims)
        }
        #expect(v.verify(try make(kid: "UNKNOWNKEY")) == nil)                        // unknown key id
        #expect(v.verify(try make(team: "OTHERTEAM1")) == nil)                       // iss is not the key's team
        #expect(v.verify(try make(header: #"{"alg":"HS256","kid":"ABC123DEFG"}"#)) == nil)
        #expect(v.verify(try make(header: #"{"kid":"ABC123DEFG"}"#)) == nil)         // no alg
        #expect(v.verify(try make(header: #"{"alg":"ES256"}"#)) == nil)              // no kid
        #expect(v.verify(try make(header: #"{"alg":"ES256","kid":"ABC123DEFG","kid":"ABC123DEFG"}"#)) == nil)  // duplicate key
        #expect(v.verify(try make(claims: #"{"iss":"DEF123GHIJ","iat":1459143580.5}"#)) == nil)  // iat not whole seconds
        #expect(v.verify(try make(claims: #"{"iss":"DEF123GHIJ","iat":"1459143580"}"#)) == nil)  // iat as a string
        #expect(v.verify(try make(claims: #"{"iss":"DEF123GHIJ"}"#)) == nil)         // no iat
        #expect(v.verify(try make(key: certs.clientKey)) == nil)                     // signed by another P-256 key
        let good = try make()
        let tampered = String(good.dropLast(3)) + (good.hasSuffix("AAA") ? "BBB" : "AAA")
        #expect(v.verify(tampered) == nil)
        #expect(v.verify(good.components(separatedBy: ".").prefix(2).joined(separator: ".") + ".") == nil)  // unsecured
        #expect(v.verify("garbage") == nil)
    }

    @Test func es256KeyFilesAreChecked() throws {
        let certs = try TestCertificates.shared()
        #expect(throws: HTTP2SimulatorError.self) {
            try HTTP2ES256TokenVerifier(keys: [.init(keyID: "K", teamID: "T", publicKeyFile: "/nonexistent/key.pem")])
        }
        #expect(throws: HTTP2SimulatorError.self) {
            try HTTP2ES256TokenVerifier(keys: [.init(keyID: "K", teamID: "T", publicKeyFile: certs.caFile)])
        }
    }
}
