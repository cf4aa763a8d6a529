import Foundation
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

    @Test func expiredProviderTokenRefreshesOnceForManyRequests() throws {
        let certs = try TestCertificates.shared()
        let clock = TestClock()
        let cache = ProviderTokenCache(key: try ES256SigningKey(pemFile: certs.authKey), keyID: "ABC123DEFG", teamID: "DEF123GHIJ", clock: clock)
        let first = try cache.current()
        clock.advance(by: 5)
        // Many in-flight requests all saw 403 ExpiredProviderToken for the same token: one refresh.
        let refreshed = try (0..<50).map { _ in try cache.refresh(after: first) }
        #expect(Set(refreshed.map(\.generation)) == [first.generation + 1])
        #expect(try cache.current() == refreshed[0])
    }
}
