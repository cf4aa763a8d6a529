import Foundation
import HeraldCore
import HeraldHTTP2
import HeraldSimulator
import HeraldTestKit
import Testing

/// The client's last check: a request with a field HTTP/2 does not allow (RFC 9113 §8.2) is
/// refused as a programming error and never reaches the server, on either engine; the rest of
/// the batch goes as usual.
@Suite(.serialized) struct FieldCheckTests {
    /// Adds a header that could break the request to every attempt (as a faulty hook would).
    struct BadHooks: HTTP2RequestHooks {
        let added: [HTTP2Header]
        func willStart(_ attempt: HTTP2Attempt) -> HTTP2AttemptStart { .send(adding: added) }
        func review(_ response: HTTP2Response, of attempt: HTTP2Attempt) -> HTTP2Review { .accept }
    }

    static func request(_ n: Int, jwt: String, headers extra: [HTTP2Header] = [], own: [HTTP2Header] = [], path: String? = nil) -> HTTP2Request {
        let headers = [HTTP2Header("apns-topic", "com.example.app"), HTTP2Header("apns-push-type", "alert"),
                       HTTP2Header("authorization", "bearer \(jwt)")] + extra
        return HTTP2Request(path: path ?? "/3/device/\(ConnectionTests.token(n))", headers: headers,
                            ownHeaders: [HTTP2Header("apns-id", UUID().uuidString.lowercased())] + own,
                            body: HTTP2Body(Array(#"{"aps":{"alert":"n\#(n)"}}"#.utf8)))
    }

    @Test(arguments: HTTP2Engine.allCases) func aHeaderThatWouldBreakTheRequestIsNeverSent(engine: HTTP2Engine) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let jwt = try apns.jwt()
        let client = try Servers.client(ConnectionTests.configuration(apns, engine: engine))
        let bad: [(HTTP2Request, String)] = [
            (Self.request(2, jwt: jwt, headers: [HTTP2Header("apns-collapse-id", "a\r\nx-evil: 1")]), "header apns-collapse-id: its value contains CR (0x0D)"),
            (Self.request(3, jwt: jwt, headers: [HTTP2Header("apns-collapse-id", "a\nx-evil: 1")]), "header apns-collapse-id: its value contains LF (0x0A)"),
            (Self.request(4, jwt: jwt, own: [HTTP2Header("apns-collapse-id", "cut\u{0}short")]), "header apns-collapse-id: its value contains NUL (0x00)"),
            (Self.request(5, jwt: jwt, headers: [HTTP2Header("x-evil\r\napns-priority", "5")]), "a header name contains CR (0x0D)"),
            (Self.request(6, jwt: jwt, headers: [HTTP2Header("x evil", "1")]), "a header name contains a space (0x20)"),
            (Self.request(7, jwt: jwt, headers: [HTTP2Header(":authority", "evil.example")]), "a header name contains a colon"),
            (Self.request(8, jwt: jwt, headers: [HTTP2Header("transfer-encoding", "chunked")]), "header transfer-encoding is connection-specific"),
            (Self.request(9, jwt: jwt, headers: [HTTP2Header("apns-collapse-id", " padded")]), "header apns-collapse-id: its value starts with whitespace"),
            (Self.request(10, jwt: jwt, path: "/3/device/\(ConnectionTests.token(10))\r\nx-evil: 1"), ":path: its value contains CR (0x0D)"),
        ]
        let requests = [Self.request(1, jwt: jwt)] + bad.map(\.0) + [Self.request(11, jwt: jwt)]
        let results = await client.send(requests)
        await client.stop(deadline: 5)
        for (i, (_, expected)) in bad.enumerated() {
            guard case .failed(.invalidRequest(let message)) = results[i + 1] else { Issue.record("\(i + 1): \(results[i + 1])"); continue }
            #expect(message.hasPrefix(expected) && message.hasSuffix("; not sent"), "\(message)")
            #expect(!message.contains("x-evil: 1") && !message.contains(jwt), "the message names the header, never its value: \(message)")
        }
        for i in [0, requests.count - 1] {
            guard case .answered(let r) = results[i], r.status == 200 else { Issue.record("\(i): \(results[i])"); continue }
        }
        // Only the two good requests reached the server, and nothing it received carries an injected header.
        #expect(apns.simulator.counters.requests == 2, "\(apns.simulator.counters)")
        let received = apns.simulator.received
        #expect(Set(received.map(\.deviceToken)) == [ConnectionTests.token(1), ConnectionTests.token(11)])
        #expect(received.allSatisfy { $0.header("x-evil") == nil && $0.collapseID == nil && $0.priority == nil })
    }

    @Test(arguments: HTTP2Engine.allCases) func aHeaderTheHooksAddIsCheckedToo(engine: HTTP2Engine) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let jwt = try apns.jwt()
        let client = try Servers.client(ConnectionTests.configuration(apns, engine: engine),
                                        hooks: BadHooks(added: [HTTP2Header("authorization", "bearer \(jwt)\r\nx-evil: 1")]))
        let results = await client.send([ConnectionTests.request(1, jwt: nil), ConnectionTests.request(2, jwt: nil)])
        await client.stop(deadline: 5)
        for result in results {
            guard case .failed(.invalidRequest(let message)) = result else { Issue.record("\(result)"); continue }
            #expect(message == "header authorization: its value contains CR (0x0D) (RFC 9113 §8.2.1) (added by the hooks); not sent")
        }
        #expect(apns.simulator.counters.requests == 0)
    }
}
