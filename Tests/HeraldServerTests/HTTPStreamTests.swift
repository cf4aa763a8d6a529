import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Streaming responses of the HTTP server over real sockets (127.0.0.1, port 0), read byte for byte.
@Suite(.serialized) struct HTTPStreamTests {
    /// A server whose `/stream` opens a stream (kept in `opened`) and everything else answers 200.
    final class Harness: @unchecked Sendable {
        let server: HTTPServer
        let opened = Locked<[HTTPStream]>([])
        /// The reasons each stream's onClose received (exactly one is expected).
        let closed = Locked<[ObjectIdentifier: [HTTPStream.CloseReason]]>([:])
        let seenHeaders = Locked<[String: String]>([:])
        var port: Int { server.port }

        init(options: HTTPServer.Options = HTTPServer.Options(), heartbeat: (TimeInterval, [UInt8])? = nil,
             closing: [UInt8] = Array(": server shutting down\n\n".utf8), first: [UInt8] = []) throws {
            var options = options
            options.isStreamRequest = { method, path in method == "GET" && path == "/stream" }
            let opened = self.opened, closed = self.closed, seen = self.seenHeaders
            server = HTTPServer(options: options, logger: .disabled, metrics: MetricsRegistry()) { request in
                guard request.path == "/stream" else { return HTTPResponse(status: 200, body: Array("pong".utf8)) }
                seen.withLock { $0 = request.headers }
                return .stream(headers: [("Content-Type", "text/event-stream")], heartbeat: heartbeat, closing: closing) { stream in
                    stream.onClose { reason in closed.withLock { $0[stream.id, default: []].append(reason) } }
                    if !first.isEmpty { stream.write(first) }
                    opened.withLock { $0.append(stream) }
                }
            }
            try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        }

        func reason(_ stream: HTTPStream) -> HTTPStream.CloseReason? { closed.withLock { $0[stream.id]?.last } }
        func closeCount(_ stream: HTTPStream) -> Int { closed.withLock { $0[stream.id]?.count ?? 0 } }
    }

    @Test func bytesArriveExactlyAsWrittenInChunks() async throws {
        let h = try Harness(first: Array("hello".utf8))
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 41\r\nAccept: text/event-stream\r\n\r\n")
        let head = try await client.awaitHead()
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(head.lowercased().contains("transfer-encoding: chunked\r\n"))
        #expect(head.lowercased().contains("content-type: text/event-stream\r\n"))
        #expect(h.seenHeaders.value["last-event-id"] == "41")
        #expect(h.seenHeaders.value["accept"] == "text/event-stream")
        #expect(try await client.awaitBytes(10) == Array("5\r\nhello\r\n".utf8))
        let stream = try #require(h.opened.value.first)
        #expect(stream.write(Array("id: 1\ndata: {\"a\":1}\n\n".utf8)))
        #expect(try await client.awaitBytes(27) == Array("15\r\nid: 1\ndata: {\"a\":1}\n\n\r\n".utf8))
        stream.finish(final: Array("bye".utf8))
        #expect(!stream.isOpen)
        #expect(!stream.write(Array("late".utf8)))
        #expect(try await client.awaitBytes(13) == Array("3\r\nbye\r\n0\r\n\r\n".utf8))
        #expect(await eventually(timeout: 20) { h.reason(stream) == .finished })
        await h.server.stop(deadline: 5)
        #expect(h.closeCount(stream) == 1)
    }

    @Test func aBacklogLargerThanTheBoundIsWrittenInPiecesWhenDrained() async throws {
        var options = HTTPServer.Options()
        options.streamBufferBytes = 4096
        let h = try Harness(options: options)
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try await client.awaitHead()
        #expect(await eventually(timeout: 20) { !h.opened.value.isEmpty })
        let stream = h.opened.value[0]
        // 64 pieces of 1 KB: 16 times the bound, each written when the previous ones were taken.
        let piece = [UInt8](repeating: UInt8(ascii: "p"), count: 1024)
        final class Writer: @unchecked Sendable {
            let stream: HTTPStream, piece: [UInt8]
            var left = 64
            init(_ stream: HTTPStream, _ piece: [UInt8]) { self.stream = stream; self.piece = piece }
            func next() {
                guard left > 0 else { return }
                left -= 1
                if stream.write(piece) { stream.whenDrained { self.next() } }
            }
        }
        let writer = Writer(stream, piece)
        writer.next()
        var received = 0
        while received < 64 * 1024 {
            let size = try await client.awaitBytes(5)  // "400\r\n"
            #expect(size == Array("400\r\n".utf8))
            #expect(try await client.awaitBytes(1026) == piece + [13, 10])
            received += 1024
        }
        #expect(stream.isOpen)
        #expect(h.reason(stream) == nil)
        await h.server.stop(deadline: 5)
    }

