import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The HTTP server's acceptor thread (issue 37): it takes every waiting connection, and answers a
/// health probe that arrives whole in a connection's first bytes without the server thread.
@Suite(.serialized) struct HTTPAcceptorTests {
    static func probe(_ text: String) -> HTTPAcceptor.Probe? {
        HTTPAcceptor.probe(Array(text.utf8)[...]) { method, path in method == "GET" && (path == "/healthz" || path == "/readyz") }
    }

    @Test func onlyAWholeBodilessProbeIsTakenOutOfTheLine() throws {
        let whole = try #require(Self.probe("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(whole.method == "GET" && whole.target == "/healthz" && whole.keepAlive)
        #expect(whole.length == "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8.count)
        #expect(whole.headers == ["host": "x"])
        // A pipelined request after it stays for the server thread: only the probe's bytes are counted.
        let pipelined = try #require(Self.probe("GET /readyz?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /v1/stream HTTP/1.1\r\n"))
        #expect(pipelined.target == "/readyz?x=1" && !pipelined.keepAlive)
        #expect(pipelined.length == "GET /readyz?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8.count)
        #expect(Self.probe("GET /healthz HTTP/1.0\r\n\r\n")?.keepAlive == false)
        // Everything else goes to the server thread, which says what is wrong with it.
        for text in ["GET /healthz HTTP/1.1\r\nHost: x\r\n",                               // headers still coming
                     "GET /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",              // a body
                     "GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                     "GET /healthz HTTP/1.1\r\nX: a\r\n b\r\n\r\n",                        // obs-fold
                     "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",                // a repeated header
                     "GET /healthz HTTP/1.1\r\nBad Name: a\r\n\r\n",
                     "POST /healthz HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\r\n\r\n",
                     "GET http://h/healthz HTTP/1.1\r\n\r\n", "GET /healthz HTTP/2\r\n\r\n",
                     "GET /healthz HTTP/1.1\r\nX: \u{1}\r\n\r\n"] {
            #expect(Self.probe(text) == nil, "\(text.debugDescription)")
        }
        #expect(Self.probe("GET /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n") != nil)
    }

