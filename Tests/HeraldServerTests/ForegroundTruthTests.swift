import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldLocalTransport
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A client that closes is gone at once, and an acknowledging client's `delivered` means the app
/// has it: the real local transport beside the real `apns-http2` transport against the HTTP/2
/// APNs simulator, under `local-first` unless a test says otherwise.
@Suite(.serialized, .stopsDaemons) struct ForegroundTruthTests {
    static let secret = "foreground-truth-secret-0123456789abcdef"
    static let app = TestDaemon.app
    static let device = TestDaemon.token(0x61)

    /// Heartbeats every minute: within a test only the hang-up watcher can find a closed client.
    static func config(apns: HTTP2SimulatorHarness, policy: String, ackTimeout: String, streams: String) -> String {
        let c = apns.certificates
        return """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": ["apns", "live"], "foreground": "\(policy)", "clientSecret": "\(secret)",
                              "ackTimeout": "\(ackTimeout)", "inbox": {"ttl": 3600, "maxPerUser": 1000}}},
          "transports": {
            "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                     "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"},
            "live": {"type": "local"}
          },
          "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}],
                  "listen": "127.0.0.1:0", "streams": {"heartbeat": 60\(streams)}},
          "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"}
        }
        """
    }

    static func start(apns: HTTP2SimulatorHarness, policy: String = "local-first", ackTimeout: String = "1s",
                      streams: String = "") async throws -> TestDaemon {
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(LocalTransport.self)
        return try await TestDaemon.start(plugins: config(apns: apns, policy: policy, ackTimeout: ackTimeout, streams: streams),
                                          registry: registry, prefix: "herald-foreground")
    }

    static func token(user: String = "alice", device: String = device) -> String {
        LocalDeliveryTests.token(user: user, device: device, secret: secret)
    }

    static func openStream(_ d: TestDaemon, ack: Bool, lastEventID: Int64? = nil, user: String = "alice",
                           device: String = device) async throws -> StreamClient {
        let stream = try await StreamClient(port: d.port, query: "app=\(app)" + (ack ? "&ack=1" : ""),
                                            token: token(user: user, device: device), lastEventID: lastEventID)
        #expect(stream.status == 200, "\(stream.head)")
        return stream
    }

    static func ack(_ d: TestDaemon, _ id: Int64, user: String = "alice", device: String = device) async throws -> HTTPTestClient.Response {
        try await HTTPTestClient(port: d.port, key: token(user: user, device: device)).post("/v1/stream/ack?app=\(app)", #"{"id":\#(id)}"#)
    }

    /// The deliveries of `id` as "transport state reason".
    static func deliveries(_ d: TestDaemon, _ id: String) async throws -> [String] {
        let status = try await d.client.get("/v1/notifications/\(id)")
        return (status.json?["deliveries"]?.arrayValue ?? []).map {
            "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-") \($0["reason"]?.stringValue ?? "-")"
        }.sorted()
    }

    static func deliveries(_ d: TestDaemon, _ id: String, becoming expected: [String]) async -> [String] {
        _ = await eventually(timeout: 5) { (try? await deliveries(d, id)) == expected }
        return (try? await deliveries(d, id)) ?? []
    }

    static func routes(_ d: TestDaemon, _ id: String, becoming routes: [String], timeout: TimeInterval = 20) async -> [String] {
        _ = await eventually(timeout: timeout) { (try? await LocalDeliveryTests.routes(d, id)) == routes }
        return (try? await LocalDeliveryTests.routes(d, id)) ?? []
    }

    static func metric(_ d: TestDaemon, _ prefix: String) async throws -> Double {
        try await d.client.get("/metrics").text.split(separator: "\n").filter { $0.hasPrefix(prefix) }
            .compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
    }

    /// Seconds until `condition` holds, polled every millisecond; `nil` past `deadline`.
    static func secondsUntil(deadline: TimeInterval, _ condition: () -> Bool) async -> TimeInterval? {
        let start = Date()
        while Date().timeIntervalSince(start) < deadline {
            if condition() { return Date().timeIntervalSince(start) }
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        return condition() ? Date().timeIntervalSince(start) : nil
    }

    // MARK: A closed stream is gone at once

    enum Close: String, CaseIterable, Sendable { case fin, rst }

    @Test(.timeLimit(.minutes(1)), arguments: Close.allCases)
    func aClientThatClosesIsAbsentWithin100msAndItsNextNotificationGoesToAPNs(_ close: Close) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns)
        try await d.register(user: "alice", token: Self.device)
        let stream = try await Self.openStream(d, ack: false)
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        let first = try await LocalDeliveryTests.send(d, to: "alice", "open")
        #expect(try await stream.next()?.json?["id"]?.stringValue == first)
        #expect(await Self.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])
        // Suspended again (nothing to send) before the client goes.
        try await Task.sleep(nanoseconds: 50_000_000)