    @Test func heartbeatArrives() async throws {
        let h = try Harness(heartbeat: (0.1, Array(": heartbeat\n\n".utf8)))
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try await client.awaitHead()
        let beat = Array("D\r\n: heartbeat\n\n\r\n".utf8)
        #expect(try await client.awaitBytes(beat.count) == beat)
        #expect(try await client.awaitBytes(beat.count) == beat)
        await h.server.stop(deadline: 5)
    }

    @Test func aClientThatStopsReadingIsDisconnectedPastTheBound() async throws {
        var options = HTTPServer.Options()
        options.streamBufferBytes = 16 * 1024
        let h = try Harness(options: options)
        let client = try RawClient(port: h.port, receiveBuffer: 4096)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try await client.awaitHead()
        #expect(await eventually(timeout: 20) { !h.opened.value.isEmpty })
        let stream = h.opened.value[0]
        // The client never reads again: the socket buffers fill, then the stream's own bound.
        // Each write waits for the server thread to take the bytes, so the bound is passed only
        // once the socket buffers are full.
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 4096)
        var accepted = 0
        while stream.write(chunk), accepted < 256 << 20 {
            accepted += chunk.count
            _ = await eventually(timeout: 0.05) { stream.unsentBytes == 0 }
        }
        #expect(accepted > options.streamBufferBytes)
        #expect(accepted < 256 << 20)
        #expect(!stream.isOpen)
        // Cutting the stream shuts its socket down, which the hang-up watcher sees as a hang-up:
        // that view (here arriving before or after the server thread's release) keeps the reason.
        stream.hungUp()
        #expect(await eventually(timeout: 20) { h.reason(stream) != nil })
        #expect(h.reason(stream) == .overflow)
        await h.server.stop(deadline: 5)
        #expect(h.closeCount(stream) == 1)
    }

    @Test func aClientThatWentAwayIsFoundByTheHeartbeat() async throws {
        let h = try Harness(heartbeat: (0.1, Array(": heartbeat\n\n".utf8)))
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try await client.awaitHead()
        #expect(await eventually(timeout: 20) { !h.opened.value.isEmpty })
        let stream = h.opened.value[0]
        client.close()
        #expect(await eventually(timeout: 20) { h.reason(stream) != nil })
        #expect(h.reason(stream) == .clientGone)
        #expect(!stream.isOpen)
        await h.server.stop(deadline: 5)
    }

    @Test func stopSendsTheClosingBytesToEveryStreamThenEndsIt() async throws {
        let h = try Harness()
        var clients: [RawClient] = []
        for _ in 0..<5 {
            let c = try RawClient(port: h.port)
            try c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try await c.awaitHead()
            clients.append(c)
        }
        #expect(await eventually(timeout: 20) { h.opened.value.count == 5 })
        let started = Date()
        await h.server.stop(deadline: 60)
        // Far below the deadline: open streams do not hold stop() back.
        #expect(Date().timeIntervalSince(started) < 30)
        let end = Array("18\r\n: server shutting down\n\n\r\n0\r\n\r\n".utf8)
        for c in clients {
            #expect(try await c.awaitEnd() == end)
        }
        for s in h.opened.value {
            #expect(h.reason(s) == .serverStopping)
            #expect(h.closeCount(s) == 1)
        }
    }

    @Test func streamsDoNotCountAgainstTheConnectionLimit() async throws {
        var options = HTTPServer.Options(connectionLimit: 100)
        options.maxStreams = 1_500
        let h = try Harness(options: options)
        let port = h.port
        let clients: [RawClient] = try await offPool {
            try (0..<1_500).map { _ in
                let c = try RawClient(port: port)
                try c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
                return c
            }
        }
        #expect(await eventually(timeout: 60) { h.opened.value.count == 1_500 })
        // The API answers with every stream open (each request on a connection of its own).
        for _ in 0..<20 {
            let c = try RawClient(port: h.port)
            try c.send("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answer = String(decoding: try await c.awaitEnd(), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 200 OK"))
            #expect(answer.hasSuffix("pong"))
        }
        // One stream more than maxStreams: 503 too_many_streams.
        let extra = try RawClient(port: h.port)
        try extra.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        let refused = String(decoding: try await extra.awaitEnd(), as: UTF8.self)
        #expect(refused.hasPrefix("HTTP/1.1 503"))
        #expect(refused.contains(#""code":"too_many_streams""#))

        await h.server.stop(deadline: 5)
        clients.forEach { $0.close() }
    }

    /// API connections count once their request line is read: past the limit, the oldest one
    /// still receiving its request is closed to make room; streams are untouched, and connections
    /// that sent nothing yet count against no budget (issue 37: in a reconnect storm those are
    /// requests the server has not read, not slow clients).
    @Test func apiConnectionsPastTheLimitCloseTheOldestIncompleteOneWhateverTheStreams() async throws {
        var options = HTTPServer.Options(connectionLimit: 5)
        options.maxStreams = 10
        let h = try Harness(options: options)
        var clients: [RawClient] = []
        for _ in 0..<3 {
            let c = try RawClient(port: h.port)
            try c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            clients.append(c)
        }
        #expect(await eventually(timeout: 20) { h.opened.value.count == 3 })
        // Five API connections whose headers are still coming (they count), and three that sent
        // nothing (they do not).
        var incomplete: [RawClient] = []
        for _ in 0..<5 {
            let c = try RawClient(port: h.port)
            try c.send("GET /ping HTTP/1.1\r\nHost: x\r\n")
            incomplete.append(c)
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        let silent = try (0..<3).map { _ in try RawClient(port: h.port) }
        #expect(await eventually(timeout: 20) { h.server.connectionCounts == (connections: 11, streams: 3) })
        // One more: the oldest incomplete API connection is closed to make room, and the request
        // is answered; the streams and the silent connections are untouched.
        let over = try RawClient(port: h.port)
        try over.send("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let answer = String(decoding: try await over.awaitEnd(), as: UTF8.self)
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
        #expect(try await incomplete[0].awaitEnd().isEmpty)
        #expect(h.opened.value.allSatisfy { $0.isOpen })
        // 3 streams, 4 incomplete, 3 silent.
        #expect(await eventually(timeout: 20) { h.server.connectionCounts == (connections: 10, streams: 3) })
        await h.server.stop(deadline: 5)
        (clients + incomplete + silent).forEach { $0.close() }
    }

    @Test func idleStreamsOutliveTheConnectionTimeout() async throws {
        let h = try Harness(options: HTTPServer.Options(connectionTimeout: 1))
        let client = try RawClient(port: h.port)
        try client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try await client.awaitHead()
        #expect(await eventually(timeout: 20) { !h.opened.value.isEmpty })
        // An idle API connection is closed by the 1 s timeout meanwhile (the timeout is active).
        let idle = try RawClient(port: h.port)
        try await Task.sleep(nanoseconds: 3_000_000_000)
        #expect(try await idle.awaitEnd().isEmpty)
        let stream = h.opened.value[0]
        #expect(stream.isOpen)
        #expect(h.reason(stream) == nil)
        #expect(stream.write(Array("still here".utf8)))
        #expect(try await client.awaitBytes(15) == Array("A\r\nstill here\r\n".utf8))
        await h.server.stop(deadline: 5)
    }
}

/// A blocking HTTP/1.1 client socket that reads raw bytes (no de-chunking), for byte-exact checks.
final class RawClient: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible { var description: String }
    private(set) var fd: Int32
    private var buffered: [UInt8] = []

    init(port: Int, receiveBuffer: Int? = nil) throws {
        // CLOEXEC: a child another test spawns meanwhile must not inherit the socket (its copy
        // would keep the connection open after close(), and the server would never see it go).
        fd = try Loopback.connect(port: port, receiveBuffer: receiveBuffer)
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n == bytes.count else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
    }

    // Blocking reads run on threads of their own: the test process's cooperative pool has two
    // threads, which the servers under test (and suites running in parallel) need.
    func awaitHead() async throws -> String { try await offPool { try self.readHead() } }
    func awaitBytes(_ count: Int) async throws -> [UInt8] { try await offPool { try self.read(exactly: count) } }
    func awaitEnd() async throws -> [UInt8] { try await offPool { try self.readToEnd() } }

    /// Fills the buffer with one read; false at the end of the stream.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &chunk, chunk.count, 0)
        if n < 0 {
            if errno == ECONNRESET { return false }
            throw Failure(description: "recv: \(String(cString: strerror(errno))) (after \(buffered.count) unread bytes)")
        }
        if n == 0 { return false }
        buffered += chunk[0..<n]
        return true
    }

    /// The status line and headers, through the blank line.
    func readHead() throws -> String {
        while true {
            if let end = buffered.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: buffered[..<end.upperBound], as: UTF8.self)
                buffered.removeSubrange(..<end.upperBound)
                return head
            }
            guard try fill() else { throw Failure(description: "closed before the end of the headers") }
        }
    }

    func read(exactly count: Int) throws -> [UInt8] {
        while buffered.count < count {
            guard try fill() else { throw Failure(description: "closed after \(buffered.count) of \(count) bytes: \(String(decoding: buffered, as: UTF8.self))") }
        }
        defer { buffered.removeSubrange(..<count) }
        return Array(buffered[..<count])
    }

    /// Everything until the server closes the connection.
    func readToEnd() throws -> [UInt8] {
        while try fill() {}
        defer { buffered = [] }
        return buffered
    }
}

/// Runs blocking work on a thread of its own, never on the cooperative pool.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
