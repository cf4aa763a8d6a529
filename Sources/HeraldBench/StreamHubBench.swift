import FoundationEssentials
import Glibc
import HeraldCLI
import HeraldCore
import HeraldServer

/// `herald-bench stream-hub`: the daemon's stream hub alone, with N acknowledging streams held by
/// in-memory sinks: the CPU one broadcast costs it per event (the queue's numbering call, the
/// writes, the transport's report, the ack wait and the ack), beside the floor of the same run:
/// framing the same event and writing it to the same sinks without the hub.
enum StreamHubBench {
    static let spec = CommandSpec(
        path: "stream-hub",
        summary: "The stream hub alone: CPU per event of a broadcast to N acknowledging streams (in-memory sinks), beside framing and writing the same events.",
        usage: "stream-hub [--n N] [--rounds R] [--batch-size B]",
        options: [
            .value("n", "N", "streams, one user and device each (default 10000)"),
            .value("rounds", "R", "broadcasts measured (default 9; the median is reported)"),
            .value("batch-size", "B", "deliveries numbered at once, as the queue hands them over (default 2000)"),
        ],
        discussion: """
        Registers N acknowledging streams (ack=1) with a StreamHub whose sinks keep only a byte count
        under a lock, then broadcasts one notification R times. Each round, per batch of B: the
        hub's entries(for:now:) and numbered(_:entries:) (the queue's numbering and the writes), the
        transport's write(_:) in a task of its own (it waits for the acks), then every device
        acknowledges, and the round ends when every write has answered acknowledged. Reported: the
        process's CPU time per event (all threads), median and range over the rounds. The floor, in
        the same run: framing the same event per stream and writing it to the same sinks. No
        sockets, no store: this isolates the hub's bookkeeping from the HTTP layer and SQLite
        (herald-bench stream measures them together).
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 1...1_000_000) ?? 10_000
        let rounds = try arguments.int("rounds", command: spec.path, in: 1...1000) ?? 9
        let batchSize = try arguments.int("batch-size", command: spec.path, in: 1...100_000) ?? 2000
        let app = "bench.stream"
        let hub = StreamHub(inbox: NoInbox(), clock: SystemClock(), logger: .disabled, metrics: MetricsRegistry(),
                            maxPerUser: { _ in 100 }, unpark: { _, _ in })
        let users = (0..<n).map { "u\($0)" }
        let devices = (0..<n).map { i -> String in
            let hex = String(i, radix: 16)
            return String(repeating: "0", count: 32 - hex.count) + hex
        }
        let sinks = (0..<n).map { _ in CountingSink() }
        for i in 0..<n {
            _ = await hub.attach(sinks[i], app: app, user: users[i], device: devices[i], after: nil, acking: true, ackTimeout: 60)
        }
        let content = NotificationContent(alert: .text("to everyone"))
        var hubCPU: [Double] = [], floorCPU: [Double] = []
        for round in 0..<rounds {
            let seq = Int64(round + 1)
            let notificationID = UUIDSource.random().lowercasedString
            let deliveries = (0..<n).map { i in
                Delivery(id: Int64(round * n + i), notificationID: notificationID, app: app, topic: app, token: devices[i],
                         user: users[i], transport: "live", content: content)
            }
            let before = processCPU()
            var writes: [Task<[LocalWriteResult], Never>] = []
            var start = 0
            while start < n {
                let batch = Array(deliveries[start..<min(n, start + batchSize)])
                let entries = hub.entries(for: batch, now: Date()).map { $0?.numbered(seq) }
                await hub.numbered(batch, entries: entries)
                writes.append(Task { await hub.write(batch) })
                start += batchSize
            }
            for i in 0..<n { hub.acknowledgeAtOnce(app: app, user: users[i], device: devices[i], id: seq) }
            var acknowledged = 0
            for w in writes {
                for r in await w.value { if case .acknowledged = r { acknowledged += 1 } }
            }
            hubCPU.append(processCPU() - before)
            guard acknowledged == n else { throw CLIError.runtime("round \(round): \(acknowledged) of \(n) writes answered acknowledged") }

            // The floor: the same event framed per stream and written to the same sinks.
            let data = Array(#"data: {"id":"\#(notificationID)","app":"\#(app)","alert":"to everyone"}"#.utf8) + [10, 10]
            let floorBefore = processCPU()
            for sink in sinks {
                var frame = Array("id: \(seq)\nevent: notification\n".utf8)
                frame += data
                _ = sink.send(frame)
            }
            floorCPU.append(processCPU() - floorBefore)
        }
        func summary(_ seconds: [Double]) -> String {
            let us = seconds.map { $0 * 1e6 / Double(n) }.sorted()
            return "\(us[us.count / 2].fixed(2)) µs per event (rounds: \(us.first!.fixed(2))–\(us.last!.fixed(2)))"
        }
        context.console.out("== bench stream-hub: one notification to \(n) acknowledging streams, batches of \(batchSize), \(rounds) rounds")
        context.console.out("the hub (numbering, writes, write's report, ack waits, acks): \(summary(hubCPU)) of CPU")
        context.console.out("reference (same run): framing the event and writing it to the same sinks: \(summary(floorCPU))")
    }

    /// This process's CPU time (all threads), in seconds.
    static func processCPU() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// A stream that keeps only how many bytes it took, under a lock (as the HTTP layer's stream does).
    final class CountingSink: EventSink, Sendable {
        private let bytes = Locked(0)
        func send(_ b: [UInt8]) -> Bool {
            bytes.withLock { $0 += b.count }
            return true
        }
        func waitForRoom(_ count: Int) async -> Bool { true }
    }

    /// The hub replays from the inbox only for a reconnect, which this benchmark has none of.
    final class NoInbox: InboxStore, Sendable {
        func append(_ entries: [InboxEntry.New], maxPerUser: @Sendable (String) -> Int, now: Date) async throws -> [InboxEntry] { [] }
        func entries(app: String, user: String, device: String, after: Int64, limit: Int) async throws -> [InboxEntry] { [] }
        func entry(app: String, user: String, device: String, notificationID: String) async throws -> InboxEntry? { nil }
        func lastSequence(app: String, user: String) async throws -> Int64 { 0 }
        func prune(app: String, createdBefore cutoff: Date) async throws -> Int { 0 }
    }
}
