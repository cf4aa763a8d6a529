import Foundation
import HeraldAPNs
import HeraldCore
import HeraldHTTP2
import HeraldSimulator
import HeraldTestKit
import Testing

/// The client driven generically against the APNs HTTP/2 simulator, whose faults (GOAWAY,
/// latency) and counters (connections, requests) make the connection rules observable.
@Suite(.serialized) struct ConnectionTests {
    static func token(_ n: Int) -> String { String(format: "%064x", n) }

    /// A POST the simulator accepts: APNs's path and headers, with `authorization` unless hooks add it.
    static func request(_ n: Int, jwt: String?) -> HTTP2Request {
        var headers = [HTTP2Header("apns-topic", "com.example.app"), HTTP2Header("apns-push-type", "alert")]
        if let jwt { headers.append(HTTP2Header("authorization", "bearer \(jwt)")) }
        return HTTP2Request(path: "/3/device/\(token(n))", headers: headers,
                            ownHeaders: [HTTP2Header("apns-id", UUID().uuidString.lowercased())],
                            body: HTTP2Body(Array(#"{"aps":{"alert":"n\#(n)"}}"#.utf8)))
    }

    /// The simulator keeps APNs's rule: one stream on a new token-auth connection until a request succeeds.
    static func configuration(_ apns: HTTP2SimulatorHarness, engine: HTTP2Engine) -> HTTP2ClientConfiguration {
        var c = Servers.configuration(port: apns.port, engine: engine, certs: apns.certificates)
        c.singleStreamUntilFirstAnswer = true
        return c
    }

    @Test(arguments: HTTP2Engine.allCases) func manyStreamsShareOneConnection(engine: HTTP2Engine) async throws {
        var faults = HTTP2Faults()
        faults.latency = 0.05
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let jwt = try apns.jwt()
        var c = Self.configuration(apns, engine: engine)
        c.maxConcurrentStreams = 200
        let metrics = MetricsRegistry()
        let client = try Servers.client(c, metrics: metrics)
        let results = await client.send((1...400).map { Self.request($0, jwt: jwt) })
        await client.stop(deadline: 5)
        for (i, result) in results.enumerated() {
            guard case .answered(let r) = result, r.status == 200, r.header("apns-id") != nil else { Issue.record("\(i): \(result)"); continue }
        }
        let received = apns.simulator.received
        #expect(received.count == 400)
        #expect(Set(received.map(\.connectionID)).count == 1)
        #expect(apns.simulator.counters.connections == 1)
        #expect(metrics.value("herald_http2_responses_total", labels: [("transport", "test"), ("status", "200")]) == 400)
        #expect(metrics.value("herald_http2_connections", labels: [("transport", "test")]) == 0)  // after stop
    }

    @Test(arguments: HTTP2Engine.allCases) func goAwayTakesBackTheRefusedStreamsAndSendsThemAgain(engine: HTTP2Engine) async throws {
        // Each connection answers two requests, then sends GOAWAY: the streams above its
        // last-stream-id were not processed and go again on the next connection.
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 2
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let jwt = try apns.jwt()
        var c = Self.configuration(apns, engine: engine)
        c.connectionRetries = 8
        let client = try Servers.client(c)
        let requests = (1...10).map { Self.request($0, jwt: jwt) }
        let results = await client.send(requests)
        await client.stop(deadline: 5)
        for (i, result) in results.enumerated() {
            guard case .answered(let r) = result, r.status == 200 else { Issue.record("\(i): \(result)"); continue }
        }
        let received = apns.simulator.received
        // Every request arrived exactly once: nothing answered was sent again.
        #expect(received.count == 10 && Set(received.map(\.deviceToken)) == Set((1...10).map(Self.token)), "\(received.map(\.deviceToken))")
        #expect(apns.simulator.counters.goAways >= 4, "\(apns.simulator.counters)")
        #expect(Set(received.map(\.connectionID)).count >= 5)
    }

    @Test(arguments: HTTP2Engine.allCases) func aSilentServerGivesNoAnswerWithinTheDeadline(engine: HTTP2Engine) async throws {
        var faults = HTTP2Faults()
        faults.latency = 30
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        var c = Self.configuration(apns, engine: engine)
        c.timeout = 0.3
        c.connectionRetries = 1
        let client = try Servers.client(c)
        let started = Date()
        let results = await client.send((1...3).map { Self.request($0, jwt: try? apns.jwt()) })
        let elapsed = Date().timeIntervalSince(started)
        await client.stop(deadline: 1)
        // At worst 2 × timeout × (1 + connectionRetries), with room for a loaded machine.
        let worstCase: TimeInterval = 2 * 0.3 * 2
        #expect(elapsed < worstCase + 3, "\(elapsed) s")
        for result in results {
            guard case .noAnswer(let reason) = result else { Issue.record("expected no answer, got \(result)"); continue }
            #expect(reason.hasPrefix("no answer"), "\(reason)")
        }
    }

    @Test(arguments: HTTP2Engine.allCases) func stopLetsInFlightRequestsFinishThenReturns(engine: HTTP2Engine) async throws {
        var faults = HTTP2Faults()
        faults.latency = 0.5
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let jwt = try apns.jwt()
        let client = try Servers.client(Self.configuration(apns, engine: engine))
        async let results = client.send((1...5).map { Self.request($0, jwt: jwt) })
        // Stop while the first request is in flight: it and the ones queued behind it finish.
        _ = await apns.simulator.waitForNotifications(count: 1, timeout: 10)
        await client.stop(deadline: 10)
        #expect(!client.isRunning)
        for (i, result) in await results.enumerated() {
            guard case .answered(let r) = result, r.status == 200 else { Issue.record("\(i): \(result)"); continue }
        }
        let late = await client.send([Self.request(6, jwt: jwt)])
        guard case .failed(.notRunning) = late[0] else { Issue.record("\(late)"); return }
    }

    /// Hooks choose each attempt's headers as it starts and may resend after an answer: an
    /// expired token gets 403 ExpiredProviderToken, the hook resends once with a fresh one.
    final class TokenHooks: HTTP2RequestHooks {
        let expired: String
        let fresh: String
        let starts = Locked<[Int]>([])

        init(expired: String, fresh: String) {
            self.expired = expired
            self.fresh = fresh
        }

        func willStart(_ attempt: HTTP2Attempt) -> HTTP2AttemptStart {
            starts.withLock { $0.append(attempt.number) }
            if attempt.request.path.hasSuffix(ConnectionTests.token(99)) { return .end("not sent: token 99") }
            return .send(adding: [HTTP2Header("authorization", "bearer \(attempt.resends == 0 ? expired : fresh)")])
        }

        func review(_ response: HTTP2Response, of attempt: HTTP2Attempt) -> HTTP2Review {
            response.status == 403 && attempt.resends == 0 ? .resend : .accept
        }
    }

    @Test(arguments: HTTP2Engine.allCases) func hooksSetHeadersPerAttemptResendAndEndRequests(engine: HTTP2Engine) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let hooks = TokenHooks(expired: try apns.jwt(issuedAt: Date().addingTimeInterval(-7200)), fresh: try apns.jwt())
        let client = try Servers.client(Self.configuration(apns, engine: engine), hooks: hooks)
        let results = await client.send([Self.request(1, jwt: nil), Self.request(99, jwt: nil)])
        await client.stop(deadline: 5)
        guard case .answered(let r) = results[0] else { Issue.record("\(results[0])"); return }
        #expect(r.status == 200 && r.attempts == 2)
        guard case .endedByHooks(let verdict) = results[1] else { Issue.record("\(results[1])"); return }
        #expect(verdict as? String == "not sent: token 99")
        #expect(apns.simulator.counters.rejected == ["ExpiredProviderToken": 1])
        #expect(apns.simulator.received.map(\.deviceToken) == [Self.token(1)])
        #expect(hooks.starts.value.sorted() == [1, 1, 2])
    }
}
