import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing

/// The ``InboxStore`` contract, run against SQLite and PostgreSQL.
struct InboxContractTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    /// Opens `nodes` storages of `backend` on one fresh database (the first closed and reopened
    /// by ``reopen``), closing them all on every path.
    final class Opened: @unchecked Sendable {
        let backend: Backend
        let configuration: HeraldConfiguration
        var nodes: [OpenStorage] = []
        init(_ backend: Backend, _ configuration: HeraldConfiguration) {
            self.backend = backend
            self.configuration = configuration
        }
        func open() async throws -> OpenStorage {
            let s = try await backend.driver.open(configuration, metrics: MetricsRegistry(), exclusive: false)
            nodes.append(s)
            return s
        }
        func closeAll() async {
            for n in nodes { await n.close() }
            nodes = []
        }
    }

    func withInbox(_ backend: Backend, nodes: Int = 1, _ body: (Opened) async throws -> Void) async throws {
        let dir = try TemporaryDirectory(prefix: "herald-inbox")
        defer { dir.remove() }
        let opened = await Opened(backend, try backend.configuration(in: dir))
        do {
            for _ in 0..<nodes { _ = try await opened.open() }
            try await body(opened)
        } catch {
            await opened.closeAll()
            throw error
        }
        await opened.closeAll()
    }

    func new(_ user: String, _ id: String = "n", device: String = "aa01", app: String = "app", at offset: TimeInterval = 0) -> InboxEntry.New {
        InboxEntry.New(app: app, user: user, device: device, notificationID: id,
                       event: Array(#"{"id":"\#(id)","alert":"hé \"q\" \\ {x} ✓"}"#.utf8),
                       createdAt: Date(millisecondsSince1970: t0.addingTimeInterval(offset).millisecondsSince1970))   // stored in ms
    }

    static let keep100: @Sendable (String) -> Int = { _ in 100 }

    @Test(arguments: Backend.allCases)
    func appendNumbersPerAppAndUserInOrder(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let inbox = o.nodes[0].inbox
            #expect(try await inbox.lastSequence(app: "app", user: "ann") == 0)
            let batch = [new("ann", "n1"), new("bob", "n1"), new("ann", "n2"), new("ann", "n1", app: "other"), new("ann", "n3")]
            let numbered = try await inbox.append(batch, maxPerUser: Self.keep100, now: t0)
            #expect(numbered.map(\.seq) == [1, 1, 2, 1, 3])
            #expect(numbered == zip(batch, [1, 1, 2, 1, 3]).map { $0.numbered($1) })
            let next = try await inbox.append([new("bob", "n4"), new("ann", "n4")], maxPerUser: Self.keep100, now: t0)
            #expect(next.map(\.seq) == [2, 4])
            #expect(try await inbox.lastSequence(app: "app", user: "ann") == 4)
            #expect(try await inbox.lastSequence(app: "app", user: "bob") == 2)
            #expect(try await inbox.lastSequence(app: "other", user: "ann") == 1)
            #expect(try await inbox.append([], maxPerUser: Self.keep100, now: t0).isEmpty)
        }
    }

    @Test(arguments: Backend.allCases)
    func entriesFilterByDeviceAndSequence(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let inbox = o.nodes[0].inbox
            var batch: [InboxEntry.New] = (1...6).map { (i: Int) -> InboxEntry.New in
                new("ann", "n\(i)", device: i % 2 == 0 ? "bb02" : "aa01", at: Double(i) * 0.001)
            }
            batch += [new("bob", "x"), new("ann", "y", app: "other")]
            let numbered = try await inbox.append(batch, maxPerUser: Self.keep100, now: t0)
            let a = try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 100)
            #expect(a == [numbered[0], numbered[2], numbered[4]])   // seq 1, 3, 5: this device only, oldest first, bytes and ms intact
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 1, limit: 100).map(\.seq) == [3, 5])
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 2, limit: 1).map(\.seq) == [3])
            #expect(try await inbox.entries(app: "app", user: "ann", device: "bb02", after: 4, limit: 100).map(\.seq) == [6])
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 5, limit: 100).isEmpty)
            #expect(try await inbox.entries(app: "app", user: "ann", device: "cc03", after: 0, limit: 100).isEmpty)
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 0).isEmpty)
        }
    }

    @Test(arguments: Backend.allCases)
    func anEntryIsFoundByItsNotificationAndDevice(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let inbox = o.nodes[0].inbox
            let numbered = try await inbox.append([new("ann", "n1"), new("ann", "n1", device: "bb02"), new("ann", "n2")],
                                                  maxPerUser: Self.keep100, now: t0)
            #expect(try await inbox.entry(app: "app", user: "ann", device: "bb02", notificationID: "n1") == numbered[1])
            #expect(try await inbox.entry(app: "app", user: "ann", device: "aa01", notificationID: "n2") == numbered[2])
            #expect(try await inbox.entry(app: "app", user: "ann", device: "aa01", notificationID: "n3") == nil)
            #expect(try await inbox.entry(app: "app", user: "bob", device: "aa01", notificationID: "n1") == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func maxPerUserDropsTheOldest(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let inbox = o.nodes[0].inbox
            let keep: @Sendable (String) -> Int = { $0 == "app" ? 3 : 10 }
            // More in one call than the app keeps: all numbered and returned, only the newest 3 kept.
            let mine: [InboxEntry.New] = (1...5).map { new("ann", "n\($0)") }
            let others: [InboxEntry.New] = (1...5).map { new("ann", "m\($0)", app: "other") }
            let first = try await inbox.append(mine + others, maxPerUser: keep, now: t0)
            #expect(first.map(\.seq) == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5])
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 100).map(\.seq) == [3, 4, 5])
            #expect(try await inbox.entries(app: "other", user: "ann", device: "aa01", after: 0, limit: 100).map(\.seq) == [1, 2, 3, 4, 5])
            // Later calls push the oldest out, per user, across devices.
            _ = try await inbox.append([new("ann", "n6", device: "bb02"), new("bob", "b1")], maxPerUser: keep, now: t0)
            _ = try await inbox.append([new("ann", "n7")], maxPerUser: keep, now: t0)
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 100).map(\.seq) == [5, 7])
            #expect(try await inbox.entries(app: "app", user: "ann", device: "bb02", after: 0, limit: 100).map(\.seq) == [6])
            #expect(try await inbox.entries(app: "app", user: "bob", device: "aa01", after: 0, limit: 100).map(\.seq) == [1])
            #expect(try await inbox.lastSequence(app: "app", user: "ann") == 7)
        }
    }

    @Test(arguments: Backend.allCases)
    func pruneByCutoffKeepsTheCounter(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let inbox = o.nodes[0].inbox
            _ = try await inbox.append([new("ann", "n1", at: 0), new("bob", "n2", at: 10), new("ann", "n3", at: 20),
                                        new("ann", "n4", app: "other", at: 0)], maxPerUser: Self.keep100, now: t0)
            #expect(try await inbox.prune(app: "app", createdBefore: t0) == 0)
            #expect(try await inbox.prune(app: "app", createdBefore: t0.addingTimeInterval(15)) == 2)   // n1, n2; not `other`
            #expect(try await inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 100).map(\.notificationID) == ["n3"])
            #expect(try await inbox.entries(app: "app", user: "bob", device: "aa01", after: 0, limit: 100).isEmpty)
            #expect(try await inbox.entries(app: "other", user: "ann", device: "aa01", after: 0, limit: 100).count == 1)
            // Numbers are not reused once their entries are gone.
            #expect(try await inbox.prune(app: "app", createdBefore: t0.addingTimeInterval(100)) == 1)
            #expect(try await inbox.append([new("ann", "n5"), new("bob", "n6")], maxPerUser: Self.keep100, now: t0).map(\.seq) == [3, 2])
        }
    }

    @Test(arguments: Backend.allCases)
    func entriesAndCounterSurviveAReopen(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let before = try await o.nodes[0].inbox.append([new("ann", "n1"), new("ann", "n2")], maxPerUser: Self.keep100, now: t0)
            await o.closeAll()
            let s = try await o.open()   // SQLite: the same file opened again; PostgreSQL: a new driver instance
            #expect(try await s.inbox.entries(app: "app", user: "ann", device: "aa01", after: 0, limit: 100) == before)
            #expect(try await s.inbox.lastSequence(app: "app", user: "ann") == 2)
            _ = try await s.inbox.prune(app: "app", createdBefore: t0.addingTimeInterval(1))
            #expect(try await s.inbox.append([new("ann", "n3")], maxPerUser: Self.keep100, now: t0).map(\.seq) == [3])
        }
    }

    /// Two writers appending for the same users at once (PostgreSQL: two nodes on one database)
    /// never get one number twice, and each (app, user) is numbered 1…n without a hole.
    @Test(arguments: Backend.allCases)
    func concurrentAppendsNeverRepeatANumber(_ backend: Backend) async throws {
        try await withInbox(backend, nodes: backend == .postgresql ? 2 : 1) { o in
            let writers = o.backend == .postgresql ? [o.nodes[0].inbox, o.nodes[1].inbox] : [o.nodes[0].inbox, o.nodes[0].inbox]
            let users = ["ann", "bob", "cy"]
            let calls = 25
            let results = try await withThrowingTaskGroup(of: [InboxEntry].self) { group in
                for (w, inbox) in writers.enumerated() {
                    group.addTask {
                        var got: [InboxEntry] = []
                        for c in 0..<calls {
                            // Each call touches every user, in a different order per writer.
                            let order = w == 0 ? users : users.reversed()
                            let batch = order.flatMap { u in (0..<3).map { self.new(u, "w\(w)c\(c)-\($0)") } }
                            got += try await inbox.append(batch, maxPerUser: Self.keep100, now: self.t0)
                        }
                        return got
                    }
                }
                return try await group.reduce(into: [InboxEntry]()) { $0 += $1 }
            }
            #expect(results.count == writers.count * calls * users.count * 3)
            for u in users {
                let seqs = results.filter { $0.user == u }.map(\.seq)
                #expect(Set(seqs).count == seqs.count, "a number given twice to \(u)")
                #expect(seqs.sorted() == Array(1...Int64(seqs.count)))
                #expect(try await o.nodes[0].inbox.lastSequence(app: "app", user: u) == Int64(seqs.count))
            }
            // Within one writer's calls, numbers increase in append order.
            for w in 0..<writers.count {
                let mine = results.filter { $0.notificationID.hasPrefix("w\(w)") && $0.user == "ann" }.map(\.seq)
                #expect(mine == mine.sorted())
            }
        }
    }

    /// A reader following one device while two writers append (PostgreSQL: two nodes) sees the
    /// numbers without a hole: a number is visible only once every lower one is, so a replay
    /// cursor never skips an entry that commits later.
    @Test(arguments: Backend.allCases)
    func aReaderFollowingAppendsSeesNoHole(_ backend: Backend) async throws {
        try await withInbox(backend, nodes: backend == .postgresql ? 2 : 1) { o in
            let writers = o.backend == .postgresql ? [o.nodes[0].inbox, o.nodes[1].inbox] : [o.nodes[0].inbox, o.nodes[0].inbox]
            let reader = o.nodes[0].inbox
            // The writers go on until the reader has seen 10 pages while they were writing.
            let enough = Locked(false)
            let perCall = 2
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (w, inbox) in writers.enumerated() {
                    group.addTask {
                        var c = 0
                        while !enough.withLock({ $0 }) && c < 5_000 {
                            _ = try await inbox.append((0..<perCall).map { self.new("ann", "w\(w)c\(c)-\($0)") }, maxPerUser: { _ in 1_000_000 }, now: self.t0)
                            c += 1
                        }
                    }
                }
                var cursor: Int64 = 0
                var pages = 0
                func follow() async throws {
                    for e in try await reader.entries(app: "app", user: "ann", device: "aa01", after: cursor, limit: 1000) {
                        #expect(e.seq == cursor + 1, "after \(cursor) the reader saw \(e.seq)")
                        cursor = e.seq
                    }
                }
                var reads = 0
                while pages < 10 && reads < 200_000 {
                    reads += 1
                    let before = cursor
                    try await follow()
                    if cursor > before { pages += 1 }
                }
                enough.withLock { $0 = true }
                try await group.waitForAll()
                try await follow()
                #expect(cursor == (try await reader.lastSequence(app: "app", user: "ann")))
                #expect(pages == 10)
            }
        }
    }

    /// Not a timed test: `HERALD_MEASURE_INBOX=1 swift test --filter InboxContractTests` prints
    /// the append rate of a broadcast (10,000 users, one entry each, calls of 500), alone and
    /// while the queue's writer is busy accepting notifications on the same database.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["HERALD_MEASURE_INBOX"] == "1"), arguments: Backend.allCases)
    func measureBroadcastAppend(_ backend: Backend) async throws {
        try await withInbox(backend) { o in
            let storage = o.nodes[0]
            let event = Array(String(repeating: "x", count: 200).utf8)
            for (round, busyQueue) in [(0, false), (1, true)] {
                let load: Task<Int, any Error>? = busyQueue ? Task {
                    var n = 0
                    while !Task.isCancelled {
                        let deliveries = (0..<100).map { PlannedDelivery(token: String(format: "%04x", $0), user: "u", transport: "t", messageID: UUID()) }
                        _ = try await storage.queue.enqueue(QueuedNotification(id: UUID().uuidString, app: "app", topic: "t", content: NotificationContent(alert: .text("x")),
                                                                               idempotencyKey: nil, createdAt: self.t0, deliveries: deliveries), idempotencySince: self.t0)
                        n += 1
                    }
                    return n
                } : nil
                var seen = 0
                let start = DispatchTime.now().uptimeNanoseconds
                for call in 0..<20 {
                    let batch = (0..<500).map { i in
                        InboxEntry.New(app: "app", user: "user\(call * 500 + i)", device: String(format: "%064x", call * 500 + i),
                                       notificationID: "n\(round)", event: event, createdAt: t0)
                    }
                    let numbered = try await storage.inbox.append(batch, maxPerUser: Self.keep100, now: t0)
                    #expect(numbered.allSatisfy { $0.seq == Int64(round + 1) })
                    seen += numbered.count
                }
                let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                load?.cancel()
                let enqueued = try await load?.value ?? 0
                #expect(seen == 10_000)
                print("inbox append (\(backend.rawValue)\(busyQueue ? ", queue accepting meanwhile" : "")): 10,000 users in calls of 500: \(Int(Double(seen) / seconds)) entries/s"
                      + (busyQueue ? "; queue: \(Int(Double(enqueued * 100) / seconds)) deliveries/s accepted" : ""))
            }
        }
    }
}
