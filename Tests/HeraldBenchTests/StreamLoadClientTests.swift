import Foundation
import HeraldCore
@testable import HeraldBench
import HeraldServer
import Testing

/// The benchmark's load client against the daemon's HTTP server: what it parses and counts.
@Suite(.serialized) struct StreamLoadClientTests {
    @Test func eventsHeartbeatsAndDisconnectsAreCounted() async throws {
        let streams = Locked<[HTTPStream]>([])
        let server = HTTPServer(options: HTTPServer.Options(), logger: .disabled, metrics: MetricsRegistry(), immediate: { request in
            request.path == "/stream" ? .eventStream(heartbeat: 0.05) { stream in streams.withLock { $0.append(stream) } } : nil
        }) { _ in HTTPResponse(status: 404) }
        let port = try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        let n = 20
        let targets = (0..<n).map { _ in StreamLoadClient.Target(url: "http://127.0.0.1:\(port)/stream?x=1", headers: [("Last-Event-ID", "7")])! }
            + [StreamLoadClient.Target(url: "http://127.0.0.1:\(port)/missing")!]
        // The client's loop blocks: it runs on a thread of its own, not on the cooperative pool.
        let run: Run = await withCheckedContinuation { (continuation: CheckedContinuation<Run, Never>) in
            Thread.detachNewThread {
                continuation.resume(returning: Self.drive(targets: targets, streams: streams, n: n))
            }
        }
        let (phase, counters, events) = (run.phase, run.counters, run.events)
        #expect(phase == 3)
        #expect(counters.statuses == [200: n, 404: 1])
        #expect(counters.disconnects == n)
        #expect(counters.streaming == 0)
        #expect(events.count == n)
        for e in events {
            #expect(e.event == "notification")
            #expect(e.id.flatMap(Int.init) != nil)
            #expect(e.data == "{\"n\":\(e.id ?? "")}\nsecond line")
        }
        #expect(Set(events.map(\.connection)).count == n)
        await server.stop(deadline: 5)
    }

    /// Acknowledgements as requests on kept-alive connections: every event acknowledged with its
    /// id, each answered 204, on no more connections than the pool allows.
    @Test(arguments: [false, true]) func everyEventIsAcknowledgedOnAConnectionEachOrOnKeptAliveOnes(keepAlive: Bool) async throws {
        let streams = Locked<[HTTPStream]>([])
        let acked = Locked<[String]>([])
        let metrics = MetricsRegistry()
        let slots = Locked(0)
        let server = HTTPServer(options: HTTPServer.Options(), logger: .disabled, metrics: metrics, immediate: { request in
            request.path == "/stream" ? .eventStream(heartbeat: 60) { stream in streams.withLock { $0.append(stream) } } : nil
        }) { request in
            guard request.path == "/stream/ack", request.query["u"] != nil else { return HTTPResponse(status: 404) }
            acked.withLock { $0.append(request.query["u"]! + ":" + String(decoding: request.body, as: UTF8.self)) }
            return HTTPResponse(status: 204)
        }
        let port = try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        let n = 20, events = 3, pool = 2
        let targets = (0..<n).map { i in
            StreamLoadClient.Target(host: "127.0.0.1", port: port, path: "/stream?u=\(i)", ackPath: "/stream/ack?u=\(i)")
        }
        let counters: StreamLoadClient.Counters = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let client = StreamLoadClient(targets: targets, maxPendingConnects: 4, maxAcksInFlight: pool, keepAliveAcks: keepAlive) { _ in }
                var written = 0
                let end = Date().addingTimeInterval(60)
                client.run(tick: 0.01) {
                    if Date() > end { return true }
                    let c = client.counters
                    if written < events, c.streaming == n, streams.value.count == n, c.acksPending == 0, c.events == written * n {
                        written += 1
                        for s in streams.value { s.write(Array("id: \(written)\ndata: {}\n\n".utf8)) }
                        return false
                    }
                    return written == events && c.events == events * n && c.acksPending == 0
                }
                let c = client.counters
                slots.withLock { $0 = client.slotCount }
                client.closeAll()
                continuation.resume(returning: c)
            }
        }
        // Closed acknowledgements' slots are taken again (poll() refuses more entries than the
        // descriptor limit: 10,000 streams with a connection per ack passed it on the second event).
        #expect(slots.value <= n + pool, "\(slots.value) poll entries for \(n) streams and \(pool) acks at once")
        #expect(counters.events == n * events)
        #expect(counters.ackStatuses == [204: n * events])
        #expect(counters.ackFailures == 0)
        let expected = Set((0..<n).flatMap { i in (1...events).map { "\(i):{\"id\":\($0)}" } })
        #expect(Set(acked.value) == expected)
        #expect(acked.value.count == n * events)
        // n streams, then the acknowledgements' connections: one each, or at most the pool.
        let connections = Int(metrics.value("herald_http_connections_total"))
        if keepAlive { #expect(connections <= n + pool) } else { #expect(connections == n + n * events) }
        for s in streams.value { s.finish() }
        await server.stop(deadline: 5)
    }

    struct Run: @unchecked Sendable {
        var phase: Int
        var counters: StreamLoadClient.Counters
        var events: [StreamLoadClient.Event]
    }

    /// Opens the streams, writes one event to each once all are open and have had a heartbeat,
    /// lets two more heartbeats per stream pass, then finishes them; returns what the client saw.
    static func drive(targets: [StreamLoadClient.Target], streams: Locked<[HTTPStream]>, n: Int) -> Run {
        var events: [StreamLoadClient.Event] = []
        let client = StreamLoadClient(targets: targets, maxPendingConnects: 4) { events.append($0) }
        var phase = 0
        var heartbeatsAfter = 0
        let end = Date().addingTimeInterval(60)
        client.run(tick: 0.01) {
            if Date() > end { return true }
            switch phase {
            case 0:
                // Every stream open and at least one heartbeat seen on each connection's worth.
                guard client.counters.streaming == n, streams.value.count == n, client.counters.comments >= n else { return false }
                for (i, s) in streams.value.enumerated() {
                    s.write(Array("id: \(i)\nevent: notification\ndata: {\"n\":\(i)}\ndata: second line\n\n".utf8))
                }
                phase = 1
                return false
            case 1:
                guard events.count >= n else { return false }
                // Heartbeats after the event: their blank lines are no event (the id persists).
                heartbeatsAfter = client.counters.comments + 2 * n
                phase = 2
                return false
            case 2:
                guard client.counters.comments >= heartbeatsAfter else { return false }
                for s in streams.value { s.finish() }
                phase = 3
                return false
            default:
                return client.counters.disconnects == n && client.counters.statuses.values.reduce(0, +) == n + 1
            }
        }
        return Run(phase: phase, counters: client.counters, events: events)
    }
}
