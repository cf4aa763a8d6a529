import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// 403 ExpiredProviderToken end to end: the simulator judges each token's `iat` on its own
/// clock, the transport makes tokens on the test clock.
@Suite(.serialized) struct ProviderTokenRefreshTests {
    static func delivered(_ outcomes: [DeliveryOutcome]) -> Bool {
        outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }
    }

    static func iat(_ date: Date) -> Date { Date(timeIntervalSince1970: TimeInterval(Int(date.timeIntervalSince1970))) }

    @Test func expiredProviderTokenIsRefreshedOnceAndTheResendDelivered() async throws {
        let clock = TestClock(start: Date())
        // APNs here expires tokens after 30 minutes, sooner than the 50 at which Herald refreshes.
        let f = try TransportFixture.tokenAuth(clock: clock) { $0.tokenMaxAge = 30 * 60 }
        defer { f.apns.stop() }
        let transport = try f.transport(clock: clock)
        try await transport.start()
        let before = await transport.deliver((1...10).map { TransportFixture.delivery($0) })
        let firstIAT = Self.iat(clock.now)
        clock.advance(by: 35 * 60)
        let after = await transport.deliver((11...30).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(Self.delivered(before) && Self.delivered(after), "\(before) \(after)")
        let received = f.apns.simulator.received
        #expect(received.count == 30)
        #expect(Set(received.prefix(10).compactMap(\.tokenIssuedAt)) == [firstIAT])
        // Every request of the second batch was refused once, then sent again with one new token.
        #expect(Set(received.dropFirst(10).compactMap(\.tokenIssuedAt)) == [Self.iat(clock.now)])
        #expect(f.apns.simulator.counters.rejected == ["ExpiredProviderToken": 20])
        #expect(transport.tokens?.generation == 2)
    }

    @Test func aNewTokenStillRefusedGivesUpWithoutARefreshStorm() async throws {
        let clock = TestClock(start: Date())
        // The simulator's clock is two hours ahead of this host's: every token Herald makes is "expired".
        let apple = TestClock(start: clock.now.addingTimeInterval(7200))
        let f = try TransportFixture.tokenAuth(clock: apple)
        defer { f.apns.stop() }
        let transport = try f.transport(clock: clock)
        try await transport.start()

        // A token made moments ago cannot have expired: no new one, retry when one may be made.
        let young = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        for outcome in young {
            guard case .retry(let after, let reason) = outcome else { Issue.record("expected retry, got \(outcome)"); continue }
            #expect(after == ProviderTokenCache.minimumAge)
            #expect(reason.hasPrefix("ExpiredProviderToken for a provider token made 0 s ago") && reason.contains("check this host's system clock"), "\(reason)")
        }
        #expect(transport.tokens?.generation == 1)

        // 25 minutes later: one new token for all five requests, refused as well: give up.
        clock.advance(by: 25 * 60)
        apple.advance(by: 25 * 60)
        let refreshed = await transport.deliver((6...10).map { TransportFixture.delivery($0) })
        #expect(refreshed == Array(repeating: .retry(after: nil, reason: "ExpiredProviderToken even with a new provider token: APNs judges a provider token's age by its iat, so check this host's system clock (NTP)"), count: 5))
        #expect(transport.tokens?.generation == 2)

        // And the next batch does not make a third token.
        let again = await transport.deliver((11...15).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(again.allSatisfy { if case .retry = $0 { return true }; return false }, "\(again)")
        #expect(transport.tokens?.generation == 2)
        #expect(f.apns.simulator.counters.rejected == ["ExpiredProviderToken": 5 + 10 + 5])
        #expect(f.apns.simulator.received.isEmpty)
    }

    @Test func aClockSetBackKeepsTheToken() async throws {
        let clock = TestClock(start: Date())
        let f = try TransportFixture.tokenAuth(clock: clock)
        defer { f.apns.stop() }
        let transport = try f.transport(clock: clock)
        try await transport.start()
        var outcomes = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        let firstIAT = Self.iat(clock.now)
        // The clock is stepped back before every batch: a new token each time would be refused
        // with 429 TooManyProviderTokenUpdates (and look like abuse to APNs).
        for batch in 1...5 {
            clock.advance(by: -90)
            outcomes += await transport.deliver((1...5).map { TransportFixture.delivery(batch * 10 + $0) })
        }
        await transport.shutdown()
        #expect(Self.delivered(outcomes), "\(outcomes)")
        #expect(Set(f.apns.simulator.received.compactMap(\.tokenIssuedAt)) == [firstIAT])
        #expect(transport.tokens?.generation == 1)
        #expect(f.apns.simulator.counters.rejected.isEmpty)
    }
}
