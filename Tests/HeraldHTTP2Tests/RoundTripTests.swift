import Foundation
import HeraldCore
import HeraldHTTP2
import HeraldTestKit
import Testing

/// The client against nghttpd, a real HTTP/2 server: requests and answers with headers and
/// bodies, many streams, results in order.
@Suite(.serialized) struct RoundTripTests {
    @Test(arguments: HTTP2Engine.allCases) func aRequestAndItsAnswerWithHeadersAndBody(engine: HTTP2Engine) async throws {
        let server = try await NGHTTPD.start()
        defer { server.stop() }
        let client = try Servers.client(Servers.configuration(port: server.port, engine: engine, certs: try TestCertificates.shared()))
        let body = HTTP2Body(Array(#"{"message":"hello"}"#.utf8))
        let results = await client.send([
            HTTP2Request(path: "/echo", headers: [HTTP2Header("content-type", "application/json"), HTTP2Header("X-Test", "1")], body: body),
            HTTP2Request(method: "GET", path: "/missing", headers: [], body: .empty),
            HTTP2Request(method: "GET", path: "/other", headers: [], body: .empty),
        ])
        await client.stop(deadline: 5)
        guard case .answered(let echo) = results[0], case .answered(let missing) = results[1], case .answered(let file) = results[2] else {
            Issue.record("expected answers, got \(results)")
            return
        }
        #expect(echo.status == 200)
        #expect(echo.body == body.bytes)
        #expect(echo.header("server")?.hasPrefix("nghttpd") == true, "\(echo.headers)")
        #expect(echo.header("Server") == echo.header("server"))
        #expect(echo.headers.allSatisfy { $0.name == $0.name.lowercased() && !$0.name.hasPrefix(":") })
        #expect(echo.attempts == 1)
        // GET: nghttpd serves the file, or 404.
        #expect(missing.status == 404)
        #expect(file.status == 200 && file.body == Array("file other\n".utf8))
    }

    @Test(arguments: HTTP2Engine.allCases) func manyStreamsComeBackInOrder(engine: HTTP2Engine) async throws {
        let server = try await NGHTTPD.start()
        defer { server.stop() }
        var c = Servers.configuration(port: server.port, engine: engine, certs: try TestCertificates.shared())
        c.maxConcurrentStreams = 50
        let client = try Servers.client(c)
        let shared = [HTTP2Header("content-type", "text/plain")]
        let requests = (0..<300).map { i in
            HTTP2Request(path: i % 7 == 0 ? "/other" : "/echo", headers: shared, ownHeaders: [HTTP2Header("x-request", String(i))],
                         body: HTTP2Body(Array("request \(i)".utf8)))
        }
        let results = await client.send(requests)
        await client.stop(deadline: 5)
        #expect(results.count == 300)
        for (i, result) in results.enumerated() {
            guard case .answered(let r) = result else { Issue.record("\(i): \(result)"); continue }
            #expect(r.status == 200 && r.body == Array("request \(i)".utf8), "\(i): \(r.status) \(String(decoding: r.body, as: UTF8.self))")
        }
    }

    @Test func stoppedOrNeverStartedClientsRefuseAtOnce() async throws {
        let client = try HTTP2Client(configuration: HTTP2ClientConfiguration(host: "127.0.0.1", port: 9), name: "idle",
                                     logger: .disabled, metrics: MetricsRegistry())
        #expect(!client.isRunning)
        let before = await client.send([HTTP2Request(path: "/", headers: [], body: .empty)])
        guard case .failed(.notRunning) = before[0] else { Issue.record("\(before)"); return }
        await client.stop(deadline: 1)  // never started: returns at once
        try client.start()
        #expect(client.isRunning)
        await client.stop(deadline: 1)
        #expect(!client.isRunning)
        let after = await client.send([HTTP2Request(path: "/", headers: [], body: .empty)])
        guard case .failed(.notRunning) = after[0] else { Issue.record("\(after)"); return }
    }

    @Test func badSettingsAreRefusedWithTheirName() {
        var c = HTTP2ClientConfiguration(host: "127.0.0.1")
        c.allowHTTP1 = true
        #expect(throws: HTTP2ClientError.configuration("allowHTTP1 needs the curl engine")) {
            try HTTP2Client(configuration: c, name: "x", logger: .disabled, metrics: MetricsRegistry())
        }
        c = HTTP2ClientConfiguration(host: "127.0.0.1")
        c.proxy = "socks5://user:secret@proxy:1080"
        do {
            _ = try HTTP2Client(configuration: c, name: "x", logger: .disabled, metrics: MetricsRegistry())
            Issue.record("a SOCKS proxy was accepted by the nghttp2 engine")
        } catch {
            #expect(error.description.contains("socks5://***@proxy:1080") && !error.description.contains("secret"), "\(error)")
        }
        c.engine = .curl
        #expect(throws: Never.self) { try HTTP2Client(configuration: c, name: "x", logger: .disabled, metrics: MetricsRegistry()) }
    }
}
