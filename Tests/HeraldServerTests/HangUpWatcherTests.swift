import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The HTTP server's hang-up watcher over real sockets: a suspended stream whose client closes
/// (FIN) or resets (RST) is ended at once, takes no more writes and frees its slot; no heartbeat
/// runs in these tests, so nothing but the watcher can find the close.
@Suite(.serialized) struct HangUpWatcherTests {
    typealias Harness = HTTPStreamTests.Harness

    /// Opens a stream and waits until the server holds it (suspended: nothing to send).
    static func open(_ h: Harness) async throws -> (RawClient, HTTPStream) {
        let before = h.opened.value.count
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await client.awaitHead().hasPrefix("HTTP/1.1 200 "))
        #expect(await eventually(timeout: 10) { h.opened.value.count == before + 1 })
        return (client, h.opened.value[before])
    }

    static func reset(_ client: RawClient) {
        var l = linger(l_onoff: 1, l_linger: 0)
        setsockopt(client.fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
        client.close()
    }

    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func aClientThatClosesOrResetsIsSeenWithin100msAndTakesNoMoreWrites(_ rst: Bool) async throws {
        let h = try Harness()
        let (client, stream) = try await Self.open(h)
        try await Task.sleep(nanoseconds: 50_000_000)
        if rst { Self.reset(client) } else { client.close() }
        let seen = await ForegroundTruthTests.secondsUntil(deadline: 0.1) { h.reason(stream) == .clientGone }
        #expect(seen != nil, "onClose did not run within 100 ms of the client's \(rst ? "RST" : "FIN")")
        #expect(!stream.isOpen)
        #expect(!stream.write(Array("data: late\n\n".utf8)), "a write after the hang-up must be refused")
        #expect(await eventually(timeout: 5) { h.server.openStreams == 0 })
        #expect(h.closeCount(stream) == 1)
        await h.server.stop(deadline: 5)
        #expect(h.closeCount(stream) == 1, "onClose runs exactly once")
    }

    @Test(.timeLimit(.minutes(1))) func aClosedStreamsSlotIsFreeAtOnce() async throws {
        var options = HTTPServer.Options()
        options.maxStreams = 1
        let h = try Harness(options: options)
        let (first, _) = try await Self.open(h)
        let refused = try RawClient(port: h.port)
        try refused.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await refused.awaitHead().hasPrefix("HTTP/1.1 503 "), "the one slot is taken")
        first.close()
        let start = Date()
        var status = ""
        // Freed when the close is seen (milliseconds alone); 2 s of room for a loaded machine.
        while Date().timeIntervalSince(start) < 2 {
            let next = try RawClient(port: h.port)
            try next.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            status = try await next.awaitHead()
            if status.hasPrefix("HTTP/1.1 200 ") { break }
        }
        #expect(status.hasPrefix("HTTP/1.1 200 "), "no slot 2 s after the close: \(status)")
        await h.server.stop(deadline: 5)
    }

    @Test(.timeLimit(.minutes(1))) func bytesFromAClientThatStaysAreNotAHangUp() async throws {
        let h = try Harness()
        let (client, stream) = try await Self.open(h)
        try client.send("x")
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(stream.isOpen)
        #expect(h.reason(stream) == nil)
        #expect(stream.write(Array("data: still here\n\n".utf8)))
        #expect(try await client.awaitBytes(3).count == 3)
        await h.server.stop(deadline: 5)
    }

    /// Among 1,000 open streams, each of 40 closes (FIN and RST in turn) is seen within 100 ms,
    /// and only the closed ones end.
    @Test(.timeLimit(.minutes(2))) func amongAThousandStreamsEachCloseIsSeenAtOnceAndOnlyIt() async throws {
        let h = try Harness()
        var clients: [RawClient] = []
        var streams: [HTTPStream] = []
        for _ in 0..<1_000 {
            let (c, s) = try await Self.open(h)
            clients.append(c)
            streams.append(s)
        }
        var slowest = 0.0
        for i in stride(from: 0, to: 1_000, by: 25) {
            if i % 50 == 0 { clients[i].close() } else { Self.reset(clients[i]) }
            let stream = streams[i]
            let seen = await ForegroundTruthTests.secondsUntil(deadline: 0.1) { h.reason(stream) == .clientGone }
            #expect(seen != nil, "stream \(i): its close was not seen within 100 ms")
            slowest = max(slowest, seen ?? 1)
        }
        #expect(await eventually(timeout: 10) { h.server.openStreams == 960 })
        for (i, s) in streams.enumerated() where i % 25 != 0 { #expect(s.isOpen && h.reason(s) == nil, "stream \(i) ended") }
        _ = clients
        await h.server.stop(deadline: 5)
    }
}
