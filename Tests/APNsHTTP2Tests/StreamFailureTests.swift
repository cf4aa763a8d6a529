import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// One stream failing (reset, or never answered) on a connection that answers everything else:
/// only that request is retried, the others are delivered exactly once, the connection stays.
@Suite(.serialized) struct StreamFailureTests {
    static func expectDeliveredOnce(_ batch: [Delivery], _ outcomes: [DeliveryOutcome], _ received: [ReceivedNotification],
                                    sourceLocation: SourceLocation = #_sourceLocation) {
        for (d, o) in zip(batch, outcomes) {
            #expect(o == .delivered(receipt: d.messageID.uuidString.lowercased()), "\(d.token): \(o)", sourceLocation: sourceLocation)
        }
        let ids = Set(batch.map { $0.messageID.uuidString.lowercased() })
        let arrived = received.map(\.apnsID).filter { ids.contains($0) }
        #expect(arrived.count == batch.count, "sent more than once: \(arrived.count - Set(arrived).count)", sourceLocation: sourceLocation)
        #expect(Set(arrived) == ids, sourceLocation: sourceLocation)
    }

    @Test(arguments: Engine.allCases) func aResetStreamIsRetriedAloneAndTheConnectionStaysUp(engine: Engine) async throws {
        let reset = TransportFixture.token(100)
        var faults = HTTP2Faults()
        faults.resetTokens = [reset]
        // Answers take 200 ms, the reset comes at once: the other streams are in flight when it does.
        faults.latency = 0.2
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connectionRetries": 2, "maxConcurrentStreams": 300])
        try await transport.start()
        let batch = (1...200).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        let others = batch.indices.filter { batch[$0].token != reset }
        Self.expectDeliveredOnce(others.map { batch[$0] }, others.map { outcomes[$0] }, f.apns.simulator.received)
        guard case .retry(_, let reason) = outcomes[99] else { Issue.record("expected retry, got \(outcomes[99])"); return }
        #expect(reason.hasPrefix("no answer: ") && reason.contains(engine.resetMarker), "\(reason)")
        let counters = f.apns.simulator.counters
        #expect(counters.resetStreams == 3, "sent once and retried twice (connectionRetries)")
        #expect(counters.connections == 1)
    }

    @Test(arguments: Engine.allCases) func anUnansweredStreamTimesOutAloneAndTheConnectionStaysUp(engine: Engine) async throws {
        let silent = TransportFixture.token(1000)
        var faults = HTTP2Faults()
        faults.unansweredTokens = [silent]
        faults.latency = 0.5
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["timeout": "1s", "connectionRetries": 0])
        try await transport.start()
        // The silent request goes out at about 0.5 s (after the first answer) and times out at
        // about 1.5 s, while a second batch sent at 1.2 s waits for its answers on the same connection.
        let first = (1...50).map { TransportFixture.delivery($0) } + [TransportFixture.delivery(1000)]
        let second = (51...150).map { TransportFixture.delivery($0) }
        async let firstOutcomes = transport.deliver(first)
        try await Task.sleep(nanoseconds: 1_200_000_000)
        let secondOutcomes = await transport.deliver(second)
        let outcomes = await firstOutcomes
        await transport.shutdown()
        let received = f.apns.simulator.received
        Self.expectDeliveredOnce(Array(first.dropLast()), Array(outcomes.dropLast()), received)
        Self.expectDeliveredOnce(second, secondOutcomes, received)
        guard case .retry(_, let reason) = outcomes.last! else { Issue.record("expected retry, got \(outcomes.last!)"); return }
        #expect(reason.hasPrefix("no answer: ") && reason.contains(engine.timeoutMarker), "\(reason)")
        #expect(f.apns.simulator.counters.unansweredStreams == 1)
        #expect(f.apns.simulator.counters.connections == 1)
        #expect(!received.contains { $0.deviceToken == silent })
    }

    @Test(arguments: Engine.allCases) func requestsTakenBackFromFailedConnectionsUseUpTheirRetries(engine: Engine) async throws {
        // Every connection answers two requests, then GOAWAY: the streams opened after the
        // second are refused and taken back. Each time counts as a resend, so a request is sent
        // at most 1 + connectionRetries times, and then left to the dispatcher's backoff.
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 2
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connectionRetries": 2])
        try await transport.start()
        let batch = (1...30).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        var delivered = 0
        for (d, o) in zip(batch, outcomes) {
            switch o {
            case .delivered(let id, _): delivered += 1; #expect(id == d.messageID.uuidString.lowercased())
            case .retry(_, let reason): #expect(reason.hasPrefix("no answer: "), "\(reason)")
            default: Issue.record("\(d.token): \(o)")
            }
        }
        let received = f.apns.simulator.received
        #expect(received.count == delivered && Set(received.map(\.apnsID)).count == delivered)
        // Three connections (the first try and two resends), two answers each; libcurl may open
        // one more for its own retry of refused streams before the engine takes them back.
        let counters = f.apns.simulator.counters
        #expect(counters.goAways == 3 && delivered == 6, "\(counters), \(delivered) delivered")
        #expect(counters.connections <= 6, "\(counters)")
    }

    /// The server allows 5 streams (SETTINGS_MAX_CONCURRENT_STREAMS) where the transport would
    /// send 500: a stream over its limit would be refused, and with no resends allowed that
    /// request would fail.
    @Test(arguments: Engine.allCases) func theServersStreamLimitIsHonoured(engine: Engine) async throws {
        var faults = HTTP2Faults()
        faults.latency = 0.02
        let f = try TransportFixture.tokenAuth(faults: faults) { $0.maxConcurrentStreams = 5 }
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["maxConcurrentStreams": 500, "connectionRetries": 0])
        try await transport.start()
        let batch = (1...60).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        Self.expectDeliveredOnce(batch, outcomes, f.apns.simulator.received)
        #expect(f.apns.simulator.counters.connections == 1)
    }

    @Test(arguments: Engine.allCases) func aSilentServerAnswersEveryRequestWithinTheDocumentedWorstCase(engine: Engine) async throws {
        // docs/configuration.md: at worst 2 × timeout × (1 + connectionRetries) per request.
        var faults = HTTP2Faults()
        faults.latency = 30
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["timeout": "300ms", "connectionRetries": 2])
        try await transport.start()
        let started = Date()
        let outcomes = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        let elapsed = Date().timeIntervalSince(started)
        await transport.shutdown()
        let worstCase: TimeInterval = 2 * 0.3 * 3
        #expect(elapsed < worstCase + 1, "\(elapsed) s")
        for outcome in outcomes {
            guard case .retry(_, let reason) = outcome else { Issue.record("expected retry, got \(outcome)"); continue }
            #expect(reason.hasPrefix("no answer"), "\(reason)")
            #expect(!reason.contains("within 0 s"), "\(reason)")
        }
    }
}
