import Foundation
import HeraldAPNs
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing

/// An inbox in memory, numbering per (app, user); `gate` holds `entries` until opened (to put
/// live events in the middle of a replay).
final class MemoryInbox: InboxStore, Sendable {
    private let state = Locked<(entries: [InboxEntry], counters: [String: Int64])>(([], [:]))
    let gate = WakeSignal()
    let gated = Locked(false)
    let replayStarted = WakeSignal()

    func append(_ entries: [InboxEntry.New], maxPerUser: @Sendable (String) -> Int, now: Date) async throws -> [InboxEntry] {
        state.withLock { s in
            entries.map { e in
                let k = e.app + "\u{0}" + e.user
                s.counters[k, default: 0] += 1
                let numbered = e.numbered(s.counters[k]!)
                s.entries.append(numbered)
                return numbered
            }
        }
    }

    func entries(app: String, user: String, device: String, after: Int64, limit: Int) async throws -> [InboxEntry] {
        let result = state.withLock { s in
            Array(s.entries.filter { $0.app == app && $0.user == user && $0.device == device && $0.seq > after }.prefix(limit))
        }
        if gated.withLock({ $0 }) {
            replayStarted.notify()
            await gate.wait()
        }
        return result
    }

    func entry(app: String, user: String, device: String, notificationID: String) async throws -> InboxEntry? {
        state.withLock { s in s.entries.first { $0.app == app && $0.user == user && $0.device == device && $0.notificationID == notificationID } }
    }

    func lastSequence(app: String, user: String) async throws -> Int64 { state.withLock { $0.counters[app + "\u{0}" + user] ?? 0 } }
    func prune(app: String, createdBefore cutoff: Date) async throws -> Int { 0 }
}

/// A stream that keeps what it was sent.
final class RecordingSink: EventSink, Sendable {
    let bytes = Locked<[UInt8]>([])
    let open = Locked(true)
    func send(_ b: [UInt8]) -> Bool {
        guard open.withLock({ $0 }) else { return false }
        bytes.withLock { $0 += b }
        return true
    }
    func waitForRoom(_ count: Int) async -> Bool { open.withLock { $0 } }
    var text: String { String(decoding: bytes.withLock { $0 }, as: UTF8.self) }
    /// The `id:` of each event, in order.
    var ids: [Int64] { text.split(separator: "\n").filter { $0.hasPrefix("id: ") }.map { Int64($0.dropFirst(4))! } }
}

@Suite struct StreamHubTests {
    let clock = TestClock()

    func hub(_ inbox: MemoryInbox, unparked: Locked<[String]> = Locked([])) -> StreamHub {
        StreamHub(inbox: inbox, clock: clock, logger: .disabled, metrics: MetricsRegistry(), maxPerUser: { _ in 100 },
                  unpark: { app, device in unparked.withLock { $0.append("\(app) \(device)") } })
    }

    func delivery(_ n: Int, device: String = "aa") -> Delivery {
        Delivery(id: Int64(n), notificationID: "n\(n)", app: "app", topic: "app", token: device, user: "alice",
                 transport: "live", content: NotificationContent(alert: .text("hello \(n)")))
    }

