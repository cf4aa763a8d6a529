import Foundation
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldLocalTransport
import HeraldServer
import HeraldTestKit
import Testing

/// One SSE event as a client reads it.
struct SSEEvent: Equatable {
    var id: Int64?
    var event: String?
    var data: String
    var json: JSONValue? { try? JSONValue.parse(Data(data.utf8)) }
}

/// A `GET /v1/stream` client over a raw socket, reading on a thread of its own (blocking reads
/// must not hold the few threads the daemon under test needs).
final class StreamClient: @unchecked Sendable {
    let raw: RawClient
    let thread = BlockingThread(name: "sse-client")
    private var text = ""
    private(set) var head = ""

    /// Opens the stream; `query` is appended to `/v1/stream?`.
    init(port: Int, query: String, token: String?, lastEventID: Int64? = nil, receiveBuffer: Int? = nil) async throws {
        raw = try RawClient(port: port, receiveBuffer: receiveBuffer)
        var request = "GET /v1/stream?\(query) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        if let token { request += "Authorization: Bearer \(token)\r\n" }
        if let lastEventID { request += "Last-Event-ID: \(lastEventID)\r\n" }
        try raw.send(request + "\r\n")
        let raw = raw
        head = try await thread.run { try raw.readHead() }
    }

    deinit {
        raw.close()
        thread.stop()
    }

    var status: Int { Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0 }

    /// Reads one chunk of the chunked body (`nil` at its end).
    private static func chunk(_ raw: RawClient) throws -> String? {
        var line: [UInt8] = []
        while line.count < 2 || line[line.count - 2] != 13 || line[line.count - 1] != 10 { line += try raw.read(exactly: 1) }
        guard let size = Int(String(decoding: line.dropLast(2), as: UTF8.self), radix: 16) else {
            throw RawClient.Failure(description: "bad chunk size line \(String(decoding: line, as: UTF8.self))")
        }
        if size == 0 { return nil }
        let body = try raw.read(exactly: size + 2)
        return String(decoding: body.dropLast(2), as: UTF8.self)
    }

    /// The next event (comments and `retry:` skipped); `nil` when the stream ended.
    func next() async throws -> SSEEvent? {
        let raw = raw
        while true {
            if let end = text.range(of: "\n\n") {
                let block = String(text[..<end.lowerBound])
                text.removeSubrange(..<end.upperBound)
                var event = SSEEvent(id: nil, event: nil, data: "")
                var dataLines: [String] = []
                for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                    if line.hasPrefix("id: ") { event.id = Int64(line.dropFirst(4)) }
                    if line.hasPrefix("event: ") { event.event = String(line.dropFirst(7)) }
                    if line.hasPrefix("data: ") { dataLines.append(String(line.dropFirst(6))) }
                }
                if dataLines.isEmpty { continue }
                event.data = dataLines.joined(separator: "\n")
                return event
            }
            guard let more = try await thread.run({ try Self.chunk(raw) }) else { return nil }
            text += more
        }
    }

    /// Reads `n` events.
    func events(_ n: Int) async throws -> [SSEEvent] {
        var result: [SSEEvent] = []
        while result.count < n, let e = try await next() { result.append(e) }
        return result
    }

    /// A non-stream answer's body (by its Content-Length).
    func body() async throws -> String {
        let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        let raw = raw
        return String(decoding: try await thread.run { try raw.read(exactly: length) }, as: UTF8.self)
    }

    /// Everything until the stream ends (the raw text, comments included).
    func rest() async throws -> String {
        let raw = raw
        var all = text
        while let more = try await thread.run({ try Self.chunk(raw) }) { all += more }
        return all
    }
}

/// Local foreground delivery through a real daemon: streams, presence, inbox, fallbacks.
@Suite(.serialized, .stopsDaemons) struct LocalDeliveryTests {
    static let secret = "local-secret-0123456789abcdef-0123456789"
    static let app = TestDaemon.app

