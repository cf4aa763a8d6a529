import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing

/// The stream hub's acks, ack timeouts and per-device and per-user limits, on a test clock.
@Suite struct StreamHubAckTests {
    let clock = TestClock()

    final class ClosableSink: EventSink, Sendable {
        let inner = RecordingSink()
        let closed = Locked(false)
        func send(_ b: [UInt8]) -> Bool { !closed.withLock { $0 } && inner.send(b) }
        func waitForRoom(_ count: Int) async -> Bool { !closed.withLock { $0 } }
        func close() { closed.withLock { $0 = true } }
    }

    func hub(unparked: Locked<[String]> = Locked([]), events: Locked<[String]> = Locked([])) -> StreamHub {
        StreamHub(inbox: MemoryInbox(), clock: clock, logger: .disabled, metrics: MetricsRegistry(), maxPerUser: { _ in 100 },
                  unpark: { app, device in unparked.withLock { $0.append("\(app) \(device)") } },
                  opened: { _, _, device in events.withLock { $0.append("opened \(device)") } },
                  closed: { _, device in events.withLock { $0.append("closed \(device)") } })
    }

    func delivery(_ n: Int, device: String = "aa") -> Delivery {
        Delivery(id: Int64(n), notificationID: "n\(n)", app: "app", topic: "app", token: device, user: "alice",
                 transport: "live", content: NotificationContent(alert: .text("hello \(n)")))
    }

    @Test func aWriteToAnAckingStreamEndsAcknowledgedWhenTheAckComes() async throws {
        let hub = hub()
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil, acking: true, ackTimeout: 5)
        async let results = hub.write([delivery(1), delivery(2)])
        #expect(await clock.waitForSleepers(1, timeout: 10))
        #expect(sink.ids == [1, 2])
        #expect(hub.awaitingAck(app: "app", device: "aa", notificationID: "n2") == 2)
        // Cumulative: one ack for both; an ack of another user's token for the device is ignored.
        #expect(await hub.acknowledge(app: "app", user: "mallory", device: "aa", id: 2) == .noStream)
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 2) == .recorded)
        #expect(await results == [.acknowledged(id: 1), .acknowledged(id: 2)])
        #expect(hub.awaitingAck(app: "app", device: "aa", notificationID: "n2") == nil)
        // Already acknowledged when written (an id past the last event): at once.
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 10) == .recorded)
        #expect(await hub.write([delivery(3)]) == [.acknowledged(id: 3)])
    }

    @Test func noAckInTimeIsNotConnectedWithNoDateAndTheDeviceLeavesUntilItAcksAgain() async throws {
        let unparked = Locked<[String]>([]), events = Locked<[String]>([])
        let hub = hub(unparked: unparked, events: events)
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil, acking: true, ackTimeout: 2)
        unparked.withLock { $0 = [] }
        async let results = hub.write([delivery(1)])
        #expect(await clock.waitForSleepers(1, timeout: 10))
        clock.advance(by: 1.9)
        #expect(hub.connectedDevices(app: "app", users: ["alice"]) == ["alice": ["aa"]], "not yet")
        clock.advance(by: 0.2)
        #expect(await results == [.notConnected(since: nil)])
        #expect(hub.connectedDevices(app: "app", users: ["alice"]).isEmpty, "out of the foreground")
        #expect(events.withLock { $0 } == ["opened aa", "closed aa"], "the other nodes are told")
        // While unresponsive, nothing more is written to it: the next write falls back at once.
        #expect(await hub.write([delivery(2)]) == [.notConnected(since: nil)])
        #expect(sink.ids == [1])
        // It acknowledges event 1 (late): present again, its parked deliveries are made due.
        #expect(await hub.acknowledge(app: "app", user: "alice", device: "aa", id: 1) == .recorded)
        #expect(hub.connectedDevices(app: "app", users: ["alice"]) == ["alice": ["aa"]])
        #expect(unparked.withLock { $0 } == ["app aa"])
        #expect(events.withLock { $0 } == ["opened aa", "closed aa", "opened aa"])
        // The timed-out delivery comes back (parked, then due): it keeps event 1 and is not sent twice.
        #expect(await hub.write([delivery(1)]) == [.acknowledged(id: 1)])
        #expect(sink.ids == [1])
    }

    @Test func aStreamThatClosesWhileWaitingForItsAckIsNotConnectedAsOfTheClose() async throws {
        let hub = hub()
        let sink = RecordingSink()
        let connection = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil, acking: true, ackTimeout: 30)
        async let results = hub.write([delivery(1)])
        #expect(await clock.waitForSleepers(1, timeout: 10))
        hub.detach(connection)
        #expect(await results == [.notConnected(since: clock.now)])
    }

    @Test func aClientWithoutAcksIsDeliveredOnWrite() async throws {
        let hub = hub()
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil)
        #expect(await hub.write([delivery(1)]) == [.written(id: 1)])
        #expect(clock.sleeperCount == 0)
    }

    @Test func aDeviceOverItsLimitLosesItsOldestStreamAndAUserOverItsLimitIsRefused() async throws {
        let hub = hub()
        let limits = StreamHub.Limits(perDevice: 2, perUser: 3)
        let sinks = (0..<3).map { _ in ClosableSink() }
        var connections: [StreamHub.Connection] = []
        for s in sinks { connections.append(try #require(hub.register(s, app: "app", user: "alice", device: "aa", limits: limits))) }
        #expect(sinks.map { $0.closed.withLock { $0 } } == [true, false, false], "the oldest was replaced")
        #expect(hub.count == 2)
        hub.detach(connections[0])
        #expect(hub.count == 2, "a replaced stream's close does not count twice")
        #expect(hub.refusal(app: "app", user: "alice", device: "bb", limits: limits) == nil)
        #expect(hub.register(ClosableSink(), app: "app", user: "alice", device: "bb", limits: limits) != nil)
        let refusal = try #require(hub.refusal(app: "app", user: "alice", device: "cc", limits: limits))
        #expect(refusal.contains("api.streams.maxPerUser"))
        #expect(hub.register(ClosableSink(), app: "app", user: "alice", device: "cc", limits: limits) == nil)
        // The device at its own limit replaces its oldest: the user's count does not grow.
        #expect(hub.register(ClosableSink(), app: "app", user: "alice", device: "aa", limits: limits) != nil)
        #expect(hub.count == 3)
        #expect(hub.register(ClosableSink(), app: "app", user: "bob", device: "dd", limits: limits) != nil, "another user is not locked out")
    }
}
