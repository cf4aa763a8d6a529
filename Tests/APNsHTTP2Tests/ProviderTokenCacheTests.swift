import Foundation
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

@Suite struct ProviderTokenCacheTests {
    @Test func refreshesAfterFiftyMinutesAndNotBefore() throws {
        let certs = try TestCertificates.shared()
        let clock = TestClock()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let cache = ProviderTokenCache(key: key, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", clock: clock)
        let first = try cache.current()
        #expect(first.header.hasPrefix("bearer "))
        let parsed = try #require(ProviderToken.parse(String(first.header.dropFirst(7))))
        #expect(parsed.keyID == "ABC123DEFG" && parsed.issuer == "DEF123GHIJ" && parsed.algorithm == "ES256")
        #expect(parsed.issuedAt == clock.now)
        #expect(key.verifyingKey.verify(signature: parsed.signature, message: parsed.signingInput))

        clock.advance(by: 49 * 60)
        #expect(try cache.current() == first)
        clock.advance(by: 60)
        let second = try cache.current()
        #expect(second != first && second.generation == first.generation + 1 && second.issuedAt == clock.now)
    }

    func makeCache(_ clock: TestClock) throws -> ProviderTokenCache {
        let certs = try TestCertificates.shared()
        return ProviderTokenCache(key: try ES256SigningKey(pemFile: certs.authKey), keyID: "ABC123DEFG", teamID: "DEF123GHIJ", clock: clock)
    }

    @Test func expiredProviderTokenRefreshesOnceForManyRequests() throws {
        let clock = TestClock()
        let cache = try makeCache(clock)
        let first = try cache.current()
        clock.advance(by: 21 * 60)
        // Many in-flight requests all saw 403 ExpiredProviderToken for the same token: one refresh.
        let refreshed = try (0..<50).map { _ in try cache.refresh(after: first) }
        guard case .token(let fresh) = refreshed[0] else { Issue.record("no new token: \(refreshed[0])"); return }
        #expect(refreshed.allSatisfy { $0 == .token(fresh) })
        #expect(fresh.generation == first.generation + 1 && fresh.issuedAt == clock.now)
        #expect(try cache.current() == fresh)
    }

    @Test func noNewTokenSoonerThanTwentyMinutesEvenWhenAPNsSaysExpired() throws {
        let clock = TestClock()
        let cache = try makeCache(clock)
        let first = try cache.current()
        clock.advance(by: 19 * 60)
        #expect(try cache.refresh(after: first) == .tooSoon(age: 19 * 60))
        #expect(try cache.current() == first)
        clock.advance(by: 60)
        guard case .token(let second) = try cache.refresh(after: first) else { Issue.record("no refresh at 20 minutes"); return }
        #expect(second.generation == 2)
        // The new token is refused too (a wrong clock): still no third one for 20 minutes.
        clock.advance(by: 5)
        #expect(try cache.refresh(after: second) == .tooSoon(age: 5))
        #expect(cache.generation == 2)
    }

    @Test func aClockSetBackNeitherRenewsTheTokenNorResetsItsAge() throws {
        let clock = TestClock()
        let cache = try makeCache(clock)
        let first = try cache.current()
        clock.advance(by: 10 * 60)
        #expect(try cache.current() == first)
        // NTP steps the clock back an hour and a half-minute, again and again: still the same token.
        for _ in 0..<20 {
            clock.advance(by: -3630)
            #expect(try cache.current() == first)
        }
        // Its age kept counting forward from 10 minutes: neither reset nor negative.
        clock.advance(by: 9 * 60)
        #expect(try cache.refresh(after: first) == .tooSoon(age: 19 * 60))
        clock.advance(by: 31 * 60)
        let second = try cache.current()
        #expect(second.generation == 2 && second.issuedAt == clock.now)
    }
}
