import Foundation
import HeraldAPNs
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing

/// The stream hub as ``InboxNumbering``: which claimed deliveries it numbers, the writes at
/// ``StreamHub/numbered(_:entries:)``, and ``StreamHub/write(_:)`` reporting them afterwards
/// without a second append or a second write.
@Suite struct StreamHubNumberingTests {
    let clock = TestClock()

    func hub(_ inbox: MemoryInbox) -> StreamHub {
        StreamHub(inbox: inbox, clock: clock, logger: .disabled, metrics: MetricsRegistry(), maxPerUser: { _ in 100 },
                  unpark: { _, _ in })
    }

    func delivery(_ n: Int, device: String = "aa", attempt: Int = 1) -> Delivery {
        Delivery(id: Int64(n), notificationID: "n\(n)", app: "app", topic: "app", token: device, user: "alice",
                 transport: "live", attempt: attempt, content: NotificationContent(alert: .text("hello \(n)")))
    }

    /// What the queue does with the hub's entries inside its claim: numbers them (here, from `first`).
    func number(_ entries: [InboxEntry.New?], from first: Int64 = 1) -> [InboxEntry?] {
        var next = first
        return entries.map { e in
            guard let e else { return nil }
            defer { next += 1 }
            return e.numbered(next)
        }
    }

    @Test func onlyFirstAttemptsToDevicesWithAStreamAreNumbered() async throws {
        let inbox = MemoryInbox()
        let hub = hub(inbox)
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil)
        let deliveries = [delivery(1), delivery(2, device: "bb"), delivery(3, attempt: 2)]
        let entries = hub.entries(for: deliveries, now: clock.now)
        #expect(entries.map { $0?.device } == ["aa", nil, nil])
        #expect(entries[0]?.user == "alice" && entries[0]?.notificationID == "n1")
        #expect(hub.inboxMaxPerUser("app") == 100)
    }

    @Test func numberedEventsAreWrittenOnceAndReportedByTheWrite() async throws {
        let inbox = MemoryInbox()
        let hub = hub(inbox)
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil)
        let deliveries = [delivery(1), delivery(2), delivery(3, device: "bb")]
        let numbered = number(hub.entries(for: deliveries, now: clock.now), from: 7)
        await hub.numbered(deliveries, entries: numbered)
        // Written at once, in number order.
        #expect(sink.ids == [7, 8])
        let results = await hub.write(deliveries)
        #expect(results == [.written(id: 7), .written(id: 8), .notConnected(since: nil)])
        // Neither written again nor appended again (the claim numbered them).
        #expect(sink.ids == [7, 8])
        #expect(try await inbox.lastSequence(app: "app", user: "alice") == 0)
    }

    @Test func anAckingStreamsNumberedEventsWaitForTheAck() async throws {
        let hub = hub(MemoryInbox())
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil, acking: true, ackTimeout: 5)
        let deliveries = [delivery(1), delivery(2)]
        await hub.numbered(deliveries, entries: number(hub.entries(for: deliveries, now: clock.now)))
        #expect(sink.ids == [1, 2])
        async let results = hub.write(deliveries)
        #expect(await clock.waitForSleepers(1, timeout: 10))
        #expect(hub.awaitingAck(app: "app", device: "aa", notificationID: "n2") == 2)
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 2) == .recorded)
        #expect(await results == [.acknowledged(id: 1), .acknowledged(id: 2)])
    }

    /// A numbered event written after the device acknowledged a later number (the later one was
    /// written first): the ack on record does not show the client has it, so it waits for an
    /// ack that arrives after its write, or falls back when none does.
    @Test func anEventWrittenAfterTheDeviceAckedPastItWaitsForAFreshAck() async throws {
        let hub = hub(MemoryInbox())
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil, acking: true, ackTimeout: 5)
        // Number 4 went out first and was acknowledged; then number 3 is written.
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 4) == .recorded)
        let late = [delivery(3)]
        await hub.numbered(late, entries: number(hub.entries(for: late, now: clock.now), from: 3))
        #expect(sink.ids == [3])
        async let results = hub.write(late)
        #expect(await clock.waitForSleepers(1, timeout: 10))
        #expect(hub.awaitingAck(app: "app", device: "aa", notificationID: "n3") == 3)
        // The client reads it and acknowledges what it read last.
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 3) == .recorded)
        #expect(await results == [.acknowledged(id: 3)])

        // Without a fresh ack it is not counted delivered: past the timeout it goes to the fallback.
        let other = [delivery(2)]
        await hub.numbered(other, entries: number(hub.entries(for: other, now: clock.now), from: 2))
        async let unanswered = hub.write(other)
        #expect(await clock.waitForSleepers(1, timeout: 10))
        clock.advance(by: 6)
        let r = await unanswered
        guard case .notConnected = r[0] else { Issue.record("expected the fallback, got \(r)"); return }
    }

    @Test func aStreamThatClosesBeforeTheWriteKeepsTheNumberForTheReturn() async throws {
        let inbox = MemoryInbox()
        let hub = hub(inbox)
        let first = RecordingSink()
        let connection = await hub.attach(first, app: "app", user: "alice", device: "aa", after: nil)
        let deliveries = [delivery(1)]
        let entries = hub.entries(for: deliveries, now: clock.now)
        // It closes between the claim's commit and the write.
        hub.detach(connection)
        await hub.numbered(deliveries, entries: number(entries, from: 4))
        #expect(first.ids.isEmpty)
        guard case .notConnected = await hub.write(deliveries)[0] else {
            Issue.record("a closed stream's numbered event is not connected")
            return
        }
        // The device is back (its parked delivery returns, still attempt 1): the same number,
        // not a new one, and no second append.
        let second = RecordingSink()
        _ = await hub.attach(second, app: "app", user: "alice", device: "aa", after: nil)
        #expect(hub.entries(for: deliveries, now: clock.now) == [nil])
        #expect(await hub.write(deliveries) == [.written(id: 4)])
        #expect(second.ids == [4])
        #expect(try await inbox.lastSequence(app: "app", user: "alice") == 0)
    }
}
