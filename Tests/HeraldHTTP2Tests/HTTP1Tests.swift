import Foundation
import HeraldCore
import HeraldHTTP2
import HeraldTestKit
import Testing

/// `allowHTTP1` (curl engine) against a TLS server whose ALPN offers only `http/1.1`.
@Suite(.serialized) struct HTTP1Tests {
    @Test func http1IsUsedWhenAllowedWithSeveralConnections() async throws {
        let server = try await HTTP1Server.start(delay: 0.3)
        defer { server.stop() }
        var c = Servers.configuration(port: server.port, engine: .curl, certs: try TestCertificates.shared())
        c.allowHTTP1 = true
        c.maxHTTP1Connections = 4
        let client = try Servers.client(c)
        let shared = [HTTP2Header("content-type", "application/octet-stream"), HTTP2Header("x-test", "yes")]
        let results = await client.send((0..<12).map { HTTP2Request(path: "/push/\($0)", headers: shared, body: HTTP2Body(Array("body \($0)".utf8))) })
        await client.stop(deadline: 5)
        var ports = Set<String>()
        for (i, result) in results.enumerated() {
            guard case .answered(let r) = result else { Issue.record("\(i): \(result)"); continue }
            #expect(r.status == 201 && r.body == Array("body \(i)".utf8) && r.header("x-seen-test") == "yes", "\(i): \(r)")
            if let port = r.header("x-client-port") { ports.insert(port) }
        }
        // One request at a time per HTTP/1.1 connection: several connections, at most the limit.
        #expect((2...4).contains(ports.count), "\(ports)")
    }

    @Test(arguments: HTTP2Engine.allCases) func withoutAllowHTTP1AServerWithoutH2FailsForGood(engine: HTTP2Engine) async throws {
        let server = try await HTTP1Server.start(delay: 0)
        defer { server.stop() }
        let client = try Servers.client(Servers.configuration(port: server.port, engine: engine, certs: try TestCertificates.shared()))
        let results = await client.send([HTTP2Request(path: "/push/1", headers: [], body: HTTP2Body(Array("x".utf8)))])
        await client.stop(deadline: 5)
        guard case .failed(.noHTTP2(let origin)) = results[0] else { Issue.record("\(results[0])"); return }
        #expect(origin == "https://127.0.0.1:\(server.port)")
    }
}
