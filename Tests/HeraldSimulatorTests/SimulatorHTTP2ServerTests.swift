import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// The simulators' generic HTTP/2 server against `curl --http2` over TLS (ALPN h2): the handler
/// sees the whole request, its answer comes back as given, and a delayed answer holds up no
/// other stream on the same connection.
@Suite("Simulator HTTP/2 server with curl")
struct SimulatorHTTP2ServerTests {
    /// A started server with the shared test certificates; stop it when done.
    static func server(maxBody: Int = 1 << 20, _ handler: @escaping SimulatorHTTP2Server.Handler) throws -> (SimulatorHTTP2Server, TestCertificates) {
        let certs = try TestCertificates.shared()
        let server = try SimulatorHTTP2Server(
            configuration: .init(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey),
                                 maxRequestBodyBytes: maxBody, threadName: "h2-test"),
            handler: handler)
        try server.start()
        return (server, certs)
    }

    @Test func handsTheWholeRequestToTheHandlerAndWritesItsAnswer() async throws {
        let seen = Locked<[SimulatorHTTP2Request]>([])
        let (server, certs) = try Self.server { request in
            seen.withLock { $0.append(request) }
            return SimulatorHTTP2Response(status: 201, headers: [SimulatorHTTP2Header("Location", "/m/1"),
                                                                 SimulatorHTTP2Header("x-echo", request.header("X-Custom") ?? "")],
                                          body: Array("got \(request.body.count) bytes".utf8))
        }
        defer { server.stop() }
        let r = try await Curl.one("https://127.0.0.1:\(server.port)/v1/things:send?x=1",
                             ["-H", "x-custom: hello", "-H", "content-type: text/plain", "--data-binary", "héllo"],
                             caFile: certs.caFile)
        #expect(r.status == 201)
        #expect(r.headers["location"] == "/m/1")
        #expect(r.headers["x-echo"] == "hello")
        #expect(r.headers["content-length"] == "11")
        #expect(r.body == "got 6 bytes")
        let request = try #require(seen.value.first)
        #expect(request.method == "POST")
        #expect(request.path == "/v1/things:send?x=1")
        #expect(request.pathWithoutQuery == "/v1/things:send")
        #expect(request.authority == "127.0.0.1:\(server.port)")
        #expect(request.scheme == "https")
        #expect(request.bodyText == "héllo")
        #expect(request.header("content-type") == "text/plain")
        #expect(request.headers.allSatisfy { !$0.name.hasPrefix(":") && $0.name == $0.name.lowercased() })
        #expect(request.connectionID == 1)
        #expect(server.counters.requests == 1)
    }

    @Test func anEmptyBodyAndAGetWork() async throws {
        let (server, certs) = try Self.server { request in
            SimulatorHTTP2Response(status: request.method == "GET" ? 204 : 500)
        }
        defer { server.stop() }
        let r = try await Curl.one("https://127.0.0.1:\(server.port)/", [], caFile: certs.caFile)
        #expect(r.status == 204)
        #expect(r.body.isEmpty)
    }

    /// Two requests multiplexed on one connection: the one answered after 3 s finishes after the
    /// one answered at once (curl prints `-w` as each transfer completes).
    @Test func aDelayedAnswerHoldsUpNoOtherStream() async throws {
        let (server, certs) = try Self.server { request in
            request.path == "/slow" ? SimulatorHTTP2Response(status: 200, body: Array("slow".utf8), delay: 3)
                                    : SimulatorHTTP2Response(status: 200, body: Array("fast".utf8))
        }
        defer { server.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let base = "https://127.0.0.1:\(server.port)"
        let result = try await Run.program(Curl.path, [
            "-s", "-S", "--http2", "--cacert", certs.caFile, "--parallel", "--parallel-max", "2",
            "-w", "%{url_effective} %{http_code} %{time_total}\n",
            "-o", dir.file("slow"), base + "/slow", "-o", dir.file("fast"), base + "/fast",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.lines.map { $0.split(separator: " ").map(String.init) }
        try #require(lines.count == 2)
        #expect(lines[0][0].hasSuffix("/fast"))
        #expect(lines[1][0].hasSuffix("/slow"))
        #expect(lines.allSatisfy { $0[1] == "200" })
        #expect((Double(lines[1][2]) ?? 0) >= 3)
        #expect(server.counters.connections == 1)
        #expect(try String(contentsOfFile: dir.file("slow"), encoding: .utf8) == "slow")
    }

    @Test func resetAndNoAnswerEndTheStreamAsAsked() async throws {
        let (server, certs) = try Self.server { request in
            SimulatorHTTP2Response(status: 200, action: request.path == "/reset" ? .resetStream : .noAnswer)
        }
        defer { server.stop() }
        let base = "https://127.0.0.1:\(server.port)"
        let reset = try await Run.program(Curl.path, ["-s", "--http2", "--cacert", certs.caFile, base + "/reset"])
        #expect(reset.status == 92)  // CURLE_HTTP2_STREAM
        let silent = try await Run.program(Curl.path, ["-s", "--http2", "--cacert", certs.caFile, "--max-time", "2", base + "/silent"])
        #expect(silent.status == 28)  // CURLE_OPERATION_TIMEDOUT
        #expect(server.counters.resets == 1)
        #expect(server.counters.unanswered == 1)
    }

    @Test func aBodyOverTheLimitGetsA413WithoutCallingTheHandler() async throws {
        let calls = Locked(0)
        let (server, certs) = try Self.server(maxBody: 10) { _ in
            calls.withLock { $0 += 1 }
            return SimulatorHTTP2Response(status: 200)
        }
        defer { server.stop() }
        let url = "https://127.0.0.1:\(server.port)/"
        #expect(try await Curl.one(url, ["--data-binary", "0123456789"], caFile: certs.caFile).status == 200)
        #expect(try await Curl.one(url, ["--data-binary", "0123456789a"], caFile: certs.caFile).status == 413)
        #expect(calls.value == 1)
    }

    @Test func aClientWithoutH2IsRefusedInTheHandshake() async throws {
        let (server, certs) = try Self.server { _ in SimulatorHTTP2Response(status: 200) }
        defer { server.stop() }
        let r = try await Run.program(Curl.path, ["-s", "--http1.1", "--cacert", certs.caFile, "https://127.0.0.1:\(server.port)/"])
        #expect(r.status == 35)  // CURLE_SSL_CONNECT_ERROR: no_application_protocol
    }

    @Test func badSettingsAndFilesAreNamed() {
        #expect(throws: SimulatorHTTP2ServerError.self) {
            _ = try SimulatorHTTP2Server(configuration: .init(tls: .init(certificateFile: "/nonexistent.pem", keyFile: "/nonexistent.key"))) { _ in
                SimulatorHTTP2Response(status: 200)
            }
        }
        do {
            _ = try SimulatorHTTP2Server(configuration: .init(tls: nil, maxConcurrentStreams: 0)) { _ in SimulatorHTTP2Response(status: 200) }
            Issue.record("maxConcurrentStreams 0 was accepted")
        } catch {
            #expect(error.description.contains("maxConcurrentStreams"))
        }
    }
}
