import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing
@testable import HeraldFCM

/// A token endpoint that answers from a script and counts the assertions it saw.
final class ScriptedTokenEndpoint: FCMTokenEndpoint {
    let answers = Locked<[FCMTokenGrant]>([])
    let assertions = Locked<[String]>([])
    /// When set, each exchange waits until the test opens the gate.
    let gate = Locked<Bool>(true)

    init(_ answers: [FCMTokenGrant]) { self.answers.withLock { $0 = answers } }

    func exchange(assertion: String) async -> FCMTokenGrant {
        assertions.withLock { $0.append(assertion) }
        while !gate.withLock({ $0 }) { try? await Task.sleep(nanoseconds: 1_000_000) }
        return answers.withLock { a in a.isEmpty ? .token(Secret("tok-extra"), expiresIn: 3600) : a.removeFirst() }
    }

    func stop() async {}
}

@Suite("FCM access tokens")
struct FCMAccessTokenSourceTests {
    static func credentials() throws -> FCMCredentials {
        try #require(FCMCredentials.parse(TestAccounts.json(tokenURI: "https://oauth2.example/token"), source: "test") { Issue.record("\($0)") })
    }

    @Test func theAssertionHasGooglesClaims() async throws {
        let clock = TestClock()
        let endpoint = ScriptedTokenEndpoint([.token(Secret("tok-1"), expiresIn: 3599)])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: clock, logger: .disabled)
        #expect(try await source.token() == Secret("tok-1"))
        let jwt = try JWT.decode(try #require(endpoint.assertions.value.first))
        #expect(jwt.algorithm == "RS256")
        #expect(jwt.keyID == TestAccounts.made.account.privateKeyID)
        #expect(jwt.claims["iss"]?.stringValue == "herald-test@herald-sim.iam.gserviceaccount.com")
        #expect(jwt.claims["scope"]?.stringValue == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(jwt.claims["aud"]?.stringValue == "https://oauth2.example:443/token")
        let iat = try #require(jwt.claims["iat"]?.doubleValue)
        #expect(iat == clock.now.timeIntervalSince1970 - 10)
        #expect(jwt.claims["exp"]?.doubleValue == iat + 3600)
        #expect(TestAccounts.made.account.publicKey.verify(signature: jwt.signature, message: jwt.signingInput))
    }

    /// Within 5 minutes of expiry one refresh starts and sends keep the current token meanwhile.
    @Test func refreshesFiveMinutesEarlyWithOneRefreshInFlight() async throws {
        let clock = TestClock()
        let endpoint = ScriptedTokenEndpoint([.token(Secret("tok-1"), expiresIn: 3600), .token(Secret("tok-2"), expiresIn: 3600)])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: clock, logger: .disabled)
        #expect(try await source.token() == Secret("tok-1"))
        clock.advance(by: 3600 - 301)
        #expect(try await source.token() == Secret("tok-1"))
        #expect(endpoint.assertions.value.count == 1)
        endpoint.gate.withLock { $0 = false }
        clock.advance(by: 2)  // 299 s before expiry
        async let a = source.token()
        async let b = source.token()
        async let c = source.token()
        let seen = try await [a, b, c]
        #expect(seen.allSatisfy { $0 == Secret("tok-1") })  // nobody waited for the refresh
        endpoint.gate.withLock { $0 = true }
        var next = Secret("")
        for _ in 0..<2000 {
            next = try await source.token()
            if next == Secret("tok-2") { break }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
        #expect(next == Secret("tok-2"))
        #expect(endpoint.assertions.value.count == 2)  // one refresh for the three callers
        await source.stop()
    }

    @Test func anExpiredTokenWaitsForItsRefreshAndConcurrentCallersShareIt() async throws {
        let clock = TestClock()
        let endpoint = ScriptedTokenEndpoint([.token(Secret("tok-1"), expiresIn: 60), .token(Secret("tok-2"), expiresIn: 60)])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: clock, logger: .disabled)
        _ = try await source.token()
        clock.advance(by: 61)
        async let a = source.token()
        async let b = source.token()
        #expect(try await [a, b] == [Secret("tok-2"), Secret("tok-2")])
        #expect(endpoint.assertions.value.count == 2)
    }

    @Test func temporaryFailuresAreRetriedWithBackoff() async throws {
        let clock = TestClock()
        let endpoint = ScriptedTokenEndpoint([.temporary("503", retryAfter: nil), .temporary("429", retryAfter: 5), .token(Secret("tok"), expiresIn: 3600)])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: clock, logger: .disabled)
        let task = Task { try await source.token() }
        #expect(await clock.waitForSleepers(1))
        clock.advance(by: 1)
        #expect(await clock.waitForSleepers(1))
        let wait = try #require(clock.nextDeadline).timeIntervalSince(clock.now)
        #expect(wait >= 5)  // Retry-After honoured
        clock.advance(by: wait)
        #expect(try await task.value == Secret("tok"))
        #expect(endpoint.assertions.value.count == 3)
    }

    @Test func aRefusedGrantOrAnUnusableKeyIsASetupFailure() async throws {
        let endpoint = ScriptedTokenEndpoint([.refused("invalid_grant (400): Invalid JWT Signature."), .refused("invalid_grant (400): Invalid JWT Signature.")])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: TestClock(), logger: .disabled)
        await #expect(throws: FCMTokenError.self) { try await source.token() }
        do { _ = try await source.token(); Issue.record("no error") } catch {
            // A later call tries again (the fix may be on Google's side).
            #expect(endpoint.assertions.value.count == 2)
        }
        var broken = try Self.credentials()
        broken.signingKey = nil
        broken.keyProblem = "test: private_key cannot be used"
        let none = FCMAccessTokenSource(credentials: broken, endpoint: endpoint, clock: TestClock(), logger: .disabled)
        do { _ = try await none.token(); Issue.record("no error") } catch {
            #expect(error == .setup("test: private_key cannot be used"))
        }
    }

    @Test func invalidateForgetsOnlyTheRefusedToken() async throws {
        let endpoint = ScriptedTokenEndpoint([.token(Secret("tok-1"), expiresIn: 3600), .token(Secret("tok-2"), expiresIn: 3600)])
        let source = FCMAccessTokenSource(credentials: try Self.credentials(), endpoint: endpoint, clock: TestClock(), logger: .disabled)
        let first = try await source.token()
        await source.invalidate(Secret("something-else"))
        #expect(try await source.token() == first)
        await source.invalidate(first)
        #expect(try await source.token() == Secret("tok-2"))
    }

    @Test func theTokenEndpointsAnswers() {
        func grant(_ status: Int, _ body: String) -> FCMTokenGrant {
            FCMHTTPTokenEndpoint.grant(.answered(.init(status: status, body: Array(body.utf8))))
        }
        #expect(grant(200, #"{"access_token":"a","expires_in":3599,"token_type":"Bearer"}"#) == .token(Secret("a"), expiresIn: 3599))
        #expect(grant(200, #"{"access_token":"a","expires_in":"120","token_type":"Bearer"}"#) == .token(Secret("a"), expiresIn: 120))
        for status in [408, 429, 500, 503, 504] {
            guard case .temporary = grant(status, "") else { Issue.record("\(status) not temporary"); continue }
        }
        guard case .refused(let r) = grant(400, #"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#) else {
            Issue.record("invalid_grant not refused"); return
        }
        #expect(r.contains("invalid_grant") && r.contains("Invalid JWT Signature."))
    }
}
