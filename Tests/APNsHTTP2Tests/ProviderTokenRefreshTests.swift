import Foundation
import HeraldAPNs
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

    @Test(arguments: Engine.allCases) func expiredProviderTokenIsRefreshedOnceAndTheResendDelivered(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        // APNs here expires tokens after 30 minutes, sooner than the 50 at which Herald refreshes.
        let f = try TransportFixture.tokenAuth(clock: clock) { $0.tokenMaxAge = 30 * 60 }
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, clock: clock)
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

    @Test(arguments: Engine.allCases) func aNewTokenStillRefusedGivesUpWithoutARefreshStorm(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        // The simulator's clock is two hours ahead of this host's: every token Herald makes is "expired".
        let apple = TestClock(start: clock.now.addingTimeInterval(7200))
        let f = try TransportFixture.tokenAuth(clock: apple)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, clock: clock)
        try await transport.start()

        // A token made moments ago cannot have expired: no new one, retry when one may be made.
        let young = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        for outcome in young {
            guard case .retry(let after, let reason) = outcome else { Issue.record("expected retry, got \(outcome)"); continue }
            #expect(after == ProviderTokenCache.minimumAge)
            #expect(reason.hasPrefix("ExpiredProviderToken for a provider token made 0 s ago") && reason.contains("check this host's system clock"), "\(reason)")
        }
        #expect(transport.tokens?.generation == 1)

        // 25 minutes later: the first request's refusal makes one new token, refused as well: give
        // up. The four behind it start with that new token (never the refused older one after
        // it) and are refused too: no new token before it is 20 minutes old.
        clock.advance(by: 25 * 60)
        apple.advance(by: 25 * 60)
        let refreshed = await transport.deliver((6...10).map { TransportFixture.delivery($0) })
        #expect(refreshed[0] == .retry(after: nil, reason: "ExpiredProviderToken even with a new provider token: APNs judges a provider token's age by its iat, so check this host's system clock (NTP)"))
        for outcome in refreshed.dropFirst() {
            guard case .retry(let after, let reason) = outcome else { Issue.record("expected retry, got \(outcome)"); continue }
            #expect(after == ProviderTokenCache.minimumAge)
            #expect(reason.hasPrefix("ExpiredProviderToken for a provider token made 0 s ago"), "\(reason)")
        }
        #expect(transport.tokens?.generation == 2)

        // And the next batch does not make a third token.
        let again = await transport.deliver((11...15).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(again.allSatisfy { if case .retry = $0 { return true }; return false }, "\(again)")
        #expect(transport.tokens?.generation == 2)
        #expect(f.apns.simulator.counters.rejected == ["ExpiredProviderToken": 5 + (2 + 4) + 5])
        #expect(f.apns.simulator.received.isEmpty)
    }

    @Test(arguments: Engine.allCases) func aClockSetBackKeepsTheToken(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        let f = try TransportFixture.tokenAuth(clock: clock)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, clock: clock)
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

    /// Two transports signing with one key (say sandbox and production, or one rebuilt by a
    /// reload) send one token between them: a refresh made by one is used by the other.
    @Test(arguments: Engine.allCases) func transportsWithTheSameKeyShareOneToken(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        let f = try TransportFixture.tokenAuth(clock: clock)
        defer { f.apns.stop() }
        let first = try f.transport(engine: engine, clock: clock)
        let second = try f.transport(engine: engine, ["connections": 2], clock: clock)
        #expect(first.tokens != nil && first.tokens === second.tokens)
        try await first.start()
        try await second.start()
        var outcomes = await first.deliver((1...5).map { TransportFixture.delivery($0) })
        outcomes += await second.deliver((6...10).map { TransportFixture.delivery($0) })
        let firstIAT = Self.iat(clock.now)
        clock.advance(by: 51 * 60)
        outcomes += await second.deliver((11...15).map { TransportFixture.delivery($0) })
        outcomes += await first.deliver((16...20).map { TransportFixture.delivery($0) })
        await first.shutdown()
        await second.shutdown()
        #expect(Self.delivered(outcomes), "\(outcomes)")
        let received = f.apns.simulator.received
        #expect(received.count == 20)
        #expect(Set(received.prefix(10).compactMap(\.tokenIssuedAt)) == [firstIAT])
        #expect(Set(received.dropFirst(10).compactMap(\.tokenIssuedAt)) == [Self.iat(clock.now)])
        #expect(first.tokens?.generation == 2)
        #expect(f.apns.simulator.counters.rejected.isEmpty)

        // Another clock (another daemon in this test process) gets a cache of its own.
        let otherClock = TestClock(start: Date())
        #expect(try f.transport(engine: engine, clock: otherClock).tokens !== first.tokens)
    }

    /// On each connection, the `iat` of the tokens the simulator accepted never goes back.
    static func tokensNeverGoBack(_ received: [ReceivedNotification]) -> Bool {
        Dictionary(grouping: received, by: \.connectionID).values.allSatisfy { list in
            let iats = list.sorted { $0.time < $1.time }.compactMap(\.tokenIssuedAt)
            return zip(iats, iats.dropFirst()).allSatisfy { $0 <= $1 }
        }
    }

    /// A simulator that never answers token 99, and a started transport (timeout 1 s, the test
    /// clock) that has delivered one notification, so its connection is warm.
    static func warmWithSilentToken99(engine: Engine, clock: TestClock, _ settings: [String: JSONValue])
        async throws -> (TransportFixture, APNsHTTP2Transport, [DeliveryOutcome]) {
        var faults = HTTP2Faults()
        faults.unansweredTokens = [TransportFixture.token(99)]
        let f = try TransportFixture.tokenAuth(faults: faults, clock: clock)
        do {
            let transport = try f.transport(engine: engine, settings.merging(["timeout": "1s"]) { a, _ in a }, clock: clock)
            try await transport.start()
            return (f, transport, await transport.deliver([TransportFixture.delivery(1)]))
        } catch {
            f.apns.stop()
            throw error
        }
    }

    /// A request queued before the 50-minute rollover and sent after it carries the new token.
    @Test(arguments: Engine.allCases) func aRequestQueuedAcrossTheRolloverIsSentWithTheNewToken(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        let (f, transport, warm) = try await Self.warmWithSilentToken99(engine: engine, clock: clock, ["maxConcurrentStreams": 1, "connectionRetries": 0])
        defer { f.apns.stop() }
        let firstIAT = Self.iat(clock.now)
        // The silent request holds the only stream. Request 2 is queued only once the simulator
        // holds it: a request waits at most `timeout` for a stream, counted from when it was
        // queued, so queued together with it (under load, the silent stream's own timeout can fire
        // after the queue's) it would give up before the stream came free. 300 ms later, its
        // deadline is that much after the silent stream's.
        async let silent = transport.deliver([TransportFixture.delivery(99)])
        #expect(await eventually(timeout: 10) { f.apns.simulator.counters.unansweredStreams == 1 })
        try await Task.sleep(nanoseconds: 300_000_000)
        async let held = transport.deliver([TransportFixture.delivery(2)])
        try await Task.sleep(nanoseconds: 300_000_000)
        clock.advance(by: 51 * 60)
        let outcomes = await held
        _ = await silent
        await transport.shutdown()
        #expect(Self.delivered(warm) && Self.delivered(outcomes), "\(warm) \(outcomes)")
        let received = f.apns.simulator.received
        let late = try #require(received.first { $0.deviceToken == TransportFixture.token(2) })
        #expect(late.tokenIssuedAt == Self.iat(clock.now))
        #expect(late.tokenIssuedAt != firstIAT)
        #expect(transport.tokens?.generation == 2)
        #expect(f.apns.simulator.counters.rejected["TooManyProviderTokenUpdates"] == nil)
    }

    /// A request sent again alone after the rollover (its stream failed while the connection
    /// answered newer requests) does not take the older token back to that connection.
    @Test(arguments: Engine.allCases) func aResendAfterTheRolloverNeverSendsAnOlderToken(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        let (f, transport, warm) = try await Self.warmWithSilentToken99(engine: engine, clock: clock, ["maxConcurrentStreams": 10, "connectionRetries": 1])
        defer { f.apns.stop() }
        async let held = transport.deliver([TransportFixture.delivery(99)])
        try await Task.sleep(nanoseconds: 300_000_000)
        clock.advance(by: 51 * 60)
        // A new token on the connection while the silent request (old token) is in flight.
        let newer = await transport.deliver((2...5).map { TransportFixture.delivery($0) })
        let silentOutcome = await held
        await transport.shutdown()
        #expect(Self.delivered(warm) && Self.delivered(newer), "\(warm) \(newer)")
        // Sent twice, never answered: no answer, and not 429 for an old token.
        guard case .retry(_, let reason) = silentOutcome[0] else { Issue.record("expected retry, got \(silentOutcome)"); return }
        #expect(reason.hasPrefix("no answer"), "\(reason)")
        #expect(f.apns.simulator.counters.rejected["TooManyProviderTokenUpdates"] == nil)
        let received = f.apns.simulator.received
        #expect(Set(received.map(\.connectionID)).count == 1)
        #expect(Set(received.compactMap(\.tokenIssuedAt)).count == 2)
        #expect(Self.tokensNeverGoBack(received))
    }
}