    @Test func theEventIsFramedByteForByte() {
        let frame = ServerSentEvents.event(id: 7, name: "notification", data: Array(#"{"a":1}"#.utf8))
        #expect(String(decoding: frame, as: UTF8.self) == "id: 7\nevent: notification\ndata: {\"a\":1}\n\n")
        let lines = ServerSentEvents.event(id: 1, name: "x", data: Array("a\r\nb\rc\nd".utf8))
        #expect(String(decoding: lines, as: UTF8.self) == "id: 1\nevent: x\ndata: a\ndata: b\ndata: c\ndata: d\n\n")
        #expect(ServerSentEvents.heartbeat == Array(": heartbeat\n\n".utf8))
        // An empty payload and a trailing line break still give a data line each.
        #expect(String(decoding: ServerSentEvents.event(id: 2, name: "x", data: []), as: UTF8.self) == "id: 2\nevent: x\ndata: \n\n")
        #expect(String(decoding: ServerSentEvents.event(id: 3, name: "x", data: Array("a\n".utf8)), as: UTF8.self)
                == "id: 3\nevent: x\ndata: a\ndata: \n\n")
        // Split once, framed per id: the same bytes.
        let prepared = ServerSentEvents.dataLines(Array("a\r\nb".utf8))
        #expect(ServerSentEvents.event(id: 9, name: "x", dataLines: prepared) == ServerSentEvents.event(id: 9, name: "x", data: Array("a\r\nb".utf8)))
    }

    @Test func aConnectedDeviceGetsTheEventAndOthersAreNotConnected() async throws {
        let inbox = MemoryInbox()
        let unparked = Locked<[String]>([])
        let hub = hub(inbox, unparked: unparked)
        let sink = RecordingSink()
        let handle = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: nil)
        #expect(unparked.withLock { $0 } == ["app aa"])
        #expect(hub.connectedDevices(app: "app", users: ["alice", "bob"]) == ["alice": ["aa"]])
        let results = await hub.write([delivery(1), delivery(2, device: "bb")])
        #expect(results == [.written(id: 1), .notConnected(since: nil)])
        #expect(sink.text.contains("data: {\"id\":\"n1\",\"app\":\"app\",\"alert\":\"hello 1\""))
        hub.detach(handle)
        #expect(hub.connectedDevices(app: "app", users: ["alice"]).isEmpty)
        #expect(await hub.write([delivery(3)]) == [.notConnected(since: clock.now)])
    }

    @Test func aDeliverySentAgainAfterARestartKeepsItsNumber() async throws {
        let inbox = MemoryInbox()
        // Numbered (event 1) before the daemon stopped, never recorded delivered.
        _ = try await inbox.append([InboxEntry.New(app: "app", user: "alice", device: "aa", notificationID: "n1",
                                                   event: StreamHub.eventJSON(delivery(1)), createdAt: Date())],
                                   maxPerUser: { _ in 100 }, now: Date())
        let hub = hub(inbox)
        // The client read it before the restart and reconnects with Last-Event-ID 1.
        let sink = RecordingSink()
        _ = await hub.attach(sink, app: "app", user: "alice", device: "aa", after: 1)
        var again = delivery(1)
        again.attempt = 2
        #expect(await hub.write([again, delivery(2)]) == [.written(id: 1), .written(id: 2)])
        #expect(sink.ids == [2])
        #expect(try await inbox.lastSequence(app: "app", user: "alice") == 2)
    }

    @Test func replayThenLiveHasNoGapAndNoDuplicate() async throws {
        let inbox = MemoryInbox()
        let hub = hub(inbox)
        // Events 1…3 went to an earlier connection; the client read up to 1.
        let first = RecordingSink()
        let old = await hub.attach(first, app: "app", user: "alice", device: "aa", after: nil)
        _ = await hub.write([delivery(1), delivery(2), delivery(3)])
        hub.detach(old)
        // It reconnects with Last-Event-ID 1; while the replay reads the inbox, event 4 arrives live.
        inbox.gated.withLock { $0 = true }
        let sink = RecordingSink()
        async let attached = hub.attach(sink, app: "app", user: "alice", device: "aa", after: 1)
        await inbox.replayStarted.wait()
        let live = await hub.write([delivery(4)])
        #expect(live == [.written(id: 4)])
        #expect(sink.ids.isEmpty)   // held back until the replay is done
        inbox.gated.withLock { $0 = false }
        inbox.gate.notify()
        _ = await attached
        #expect(sink.ids == [2, 3, 4])
        _ = await hub.write([delivery(5)])
        #expect(sink.ids == [2, 3, 4, 5])
    }
}