    static func config(policy: String, grace: Int = 0, streams: String = #""heartbeat": 1"#, maxPerUser: Int = 5000) -> String {
        """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": ["push", "live"], "foreground": "\(policy)", "clientSecret": "\(secret)",
                              "presenceGrace": \(grace), "inbox": {"ttl": 3600, "maxPerUser": \(maxPerUser)}},
                   "org.other.app": {"routes": ["push", "live"], "foreground": "\(policy)", "clientSecret": "other-secret-0123456789abcdef-01234567"}},
          "transports": {"push": {"type": "test"}, "live": {"type": "local"}},
          "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}],
                  "listen": "127.0.0.1:0", "streams": {\(streams)}},
          "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"}
        }
        """
    }

    /// A daemon whose `push` transport answers with `push` and whose `live` is the real local transport.
    static func start(policy: String, grace: Int = 0, streams: String = #""heartbeat": 1"#, maxPerUser: Int = 5000,
                      push: @escaping @Sendable (Delivery) -> DeliveryOutcome = { .delivered(receipt: $0.messageID.lowercasedString) },
                      directory: TemporaryDirectory? = nil) async throws -> (TestDaemon, ScriptedTransport) {
        let directory = try directory ?? TemporaryDirectory(prefix: "herald-local")
        var registry = TestDaemon.registry
        registry.register(LocalTransport.self)
        let configuration = try DaemonConfiguration.parse(Data(config(policy: policy, grace: grace, streams: streams, maxPerUser: maxPerUser).utf8),
                                                          baseDirectory: directory.path, registry: registry, environment: [:])
        let pushTransport = ScriptedTransport(name: "push", clock: SystemClock(), script: push)
        let logs = RecordingLogHandler()
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                            options: Daemon.Options(random: { 0.5 }, makeTransport: { spec, context in
                                if spec.kind == "local" { return try LocalTransport(name: spec.name, configuration: .init(), context: context) }
                                return pushTransport
                            }, environment: [:]))
        let port = try await daemon.start()
        let started = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        StopsDaemons.current?.withLock { $0.append(started) }
        return (started, pushTransport)
    }

    static func token(user: String, device: String, app: String = app, secret: String = secret, ttl: TimeInterval = 3600) -> String {
        let now = Date()
        return ClientToken.sign(ClientTokenClaims(user: user, app: app, device: device, issuedAt: now, expiresAt: now.addingTimeInterval(ttl)),
                                secret: Secret(secret))
    }

    static func send(_ d: TestDaemon, to user: String, _ text: String) async throws -> String {
        let r = try await d.client.post("/v1/notifications", #"{"app":"\#(app)","users":["\#(user)"],"alert":"\#(text)","data":{"k":"v"}}"#)
        #expect(r.status == 202, "\(r)")
        return r.json?["id"]?.stringValue ?? ""
    }

    /// The deliveries of a notification as "transport state".
    static func routes(_ d: TestDaemon, _ id: String) async throws -> [String] {
        let status = try await d.client.get("/v1/notifications/\(id)")
        return (status.json?["deliveries"]?.arrayValue ?? []).map {
            "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-")"
        }.sorted()
    }

    static func waitForStreams(_ d: TestDaemon, _ n: Int) async -> Bool {
        await eventually(timeout: 10) { d.daemon.openStreams == n }
    }

    @Test func aDeviceInTheForegroundGetsTheNotificationOnItsStreamOnly() async throws {
        let (d, push) = try await Self.start(policy: "local-first")
        let device = TestDaemon.token(1)
        try await d.register(user: "alice", token: device)
        try await d.register(user: "alice", token: TestDaemon.token(2))
        let stream = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: Self.token(user: "alice", device: device))
        #expect(stream.status == 200)
        #expect(stream.head.lowercased().contains("content-type: text/event-stream"))
        #expect(await Self.waitForStreams(d, 1))
        let id = try await Self.send(d, to: "alice", "hello")
        let event = try #require(try await stream.next())
        #expect(event.id == 1)
        #expect(event.event == "notification")
        #expect(event.json?["id"]?.stringValue == id)
        #expect(event.json?["alert"]?.stringValue == "hello")
        #expect(event.json?["data"]?["k"]?.stringValue == "v")
        #expect(event.json?["created_at"]?.stringValue != nil)
        _ = try await d.waitUntilFinal(id)
        #expect(try await Self.routes(d, id) == ["live delivered", "push delivered"])
        // Device 1 went through its stream only; device 2 (no stream) through push.
        #expect(push.attempts.map(\.delivery.token) == [TestDaemon.token(2)])
    }

    @Test func aDeviceThatLeftGetsItsPushRouteOnceThePresenceGraceEnds() async throws {
        let (d, push) = try await Self.start(policy: "local-first", grace: 1)
        let device = TestDaemon.token(1)
        try await d.register(user: "alice", token: device)
        var stream: StreamClient? = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: Self.token(user: "alice", device: device))
        #expect(await Self.waitForStreams(d, 1))
        let first = try await Self.send(d, to: "alice", "while open")
        #expect(try await stream?.next()?.json?["id"]?.stringValue == first)
        stream?.raw.close()   // the app goes to the background: the heartbeat finds the closed socket
        stream = nil
        #expect(await Self.waitForStreams(d, 0))
        // Planned for push at once: the device is not in the foreground any more.
        let second = try await Self.send(d, to: "alice", "after close")
        _ = try await d.waitUntilFinal(second)
        #expect(try await Self.routes(d, second) == ["push delivered"])
        #expect(push.attempts.map(\.delivery.notificationID) == [second])
    }

    @Test func localOnlyParksForAClosedAppAndReplaysWithLastEventIDAndSince() async throws {
        let (d, push) = try await Self.start(policy: "local-only")
        let device = TestDaemon.token(1)
        try await d.register(user: "alice", token: device)
        var ids: [String] = []
        for i in 1...3 { ids.append(try await Self.send(d, to: "alice", "m\(i)")) }
        #expect(try await eventually(timeout: 10) { try await Self.routes(d, ids[2]) == ["live parked"] })
        let token = Self.token(user: "alice", device: device)
        // First connection: the parked ones arrive (numbered as they are written).
        var stream = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: token)
        let first = try await stream.events(3)
        #expect(first.compactMap { $0.json?["alert"]?.stringValue }.sorted() == ["m1", "m2", "m3"])
        #expect(first.map(\.id) == [1, 2, 3])
        for id in ids { #expect(try await eventually(timeout: 10) { try await Self.routes(d, id) == ["live delivered"] }) }
        // The client read up to 2, dropped, and two more came while it was away.
        stream = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: token, lastEventID: 2)
        _ = stream
        ids.append(try await Self.send(d, to: "alice", "m4"))
        let again = try await stream.events(2)
        #expect(again.map(\.id) == [3, 4])
        #expect(again.map { $0.json?["alert"]?.stringValue } == ["m3", "m4"])
        // `since` (what a browser's reconnect cannot put in a header on the first request).
        let fromSince = try await StreamClient(port: d.port, query: "app=\(Self.app)&since=3", token: token)
        #expect(try await fromSince.events(1).map(\.id) == [4])
        #expect(push.attempts.isEmpty)
    }

    @Test func housekeepingKeepsAtMostMaxPerUserParkedForAUser() async throws {
        let (d, _) = try await Self.start(policy: "local-only", maxPerUser: 2)
        try await d.register(user: "alice", token: TestDaemon.token(1))
        var ids: [String] = []
        for i in 1...3 { ids.append(try await Self.send(d, to: "alice", "m\(i)")) }
        #expect(try await eventually(timeout: 10) { try await Self.routes(d, ids[2]) == ["live parked"] })
        await d.daemon.maintenanceOnce()
        #expect(try await Self.routes(d, ids[0]) == ["live expired"])
        #expect(try await Self.routes(d, ids[1]) == ["live parked"])
        #expect(try await Self.routes(d, ids[2]) == ["live parked"])
    }

    @Test func aDeadPushTokenFallsBackToTheInboxAndIsReplayedOnConnect() async throws {
        let (d, push) = try await Self.start(policy: "local-first",
                                             push: { _ in .tokenInvalid(since: nil, reason: "Unregistered") })
        let device = TestDaemon.token(7)
        try await d.register(user: "alice", token: device)
        let id = try await Self.send(d, to: "alice", "kept for later")
        #expect(try await eventually(timeout: 10) { try await Self.routes(d, id) == ["live parked"] })
        #expect(push.attempts.count == 1)
        let devices = try await d.client.get("/v1/users/alice/devices?app=\(Self.app)&include_invalidated=true")
        #expect(devices.text.contains("Unregistered"), "\(devices)")
        let stream = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: Self.token(user: "alice", device: device))
        let event = try #require(try await stream.next())
        #expect(event.json?["id"]?.stringValue == id)
        #expect(event.json?["alert"]?.stringValue == "kept for later")
        #expect(try await eventually(timeout: 10) { try await Self.routes(d, id) == ["live delivered"] })
    }

    @Test func forgedExpiredWrongAppAndWrongUserClientTokensAreRefused() async throws {
        let (d, _) = try await Self.start(policy: "local-first")
        try await d.register(user: "bob", token: TestDaemon.token(9))
        let device = TestDaemon.token(1)
        let cases: [(String, String?, String)] = [
            ("no token", nil, "client token"),
            ("forged", Self.token(user: "alice", device: device, secret: "not-the-secret-0123456789abcdef-0123"), "signature"),
            ("expired", Self.token(user: "alice", device: device, ttl: -60), "expired"),
            ("another app", Self.token(user: "alice", device: device, app: "org.other.app", secret: "other-secret-0123456789abcdef-01234567"), "org.other.app"),
            ("bob's device", Self.token(user: "alice", device: TestDaemon.token(9)), "another user"),
        ]
        for (name, token, reason) in cases {
            let stream = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: token)
            #expect(stream.status == 401, "\(name): \(stream.head)")
            let body = try await stream.body()
            #expect(body.contains("invalid_client_token"), "\(name): \(body)")
            #expect(body.contains(reason), "\(name): \(body)")
        }
        #expect(d.daemon.openStreams == 0)
    }

    @Test func aClientThatStopsReadingIsDisconnectedAndLosesNothing() async throws {
        let (d, _) = try await Self.start(policy: "local-only", streams: #""heartbeat": 1, "bufferBytes": 8192"#)
        let device = TestDaemon.token(1)
        try await d.register(user: "alice", token: device)
        let token = Self.token(user: "alice", device: device)
        // A client that never reads, with a small socket buffer.
        let stalled = try await StreamClient(port: d.port, query: "app=\(Self.app)", token: token, receiveBuffer: 4096)
        #expect(await Self.waitForStreams(d, 1))
        // Loopback socket buffers hold a few megabytes before the stream's own bound is reached.
        let filler = String(repeating: "x", count: 3000)
        var sent = 0
        while d.daemon.openStreams == 1 && sent < 4000 {
            _ = try await Self.send(d, to: "alice", "\(sent) \(filler)")
            sent += 1
        }
        #expect(await Self.waitForStreams(d, 0), "the stalled stream was not disconnected after \(sent) notifications")
        _ = stalled
        // Everything sent is in the inbox or still parked: a new connection from 0 gets each once.
        let fresh = try await StreamClient(port: d.port, query: "app=\(Self.app)&since=0", token: token)
        let events = try await fresh.events(sent)
        let numbers = events.compactMap { $0.json?["alert"]?.stringValue?.split(separator: " ").first.flatMap { Int($0) } }
        #expect(Set(numbers) == Set(0..<sent))
        #expect(numbers.count == sent)
    }
}