    /// The server thread is stuck for 1.5 s in one request; a `/healthz` on a new connection is
    /// answered within a few milliseconds meanwhile, byte for byte as the server thread would,
    /// and its kept-alive connection carries its next request through the server thread once
    /// that is free. Another request on a new connection waits for the server thread (on main,
    /// so did `/healthz`).
    @Test func aProbeIsAnsweredWhileTheServerThreadIsBusy() async throws {
        var options = HTTPServer.Options()
        options.isProbeRequest = { method, path in method == "GET" && path == "/healthz" }
        let server = HTTPServer(options: options, logger: .disabled, metrics: MetricsRegistry(), immediate: { request in
            switch request.path {
            case "/block":
                usleep(1_500_000)
                return HTTPResponse(status: 200, body: Array("unblocked".utf8))
            case "/healthz": return HTTPResponse.json(200) { $0.string("status", "ok") }
            default: return nil
            }
        }) { _ in HTTPResponse(status: 200, body: Array("pong".utf8)) }
        try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        let blocker = try RawClient(port: server.port)
        try blocker.send("GET /block HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try await Task.sleep(nanoseconds: 200_000_000)

        let probe = try RawClient(port: server.port)
        let start = Date()
        try probe.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        let head = try await probe.awaitHead()
        let seconds = Date().timeIntervalSince(start)
        #expect(seconds < 0.5, "/healthz took \(seconds) s behind a busy server thread")
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(head)")
        #expect(head.contains("\r\nDate: "), "\(head)")
        #expect(head.contains("\r\nContent-Type: application/json\r\n"), "\(head)")
        #expect(head.contains("\r\nContent-Length: 16\r\n"), "\(head)")
        #expect(!head.lowercased().contains("connection: close"), "kept alive: \(head)")
        #expect(try await probe.awaitBytes(16) == Array(#"{"status":"ok"}"#.utf8) + [10])

        // A request that is no probe waits for the server thread.
        let other = try RawClient(port: server.port)
        let otherStart = Date()
        try other.send("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let answer = String(decoding: try await other.awaitEnd(), as: UTF8.self)
        #expect(answer.hasPrefix("HTTP/1.1 200 OK\r\n") && answer.hasSuffix("pong"), "\(answer)")
        #expect(Date().timeIntervalSince(otherStart) > 0.8, "answered by the server thread, after the blocked request")
        #expect(String(decoding: try await blocker.awaitEnd(), as: UTF8.self).hasSuffix("unblocked"))

        // The probe's connection carries its next request, through the server thread.
        try probe.send("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let next = String(decoding: try await probe.awaitEnd(), as: UTF8.self)
        #expect(next.hasPrefix("HTTP/1.1 200 OK\r\n") && next.hasSuffix("pong"), "\(next)")
        await server.stop(deadline: 5)
    }

    /// Out of descriptors, the acceptor neither spins (the listening socket stays readable) nor
    /// loses a connection: the kernel's backlog keeps them, and they are served once descriptors
    /// are free again.
    @Test func outOfDescriptorsTheAcceptorWaitsAndLosesNothing() async throws {
        let server = HTTPServer(options: HTTPServer.Options(), logger: .disabled, metrics: MetricsRegistry()) { _ in
            HTTPResponse(status: 200, body: Array("pong".utf8))
        }
        try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        let port = server.port
        let (cpu, answers): (Double, [String]) = try await offPool {
            // The client's sockets first, then a limit that leaves the server none to accept with.
            let fds = (0..<20).map { _ in socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0) }
            defer { fds.forEach { _ = Glibc.close($0) } }
            var saved = rlimit()
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &saved)
            var highest: Int32 = 0
            for fd in 0..<Int32(65_536) where fcntl(fd, F_GETFD) >= 0 { highest = fd }
            var tight = saved
            tight.rlim_cur = rlim_t(highest + 1)
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &tight)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            for fd in fds {
                _ = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                _ = Array("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            var before = rusage(), after = rusage()
            getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &before)
            usleep(1_000_000)
            getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &after)
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &saved)
            func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
            let cpu = seconds(after.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_utime) - seconds(before.ru_stime)
            var answers: [String] = []
            var buffer = [UInt8](repeating: 0, count: 512)
            for fd in fds {
                var tv = timeval(tv_sec: 10, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                let n = recv(fd, &buffer, buffer.count, 0)
                answers.append(n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : "")
            }
            return (cpu, answers)
        }
        #expect(cpu < 0.5, "\(cpu) s of CPU in the second without descriptors: the acceptor spun")
        #expect(answers.allSatisfy { $0.hasPrefix("HTTP/1.1 200 OK\r\n") && $0.hasSuffix("pong") }, "\(answers)")
        await server.stop(deadline: 5)
    }

    /// 5,000 connections opened in one instant, past the 4,096 the kernel queues for the listening
    /// socket, are all taken at once (no SYN is dropped, which would cost its client a second) and
    /// all answered. (On main the poll thread took one connection per loop, each loop polling every
    /// connection, and the backlog held 1,024.)
    @Test func aBurstOfConnectionsIsAcceptedAtOnce() async throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        try #require(limit.rlim_cur >= 11_000, "RLIMIT_NOFILE \(limit.rlim_cur)")
        // Room for all of them as API requests answered at once (past connectionLimit they would get 503).
        let server = HTTPServer(options: HTTPServer.Options(connectionLimit: 6_000), logger: .disabled, metrics: MetricsRegistry()) { _ in
            HTTPResponse(status: 200, body: Array("pong".utf8))
        }
        try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        let port = server.port
        let slowest: Double = try await offPool {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var fds: [Int32] = []
            defer { fds.forEach { _ = Glibc.close($0) } }
            let start = Storm.now()
            for _ in 0..<5_000 {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                guard fd >= 0 else { throw Storm.Failure(description: "socket: \(String(cString: strerror(errno)))") }
                fds.append(fd)
                // Blocking connects: one whose SYN was dropped returns a second later.
                let rc = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard rc == 0 else { throw Storm.Failure(description: "connect: \(String(cString: strerror(errno)))") }
            }
            let connected = Storm.now() - start
            let request = Array("GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
            for fd in fds { _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            var buffer = [UInt8](repeating: 0, count: 256)
            for fd in fds {
                var tv = timeval(tv_sec: 20, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                let n = recv(fd, &buffer, buffer.count, 0)
                guard n > 12, String(decoding: buffer[0..<12], as: UTF8.self) == "HTTP/1.1 200" else {
                    throw Storm.Failure(description: "a connection got \(String(decoding: buffer[0..<max(0, n)], as: UTF8.self))")
                }
            }
            return connected
        }
        #expect(slowest < 1, "5,000 connects took \(slowest) s (a dropped SYN costs a second)")
        await server.stop(deadline: 5)
    }
}