        if close == .rst {
            var linger = linger(l_onoff: 1, l_linger: 0)
            #expect(setsockopt(stream.raw.fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size)) == 0)
        }
        stream.raw.close()
        let gone = await Self.secondsUntil(deadline: 0.1) {
            d.daemon.openStreams == 0 && LocalDeliveryTests.presence(d, user: "alice").isEmpty
        }
        #expect(gone != nil, "the device still counted as present 100 ms after its client closed (\(close.rawValue))")

        let second = try await LocalDeliveryTests.send(d, to: "alice", "closed")
        // Planned for APNs at once: nothing was written to (or reported delivered on) the dead stream.
        #expect(await Self.routes(d, second, becoming: ["apns delivered"]) == ["apns delivered"])
        _ = await apns.simulator.waitForNotifications(count: 1, timeout: 10)
        #expect(apns.simulator.received.map(\.deviceToken) == [Self.device])
        #expect(try await Self.metric(d, #"herald_deliveries_total{transport="live",outcome="delivered""#) == 1)
    }

    // MARK: Acks

    @Test(.timeLimit(.minutes(1))) func anAcknowledgedDeliveryIsDeliveredOnlyOnceAcknowledgedAndShownAwaitingMeanwhile() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, ackTimeout: "20s")
        try await d.register(user: "alice", token: Self.device)
        let stream = try await Self.openStream(d, ack: true)
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        let id = try await LocalDeliveryTests.send(d, to: "alice", "ack me")
        let event = try #require(try await stream.next())
        #expect(event.id == 1)
        #expect(event.json?["id"]?.stringValue == id, "the event carries the Herald notification id")
        // Written, not acknowledged: `sent`, and the reason says so.
        #expect(await Self.deliveries(d, id, becoming: ["live sent written to the stream as event 1, awaiting ack"]) == ["live sent written to the stream as event 1, awaiting ack"])
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(try await Self.deliveries(d, id) == ["live sent written to the stream as event 1, awaiting ack"])
        // Delivered by the ack (the reason says so), not by the ack timeout's fallback; how fast
        // is measured by `herald-bench stream`, not here.
        #expect(try await Self.ack(d, 1).status == 204)
        #expect(await Self.deliveries(d, id, becoming: ["live delivered acknowledged by the device as event 1"]) == ["live delivered acknowledged by the device as event 1"])
        #expect(apns.simulator.received.isEmpty)
        #expect(try await Self.metric(d, "herald_stream_acks_total") == 1)
    }

    @Test(.timeLimit(.minutes(1))) func theAckEndpointRefusesBadBodiesAndTokensAsTheStreamDoes() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns)
        let client = HTTPTestClient(port: d.port, key: Self.token())
        let path = "/v1/stream/ack?app=\(Self.app)"
        for (body, field) in [("{}", "id"), (#"{"id":-1}"#, "id"), (#"{"id":1.5}"#, "id"), (#"{"id":"x1"}"#, "id"), (#"{"id":null}"#, "id")] {
            let r = try await client.post(path, body)
            #expect(r.status == 400, "\(body): \(r.text)")
            #expect(r.json?["error"]?["field"]?.stringValue == field, "\(body): \(r.text)")
        }
        for body in ["", "[1]", "{\"id\":"] {
            let r = try await client.post(path, body)
            #expect(r.status == 400, "\(body): \(r.text)")
            #expect(r.json?["error"]?["message"]?.stringValue?.contains(#"{"id": <the last event id the client has>}"#) == true, "\(r.text)")
        }
        #expect(try await client.post(path, #"{"id":"7"}"#).status == 204, "EventSource's lastEventId is a string")
        #expect(try await client.post(path, #"{"id":7}"#, contentType: nil).status == 204, "no Content-Type needed")
        #expect(try await HTTPTestClient(port: d.port).post(path, #"{"id":1}"#).status == 401)
        let forged = LocalDeliveryTests.token(user: "alice", device: Self.device, secret: "another-secret-0123456789abcdef-0123456")
        #expect(try await HTTPTestClient(port: d.port, key: forged).post(path, #"{"id":1}"#).json?["error"]?["code"]?.stringValue == "invalid_client_token")
        #expect(try await HTTPTestClient(port: d.port, key: Self.token()).get(path).status == 405)
        let byQuery = try await HTTPTestClient(port: d.port).post(path + "&access_token=\(Self.token())", #"{"id":1}"#)
        #expect(byQuery.status == 204, "\(byQuery.text)")
    }

    /// The frozen app: a child process that reads and acknowledges, stopped with SIGSTOP with its socket open.
    @Test(.timeLimit(.minutes(1))) func aFrozenClientsNotificationReachesAPNsWithinTheAckTimeoutAndTheDeviceLeavesTheForeground() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, ackTimeout: "1s")
        try await d.register(user: "alice", token: Self.device)
        let client = try AckingClient(port: d.port, app: Self.app, token: Self.token(), directory: d.directory)
        defer { client.stop() }
        #expect(await client.child.waitForLine(containing: "connected", timeout: 10) != nil, "\(client.child.stderr)")
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))

        let first = try await LocalDeliveryTests.send(d, to: "alice", "awake")
        #expect(await client.child.waitForLine(containing: "acked 1", timeout: 10) != nil, "\(client.child.stderr)")
        #expect(await Self.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])

        client.child.signal(SIGSTOP)
        let frozenAt = Date()
        let second = try await LocalDeliveryTests.send(d, to: "alice", "frozen")
        #expect(await apns.simulator.waitForNotifications(count: 1, timeout: 10) != nil)
        let took = Date().timeIntervalSince(frozenAt)
        #expect(took < 1 + 1.5, "APNs got the frozen client's notification \(took) s after the send (ackTimeout 1 s)")
        #expect(await Self.routes(d, second, becoming: ["apns delivered"]) == ["apns delivered"])
        #expect(try await Self.metric(d, "herald_stream_ack_timeouts_total") == 1)
        // Out of the foreground: the next one is planned for APNs at once, with no wait.
        #expect(LocalDeliveryTests.presence(d, user: "alice").isEmpty)
        let third = try await LocalDeliveryTests.send(d, to: "alice", "still frozen")
        #expect(await Self.routes(d, third, becoming: ["apns delivered"], timeout: 0.9) == ["apns delivered"])

        // Thawed, it reads event 2 and acknowledges it: in the foreground again, nothing pushed twice.
        client.child.signal(SIGCONT)
        #expect(await client.child.waitForLine(containing: "acked 2", timeout: 10) != nil, "\(client.child.stderr)")
        #expect(await eventually(timeout: 5) { LocalDeliveryTests.presence(d, user: "alice") == [Self.device] })
        let fourth = try await LocalDeliveryTests.send(d, to: "alice", "awake again")
        #expect(await client.child.waitForLine(containing: "acked 3", timeout: 10) != nil, "\(client.child.stderr)")
        #expect(await Self.routes(d, fourth, becoming: ["live delivered"]) == ["live delivered"])
        #expect(apns.simulator.received.count == 2)
    }

    @Test(.timeLimit(.minutes(1))) func anAckThatArrivesLateBreaksNothingAndCountsNothingTwice() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, ackTimeout: "500ms")
        try await d.register(user: "alice", token: Self.device)
        let stream = try await Self.openStream(d, ack: true)
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        let id = try await LocalDeliveryTests.send(d, to: "alice", "late")
        #expect(try await stream.next()?.id == 1)
        #expect(await Self.routes(d, id, becoming: ["apns delivered"]) == ["apns delivered"])
        #expect(await apns.simulator.waitForNotifications(count: 1, timeout: 10) != nil)
        // The ack after the timeout: accepted, and the push is not taken back nor made twice.
        #expect(try await Self.ack(d, 1).status == 204)
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(try await LocalDeliveryTests.routes(d, id) == ["apns delivered"])
        #expect(apns.simulator.received.count == 1)
        #expect(try await Self.metric(d, #"herald_deliveries_total{transport="live",outcome="delivered""#) == 0)
        #expect(try await Self.metric(d, #"herald_deliveries_total{transport="apns",outcome="delivered""#) == 1)
        // The ack brought the device back: the next one goes down the stream and is acknowledged.
        let next = try await LocalDeliveryTests.send(d, to: "alice", "back")
        let event = try #require(try await stream.next())
        #expect(event.id == 2)
        #expect(event.json?["id"]?.stringValue == next)
        #expect(try await Self.ack(d, 2).status == 204)
        #expect(await Self.routes(d, next, becoming: ["live delivered"]) == ["live delivered"])
        #expect(apns.simulator.received.count == 1)
    }

    @Test(.timeLimit(.minutes(1))) func acksCarryAcrossAReconnectWithLastEventID() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, policy: "local-only", ackTimeout: "20s")
        try await d.register(user: "alice", token: Self.device)
        var stream: StreamClient? = try await Self.openStream(d, ack: true)
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        let first = try await LocalDeliveryTests.send(d, to: "alice", "one")
        #expect(try await stream?.next()?.id == 1)
        #expect(try await Self.ack(d, 1).status == 204)
        #expect(await Self.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])
        // Event 2 is written, and the connection dies before the client acknowledges it.
        let second = try await LocalDeliveryTests.send(d, to: "alice", "two")
        #expect(try await stream?.next()?.id == 2)
        stream = nil
        #expect(await Self.routes(d, second, becoming: ["live parked"]) == ["live parked"])

        // It comes back having read event 1 only (its last ack): the replay gives event 2 once.
        let again = try await Self.openStream(d, ack: true, lastEventID: 1)
        let replayed = try #require(try await again.next())
        #expect(replayed.id == 2)
        #expect(replayed.json?["id"]?.stringValue == second)
        #expect(await Self.deliveries(d, second, becoming: ["live sent written to the stream as event 2, awaiting ack"]) == ["live sent written to the stream as event 2, awaiting ack"])
        #expect(try await Self.ack(d, 2).status == 204)
        #expect(await Self.deliveries(d, second, becoming: ["live delivered acknowledged by the device as event 2"]) == ["live delivered acknowledged by the device as event 2"])
        let third = try await LocalDeliveryTests.send(d, to: "alice", "three")
        let live = try #require(try await again.next())
        #expect(live.id == 3, "no duplicate of event 2 after the replay")
        #expect(live.json?["id"]?.stringValue == third)
        #expect(apns.simulator.received.isEmpty)
    }

    @Test(.timeLimit(.minutes(1))) func aClientThatAcksNothingIsDeliveredOnWriteAsBeforeAndItsCloseIsSeen() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, ackTimeout: "200ms")
        try await d.register(user: "alice", token: Self.device)
        let stream = try await Self.openStream(d, ack: false)
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        var ids: [String] = []
        for i in 1...3 {
            let id = try await LocalDeliveryTests.send(d, to: "alice", "n\(i)")
            ids.append(id)
            #expect(try await stream.next()?.json?["id"]?.stringValue == id)
        }
        // Past the ack timeout, still in the foreground: a client without ack=1 is never waited for.
        try await Task.sleep(nanoseconds: 400_000_000)
        for (i, id) in ids.enumerated() {
            #expect(try await Self.deliveries(d, id) == ["live delivered written to the device's stream as event \(i + 1)"])
        }
        #expect(LocalDeliveryTests.presence(d, user: "alice") == [Self.device])
        stream.raw.close()
        #expect(await Self.secondsUntil(deadline: 0.1) { d.daemon.openStreams == 0 } != nil)
        #expect(apns.simulator.received.isEmpty)
    }

    // MARK: Limits (issue 24, items 2 and 3)

    @Test(.timeLimit(.minutes(2))) func threeHundredStreamsWithOneTokenNoLongerLockOutAnotherUser() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let d = try await Self.start(apns: apns, streams: #", "maxStreams": 50, "maxPerDevice": 2, "maxPerUser": 3"#)
        try await d.register(user: "alice", token: Self.device)
        var clients: [RawClient] = []
        let request = "GET /v1/stream?app=\(Self.app) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Self.token())\r\n\r\n"
        for _ in 0..<300 {
            let c = try RawClient(port: d.port)
            try c.send(request)
            let head = try await c.awaitHead()
            #expect(head.hasPrefix("HTTP/1.1 200 "), "\(head)")
            clients.append(c)
        }
        // The device keeps its two newest streams; the others were ended and their slots freed.
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 2 })
        let bob = TestDaemon.token(0x62)
        try await d.register(user: "bob", token: bob)
        let other = try await Self.openStream(d, ack: false, user: "bob", device: bob)
        #expect(other.status == 200)
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 3 })

        // A user at maxPerUser (3 streams: 2 on one device, 1 on another) is refused a fourth, with a reason.
        let second = TestDaemon.token(0x70)
        try await d.register(user: "alice", token: second)
        let held = try await Self.openStream(d, ack: false, device: second)
        let extra = TestDaemon.token(0x7F)
        try await d.register(user: "alice", token: extra)
        let refused = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: Self.token(device: extra))
        #expect(refused.status == 429, "\(refused.head)")
        #expect(try await refused.body().contains("api.streams.maxPerUser"))
        _ = clients
        _ = held
    }

    /// Issue 24, item 4: a SIGHUP that changes `api.streams.maxStreams` is refused, naming the key
    /// (the HTTP server sizes its connection table at start); the per-device and per-user limits
    /// apply on reload.
    @Test func aReloadThatChangesMaxStreamsIsRefusedNamingTheKeyAndThePerUserLimitApplies() async throws {
        let base = TestDaemon.configJSON()
        let d = try await TestDaemon.start(config: base, fromFile: true)
        let changed = base.replacingOccurrences(of: #""maxBodyBytes": 4096"#, with: #""maxBodyBytes": 4096, "streams": {"maxStreams": 5}"#)
        #expect(changed != base)
        try changed.write(toFile: d.directory.file("config.json"), atomically: true, encoding: .utf8)
        guard case .refused(let reasons) = await d.daemon.reloadFromFile() else {
            Issue.record("a maxStreams change must be refused"); return
        }
        #expect(reasons == ["api.streams.maxStreams changed (10000 → 5): restart to apply"], "\(reasons)")
        #expect(d.daemon.configuration.api.streams.maxStreams == 10_000)
        #expect(d.logs.text.contains("api.streams.maxStreams changed"))

        let limits = base.replacingOccurrences(of: #""maxBodyBytes": 4096"#, with: #""maxBodyBytes": 4096, "streams": {"maxPerDevice": 1, "maxPerUser": 7}"#)
        try limits.write(toFile: d.directory.file("config.json"), atomically: true, encoding: .utf8)
        guard case .applied = await d.daemon.reloadFromFile() else { Issue.record("per-device and per-user limits apply on reload"); return }
        #expect(d.daemon.configuration.api.streams.maxPerDevice == 1)
        #expect(d.daemon.configuration.api.streams.maxPerUser == 7)
    }
}

extension LocalDeliveryTests {
    /// The devices of `user` the fan-out counts as in the foreground.
    static func presence(_ d: TestDaemon, user: String) -> Set<String> {
        d.daemon.presence(app: app, user: user)
    }
}

/// A client in a child process (Python, standard library only) that opens an acknowledging
/// stream, prints `connected`, and for every event acknowledges it and prints `acked <id>`:
/// SIGSTOP freezes it with its socket open, as iOS freezes an app in the background.
final class AckingClient: Sendable {
    let child: ChildProcess

    static let script = #"""
    import http.client, re, socket, sys
    port, app, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET /v1/stream?app=%s&ack=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (app, token)).encode())
    acks = http.client.HTTPConnection("127.0.0.1", port)
    text, head = "", False
    while True:
        data = s.recv(65536)
        if not data:
            break
        text += data.decode()
        if not head and "\r\n\r\n" in text:
            head, text = True, text.split("\r\n\r\n", 1)[1]
            print("connected", flush=True)
        while "\n\n" in text:
            block, text = text.split("\n\n", 1)
            m = re.search(r"^id: (\d+)$", block, re.M)
            if m:
                acks.request("POST", "/v1/stream/ack?app=" + app, body='{"id": %s}' % m.group(1),
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
                r = acks.getresponse()
                r.read()
                print("acked %s %d" % (m.group(1), r.status), flush=True)
    """#

    init(port: Int, app: String, token: String, directory: TemporaryDirectory) throws {
        let path = directory.file("acking_client.py")
        try Self.script.write(toFile: path, atomically: true, encoding: .utf8)
        child = try ChildProcess("/usr/bin/env", ["python3", "-u", path, String(port), app, token])
    }

    func stop() {
        child.signal(SIGCONT)
        child.terminate()
    }
}
