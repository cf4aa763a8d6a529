import Foundation
import HeraldClient
import HeraldCore
import HeraldTestKit
import Testing

/// Reads `n` notifications from `client`, failing after `timeout` seconds.
func take(_ n: Int, from client: HeraldClient, timeout: TimeInterval = 10) async throws -> [HeraldNotification] {
    let stream = client.notifications()
    return try await withThrowingTaskGroup(of: [HeraldNotification]?.self) { group in
        group.addTask {
            var got: [HeraldNotification] = []
            for await x in stream {
                got.append(x)
                if got.count == n { break }
            }
            return got
        }
        group.addTask {
            try await Task.sleep(for: .seconds(timeout))
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        guard let first else { throw ContractServer.Failure("fewer than \(n) notifications within \(timeout) s") }
        return first
    }
}

/// The client against a server that speaks the stream and acknowledgement contract exactly as
/// scripted: the request it sends, acknowledgements (coalesced, and the last one on
/// disconnect), reconnection with `Last-Event-ID` and the server's `retry:`, backoff, token
/// refresh, and the socket's close.
extension ClientNetworkTests {
@Suite(.serialized) struct ClientContractTests {
    static let app = "com.example.app"

    static func event(_ id: Int64, _ notificationID: String, alert: String = "hi") -> String {
        "id: \(id)\nevent: notification\ndata: {\"id\":\"\(notificationID)\",\"app\":\"\(app)\",\"alert\":\"\(alert)\"}\n\n"
    }

    /// A server whose streams start with `retry: 2000` and `: connected`, and whose
    /// acknowledgements answer 204 (or what `ack` says).
    static func server(ack: @escaping @Sendable (ContractServer.Request) -> ContractServer.Response = { _ in .answer(status: 204) })
        throws -> ContractServer {
        try ContractServer { request in
            if request.method == "GET" && request.path == "/v1/stream" { return .stream(initial: "retry: 2000\n\n: connected\n\n") }
            if request.method == "POST" && request.path == "/v1/stream/ack" { return ack(request) }
            return .answer(status: 404, body: #"{"error":{"code":"not_found","message":"no route"}}"#)
        }
    }

    static func client(_ server: ContractServer, store: any HeraldClientStore = InMemoryClientStore(), log: EventLog,
                       sleeper: RecordingSleeper = RecordingSleeper(), random: @escaping @Sendable () -> Double = { 0.5 },
                       token: @escaping HeraldClient.TokenProvider = { "token-1" }) -> HeraldClient {
        HeraldClient(configuration: .init(server: server.url, app: app, requestTimeout: .seconds(5)),
                     store: store, tokenProvider: token, onEvent: log.handler, random: random, sleep: sleeper.sleep)
    }

    @Test func theStreamRequestCarriesTheAppAckTheTokenAndLastEventID() async throws {
        let server = try Self.server()
        let log = EventLog()
        let store = InMemoryClientStore(HeraldClientState(lastEventID: "41"))
        let client = Self.client(server, store: store, log: log)
        client.connect()
        let stream = try await server.stream(1)
        let r = stream.request
        #expect(r.method == "GET")
        #expect(r.path == "/v1/stream")
        #expect(r.query == ["app": Self.app, "ack": "1"])
        #expect(r.headers["authorization"] == "Bearer token-1")
        #expect(r.headers["accept"] == "text/event-stream")
        #expect(r.headers["last-event-id"] == "41")
        #expect(await eventually(timeout: 10) { client.status == .connected })
        // What the previous run read is acknowledged once connected (it may not have been).
        #expect(await eventually(timeout: 10) { server.acks == [41] })
        let ack = try #require(server.requests.first { $0.path == "/v1/stream/ack" })
        #expect(ack.query == ["app": Self.app])
        #expect(ack.headers["authorization"] == "Bearer token-1")
        #expect(ack.headers["content-type"] == "application/json")
        #expect(try JSONSerialization.jsonObject(with: Data(ack.body)) as? [String: Int] == ["id": 41])
        await client.disconnect()
        await server.stop()
    }

    @Test func notificationsArriveTypedAndAreAcknowledgedWithTheLatestID() async throws {
        let server = try Self.server()
        let log = EventLog()
        let store = InMemoryClientStore()
        let client = Self.client(server, store: store, log: log)
        client.connect()
        let stream = try await server.stream(1)
        stream.send(Self.event(1, "n1", alert: "hello") + ": heartbeat\n\n" + Self.event(2, "n2"))
        let got = try await take(2, from: client)
        #expect(got.map(\.id) == ["n1", "n2"])
        #expect(got.map(\.eventID) == [1, 2])
        #expect(got[0].alert?.body == "hello")
        #expect(await eventually(timeout: 10) { server.acks.last == 2 })
        // One write, one read: one acknowledgement, for the latest id.
        #expect(server.acks == [2])
        #expect(store.load().lastEventID == "2")
        #expect(store.load().recentNotificationIDs == ["n1", "n2"])
        await client.disconnect()
        await server.stop()
    }

    @Test func aBurstIsAcknowledgedOncePerRoundTripNotPerEvent() async throws {
        // The first acknowledgement is held until the test has sent 19 more events, one write each.
        let gate = DispatchSemaphore(value: 0)
        let held = Locked(false)
        let server = try Self.server { _ in
            if !held.withLock({ h in defer { h = true }; return h }) { gate.wait() }
            return .answer(status: 204)
        }
        let log = EventLog()
        let client = Self.client(server, log: log)
        client.connect()
        let stream = try await server.stream(1)
        stream.send(Self.event(1, "n1"))
        #expect(await eventually(timeout: 10) { server.acks == [1] })   // received, its answer held
        for i in 2...20 { stream.send(Self.event(Int64(i), "n\(i)")) }
        #expect(await eventually(timeout: 10) { log.received.count == 20 })
        gate.signal()
        #expect(await eventually(timeout: 10) { log.acknowledged == [1, 20] })
        #expect(server.acks == [1, 20])
        await client.disconnect()
        await server.stop()
    }

    @Test func aReconnectSendsLastEventIDWaitsTheServersRetryAndDropsAReplayedDuplicate() async throws {
        let server = try Self.server()
        let log = EventLog()
        let sleeper = RecordingSleeper()
        let client = Self.client(server, log: log, sleeper: sleeper)
        client.connect()
        let first = try await server.stream(1)
        first.send("retry: 3000\n\n" + Self.event(1, "a") + Self.event(2, "b"))
        #expect(try await take(2, from: client).map(\.id) == ["a", "b"])
        first.abort()   // the connection dies
        let second = try await server.stream(2)
        #expect(second.request.headers["last-event-id"] == "2")
        // The wait is within retry: 3000 (attempt 0 after a connection that worked), full jitter: 0.5 of it.
        let policy = ReconnectPolicy()
        #expect(sleeper.delays == [policy.delay(attempt: 0, serverRetry: .seconds(3), random: 0.5)])
        #expect(sleeper.delays == [.seconds(1.5)])
        #expect(sleeper.delays.allSatisfy { policy.bounds(attempt: 0, serverRetry: .seconds(3)).contains($0) && $0 <= .seconds(3) })
        // The server sends "b" again (under a new id) and then "c": "b" is dropped.
        second.send(Self.event(3, "b") + Self.event(4, "c"))
        #expect(try await take(1, from: client).map(\.id) == ["c"])
        #expect(log.received == ["a", "b", "c"])
        #expect(log.duplicates == ["b"])
        // The duplicate is acknowledged like the rest.
        #expect(await eventually(timeout: 10) { server.acks.last == 4 })
        await client.disconnect()
        await server.stop()
    }

    @Test func refusedConnectionsBackOffExponentiallyWithinTheBoundsAndHonourRetryAfter() async throws {
        let refusals = Locked(0)
        let server = try ContractServer { request in
            guard request.path == "/v1/stream" else { return .answer(status: 404) }
            let n = refusals.withLock { r in defer { r += 1 }; return r }
            if n == 3 { return .answer(status: 503, body: #"{"error":{"code":"shutting_down","message":"stopping"}}"#, headers: [("Retry-After", "20")]) }
            if n < 5 { return .answer(status: 500, body: #"{"error":{"code":"internal","message":"boom"}}"#) }
            return .stream(initial: ": connected\n\n")
        }
        let log = EventLog()
        let sleeper = RecordingSleeper()
        let randoms: [Double] = [0, 0.999, 0.5, 0.25, 0.75]
        let client = Self.client(server, log: log, sleeper: sleeper, random: ScriptedRandom(randoms).next)
        client.connect()
        _ = try await server.stream(1)
        #expect(await eventually(timeout: 10) { client.status == .connected })
        let policy = ReconnectPolicy()
        let delays = sleeper.delays
        #expect(delays.count == 5)
        for (attempt, d) in delays.enumerated() {
            let retryAfter: Duration? = attempt == 3 ? .seconds(20) : nil
            #expect(d == policy.delay(attempt: attempt, retryAfter: retryAfter, random: randoms[attempt]), "attempt \(attempt)")
            #expect(policy.bounds(attempt: attempt, retryAfter: retryAfter).contains(d), "attempt \(attempt): \(d)")
        }
        // Windows of 1 s, 2 s, 4 s, 8 s (after Retry-After's 20 s) and 16 s, full jitter.
        #expect(delays[0] == .zero)
        #expect(delays[1] > .seconds(1.99) && delays[1] <= .seconds(2))
        #expect(delays[2] == .seconds(2))
        #expect(delays[3] == .seconds(22), "Retry-After's 20 s, then a quarter of the 8 s window")
        #expect(delays[4] == .seconds(12))
        #expect(log.drops.compactMap { $0 }.first == .http(status: 500, code: "internal", message: "boom", retryAfter: nil))
        await client.disconnect()
        await server.stop()
    }

    @Test func aRefusedTokenIsReplacedByTheProvidersNextOne() async throws {
        let server = try ContractServer { request in
            guard request.path == "/v1/stream" else { return .answer(status: 204) }
            if request.headers["authorization"] == "Bearer expired" {
                return .answer(status: 401, body: #"{"error":{"code":"invalid_client_token","message":"client token expired at 2026-12-01T00:00:00Z; mint a new one"}}"#)
            }
            return .stream(initial: ": connected\n\n")
        }
        let calls = Locked(0)
        let log = EventLog()
        let client = Self.client(server, log: log, token: {
            calls.withLock { c in c += 1; return c == 1 ? "expired" : "fresh" }
        })
        client.connect()
        let stream = try await server.stream(1)
        #expect(stream.request.headers["authorization"] == "Bearer fresh")
        #expect(calls.withLock { $0 } == 2)
        #expect(log.drops.first == .unauthorized("client token expired at 2026-12-01T00:00:00Z; mint a new one"))
        // The token stays cached across reconnects.
        stream.finish()
        let next = try await server.stream(2)
        #expect(next.request.headers["authorization"] == "Bearer fresh")
        #expect(calls.withLock { $0 } == 2)
        await client.disconnect()
        await server.stop()
    }

    @Test func aCachedTokenThatIsRefusedIsReplacedAtOnceWithoutBackingOff() async throws {
        let refuseT1 = Locked(false)
        let server = try ContractServer { request in
            guard request.path == "/v1/stream" else { return .answer(status: 204) }
            if request.headers["authorization"] == "Bearer t1" && refuseT1.withLock({ $0 }) {
                return .answer(status: 401, body: #"{"error":{"code":"invalid_client_token","message":"expired"}}"#)
            }
            return .stream(initial: ": connected\n\n")
        }
        let calls = Locked(0)
        let sleeper = RecordingSleeper()
        let log = EventLog()
        let client = Self.client(server, log: log, sleeper: sleeper, token: { calls.withLock { c in c += 1; return "t\(c)" } })
        client.connect()
        let first = try await server.stream(1)
        #expect(first.request.headers["authorization"] == "Bearer t1")
        // t1 expires while the stream is open; the server then ends the stream.
        refuseT1.withLock { $0 = true }
        first.finish()
        let second = try await server.stream(2)
        #expect(second.request.headers["authorization"] == "Bearer t2")
        // One wait (after the clean end), none after the refusal of the kept token.
        #expect(sleeper.delays.count == 1)
        #expect(log.drops.count == 2)
        #expect(log.drops.last == .unauthorized("expired"))
        #expect(server.requests.filter { $0.path == "/v1/stream" }.count == 3)
        await client.disconnect()
        await server.stop()
    }

    @Test func aKeptTokenAtItsExpiryIsReplacedBeforeReconnecting() async throws {
        @Sendable func jwt(exp: Date) -> String {
            let claims = #"{"sub":"alice","app":"a","device":"00ab","exp":\#(Int(exp.timeIntervalSince1970))}"#
            let b = Data(claims.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            return "eyJhbGciOiJIUzI1NiJ9.\(b).c2ln"
        }
        let server = try Self.server()
        let tokens = Locked([jwt(exp: Date().addingTimeInterval(3)), jwt(exp: Date().addingTimeInterval(3600))])
        let log = EventLog()
        let client = Self.client(server, log: log, token: { tokens.withLock { $0.count > 1 ? $0.removeFirst() : $0[0] } })
        client.connect()
        let first = try await server.stream(1)
        let short = first.request.headers["authorization"]
        first.finish()
        let second = try await server.stream(2)
        // The kept one expires within seconds: a new one was asked for, not refused first.
        #expect(second.request.headers["authorization"] != short)
        #expect(second.request.headers["authorization"] == "Bearer \(tokens.withLock { $0[0] })")
        #expect(server.requests.filter { $0.path == "/v1/stream" }.count == 2)
        await client.disconnect()
        await server.stop()
    }

    @Test func disconnectClosesTheSocketBeforeItReturnsAndSendsTheLastAcknowledgement() async throws {
        let gate = DispatchSemaphore(value: 0)
        let held = Locked(false)
        let server = try Self.server { _ in
            if !held.withLock({ h in defer { h = true }; return h }) { gate.wait() }
            return .answer(status: 204)
        }
        let log = EventLog()
        let store = InMemoryClientStore()
        let client = Self.client(server, store: store, log: log)
        client.connect()
        let stream = try await server.stream(1)
        stream.send(Self.event(1, "n1"))
        #expect(await eventually(timeout: 10) { server.acks == [1] })   // in flight, held
        stream.send(Self.event(2, "n2"))
        #expect(await eventually(timeout: 10) { log.received.count == 2 })
        #expect(stream.closedByPeer == nil)
        // Release the held acknowledgement only once the stream's close was seen, so the
        // second one is still due when disconnect() has closed the stream.
        let releaser = Task {
            _ = await eventually(timeout: 10) { stream.closedByPeer != nil }
            gate.signal()
        }
        let before = Date()
        await client.disconnect()
        let closedAt = try #require(stream.closedByPeer, "the server did not see the close")
        #expect(closedAt.timeIntervalSince(before) < 1)
        #expect(server.acks == [1, 2])
        #expect(store.load().lastEventID == "2")
        #expect(client.status == .idle)
        await releaser.value
        // Nothing reconnects after a disconnect.
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.streams.count == 1)
        await server.stop()
    }

    @Test func disconnectClosesTheSocketAtOnce() async throws {
        let server = try Self.server()
        let log = EventLog()
        let client = Self.client(server, log: log)
        client.connect()
        let stream = try await server.stream(1)
        #expect(await eventually(timeout: 10) { client.status == .connected })
        try await Task.sleep(for: .milliseconds(100))
        #expect(stream.closedByPeer == nil)
        let before = Date()
        await client.disconnect()
        let returned = Date()
        // The server's reading thread sees end of file as soon as the client closed.
        #expect(await eventually(timeout: 3) { stream.closedByPeer != nil })
        let closedAt = try #require(stream.closedByPeer)
        #expect(closedAt.timeIntervalSince(before) < 3, "closed \(closedAt.timeIntervalSince(before)) s after disconnect() began")
        // Room for a loaded 2-core machine (it takes milliseconds; 0.6 s was seen with every suite running).
        #expect(returned.timeIntervalSince(before) < 2, "disconnect() took \(returned.timeIntervalSince(before)) s")
        await server.stop()
    }

    @Test func aSilentConnectionIsReopenedAfterTheIdleTimeout() async throws {
        let server = try Self.server()
        let log = EventLog()
        let client = HeraldClient(configuration: .init(server: server.url, app: Self.app, idleTimeout: .seconds(1)),
                                  store: InMemoryClientStore(), tokenProvider: { "t" }, onEvent: log.handler,
                                  sleep: RecordingSleeper().sleep)
        client.connect()
        let first = try await server.stream(1)
        let opened = Date()
        // Nothing more is written (no heartbeat): after a second of silence the client gives up on it.
        let second = try await server.stream(2, timeout: 10)
        #expect(Date().timeIntervalSince(opened) >= 0.9)
        #expect(await eventually(timeout: 3) { first.closedByPeer != nil })
        guard case .transport(let reason)?? = log.drops.first else {
            Issue.record("expected a transport error, found \(log.drops)")
            return
        }
        #expect(reason.lowercased().contains("timed out"), "\(reason)")
        _ = second
        await client.disconnect()
        await server.stop()
    }

    @Test func disconnectWhileWaitingToReconnectStopsAtOnceAndConnectAgainWorks() async throws {
        let refuse = Locked(true)
        let server = try ContractServer { request in
            guard request.path == "/v1/stream" else { return .answer(status: 204) }
            return refuse.withLock { $0 } ? .answer(status: 500, body: "{}") : .stream(initial: ": connected\n\n")
        }
        let log = EventLog()
        // A real sleep: the client waits its full (long) backoff unless cancelled.
        let client = HeraldClient(configuration: .init(server: server.url, app: Self.app,
                                                       reconnect: ReconnectPolicy(initialDelay: .seconds(30), jitter: 0)),
                                  store: InMemoryClientStore(), tokenProvider: { "t" }, onEvent: log.handler)
        client.connect()
        #expect(await eventually(timeout: 10) { client.status == .waiting(attempt: 0, delay: .seconds(30)) })
        let start = Date()
        await client.disconnect()
        #expect(Date().timeIntervalSince(start) < 2)
        #expect(client.status == .idle)
        refuse.withLock { $0 = false }
        client.connect()
        _ = try await server.stream(1)
        #expect(await eventually(timeout: 10) { client.status == .connected })
        // connect() twice is one connection.
        client.connect()
        try await Task.sleep(for: .milliseconds(200))
        #expect(server.streams.count == 1)
        await client.disconnect()
        await server.stop()
    }

    @Test func aTokenForAnotherUserForgetsTheSavedLastEventID() async throws {
        @Sendable func jwt(_ claims: String) -> String {
            let b = Data(claims.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            return "eyJhbGciOiJIUzI1NiJ9.\(b).c2ln"
        }
        let server = try Self.server()
        let store = InMemoryClientStore(HeraldClientState(lastEventID: "7", owner: "alice/00ab", recentNotificationIDs: ["x"]))
        let log = EventLog()
        let client = Self.client(server, store: store, log: log, token: { jwt(#"{"sub":"bob","app":"a","device":"00AB"}"#) })
        client.connect()
        let stream = try await server.stream(1)
        #expect(stream.request.headers["last-event-id"] == nil)
        await client.disconnect()
        #expect(store.load().owner == "bob/00ab")
        #expect(store.load().lastEventID == nil)
        #expect(store.load().recentNotificationIDs == ["x"])
        // The same owner keeps it.
        let store2 = InMemoryClientStore(HeraldClientState(lastEventID: "7", owner: "bob/00ab"))
        let client2 = Self.client(server, store: store2, log: log, token: { jwt(#"{"sub":"bob","app":"a","device":"00ab"}"#) })
        client2.connect()
        #expect(try await server.stream(2).request.headers["last-event-id"] == "7")
        await client2.disconnect()
        await server.stop()
    }

    @Test func eventsThatAreNotNotificationsAreSkippedButAcknowledged() async throws {
        let server = try Self.server()
        let log = EventLog()
        let client = Self.client(server, log: log)
        client.connect()
        let stream = try await server.stream(1)
        stream.send("id: 1\nevent: notification\ndata: {\"app\":\"x\"}\n\nid: 2\nevent: other\ndata: y\n\n" + Self.event(3, "ok"))
        #expect(try await take(1, from: client).map(\.id) == ["ok"])
        #expect(log.all.contains { if case .invalidEvent = $0 { return true } else { return false } })
        #expect(await eventually(timeout: 10) { server.acks.last == 3 })
        await client.disconnect()
        await server.stop()
    }

    @Test func notificationsReadWhileNobodyIteratesAreKeptForTheNextConsumer() async throws {
        let server = try Self.server()
        let log = EventLog()
        let client = Self.client(server, log: log)
        client.connect()
        let stream = try await server.stream(1)
        stream.send(Self.event(1, "early"))
        #expect(await eventually(timeout: 10) { log.received == ["early"] })
        #expect(try await take(1, from: client).map(\.id) == ["early"])
        // A consumer cancelled mid-wait does not lose what comes next.
        let waiting = Task { for await _ in client.notifications() {} }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        await waiting.value
        stream.send(Self.event(2, "late"))
        #expect(await eventually(timeout: 10) { log.received == ["early", "late"] })
        #expect(try await take(1, from: client).map(\.id) == ["late"])
        await client.disconnect()
        await server.stop()
    }
}
}
