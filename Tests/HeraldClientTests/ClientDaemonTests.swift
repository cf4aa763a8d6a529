import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import HeraldClient
import HeraldCore
import HeraldCrypto
import HeraldLocalTransport
import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// The `test` transport type of these configurations (the daemon's transports are injected).
final class ClientTestPlugin: TransportPlugin {
    struct Configuration: TransportConfiguration {
        var summary: String { "test" }
    }
    static let kind = "test"
    static func configuration(from node: ConfigNode) -> Configuration? { Configuration() }
    let name: String
    init(name: String, configuration: Configuration, context: TransportContext) throws { self.name = name }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) } }
}

/// A Herald daemon in this process (127.0.0.1, a temporary SQLite database), with the real local
/// transport for streams and a scripted push transport.
struct ClientTestDaemon {
    static let key = "client-test-key-0123456789abcdef"
    static let secret = "client-secret-0123456789abcdef-0123456789"
    static let app = "com.example.app"

    let directory: TemporaryDirectory
    let daemon: Daemon
    let port: Int
    let push: ScriptedTransport
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    static func config(policy: String, port: Int, heartbeat: Int, ackTimeout: Int) -> String {
        """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": ["push", "live"], "foreground": "\(policy)", "clientSecret": "\(secret)",
                              "ackTimeout": \(ackTimeout), "inbox": {"ttl": 3600, "maxPerUser": 1000}}},
          "transports": {"push": {"type": "test"}, "live": {"type": "local"}},
          "api": {"keys": [{"id": "backend", "secret": "\(key)", "scopes": ["send", "devices", "admin"]}],
                  "listen": "127.0.0.1:\(port)", "streams": {"heartbeat": \(heartbeat)}},
          "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"}
        }
        """
    }

    /// Starts a daemon (on `port`, 0 for any; in `directory`, a new one when nil).
    static func start(policy: String = "local-first", port: Int = 0, heartbeat: Int = 30, ackTimeout: Int = 30,
                      directory: TemporaryDirectory? = nil) async throws -> ClientTestDaemon {
        let directory = try directory ?? TemporaryDirectory(prefix: "herald-client")
        var registry = TransportRegistry()
        registry.register(ClientTestPlugin.self)
        registry.register(LocalTransport.self)
        let configuration = try DaemonConfiguration.parse(Data(config(policy: policy, port: port, heartbeat: heartbeat, ackTimeout: ackTimeout).utf8),
                                                          baseDirectory: directory.path, registry: registry, environment: [:])
        let push = ScriptedTransport(name: "push", clock: SystemClock())
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: RecordingLogHandler(),
                            options: Daemon.Options(random: { 0.5 }, makeTransport: { spec, context in
                                if spec.kind == "local" { return try LocalTransport(name: spec.name, configuration: .init(), context: context) }
                                return push
                            }, environment: [:]))
        let bound = try await daemon.start()
        return ClientTestDaemon(directory: directory, daemon: daemon, port: bound, push: push)
    }

    /// A client token for `user`'s `device`.
    static func token(user: String, device: String) -> String {
        let now = Date()
        return ClientToken.sign(ClientTokenClaims(user: user, app: app, device: device, issuedAt: now, expiresAt: now.addingTimeInterval(3600)),
                                secret: Secret(secret))
    }

    static func device(_ n: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    /// An API call with the backend's key.
    func api(_ method: String, _ path: String, _ body: String? = nil) async throws -> (status: Int, json: JSONValue?) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.setValue("Bearer \(Self.key)", forHTTPHeaderField: "Authorization")
        if let body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(body.utf8)
        }
        request.timeoutInterval = 10
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, try? JSONValue.parse(data))
    }

    func register(user: String, device: String) async throws {
        let r = try await api("POST", "/v1/devices", #"{"app":"\#(Self.app)","user":"\#(user)","token":"\#(device)"}"#)
        #expect((200..<300).contains(r.status), "POST /v1/devices: \(r.status) \(String(describing: r.json))")
    }

    /// Sends a notification to `user`; returns its id.
    func send(to user: String, title: String, body: String = "body") async throws -> String {
        let r = try await api("POST", "/v1/notifications",
                              #"{"app":"\#(Self.app)","users":["\#(user)"],"alert":{"title":"\#(title)","body":"\#(body)"},"badge":4,"sound":"ping.caf","data":{"k":"v","n":1}}"#)
        #expect(r.status == 202, "POST /v1/notifications: \(r.status) \(String(describing: r.json))")
        return r.json?["id"]?.stringValue ?? ""
    }

    /// Each delivery of notification `id` as "transport state".
    func routes(_ id: String) async throws -> [String] {
        let r = try await api("GET", "/v1/notifications/\(id)")
        return (r.json?["deliveries"]?.arrayValue ?? []).map { "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-")" }.sorted()
    }

    func stop(removing: Bool = true) async {
        await daemon.shutdown()
        if removing { directory.remove() }
    }
}

/// The client against a real daemon: connect, receive, acknowledge (`delivered` in the status
/// API), reconnect with replay and no duplicate, a push already shown recognised, and the
/// daemon seeing a disconnect at once.
extension ClientNetworkTests {
@Suite(.serialized) struct ClientDaemonTests {
    static func client(_ d: ClientTestDaemon, user: String = "alice", device: String, store: any HeraldClientStore = InMemoryClientStore(),
                       log: EventLog, sleeper: RecordingSleeper = RecordingSleeper()) -> HeraldClient {
        HeraldClient(configuration: .init(server: d.url, app: ClientTestDaemon.app), store: store,
                     tokenProvider: { ClientTestDaemon.token(user: user, device: device) },
                     onEvent: log.handler, sleep: sleeper.sleep)
    }

    @Test func connectReceiveAndAcknowledgeMakesTheDeliveryDelivered() async throws {
        let d = try await ClientTestDaemon.start()
        let device = ClientTestDaemon.device(1)
        try await d.register(user: "alice", device: device)
        let log = EventLog()
        let store = InMemoryClientStore()
        let client = Self.client(d, device: device, store: store, log: log)
        client.connect()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 && client.status == .connected })
        let id = try await d.send(to: "alice", title: "Herald", body: "It works")
        let n = try #require(try await take(1, from: client).first)
        #expect(n.id == id)
        #expect(n.app == ClientTestDaemon.app)
        #expect(n.eventID == 1)
        #expect(n.alert?.title == "Herald")
        #expect(n.alert?.body == "It works")
        #expect(n.badge == 4)
        #expect(n.sound == .named("ping.caf"))
        #expect(n.data == ["k": .string("v"), "n": .int(1)])
        #expect(n.createdAt.map { abs($0.timeIntervalSinceNow) < 60 } == true)
        // Acknowledged, so delivered (the ack timeout is 30 s: nothing else can make it so).
        #expect(await eventually(timeout: 10) { log.acknowledged.contains(1) })
        #expect(await eventually(timeout: 10) { (try? await d.routes(id)) == ["live delivered"] })
        #expect(d.push.attempts.isEmpty)
        #expect(store.load().lastEventID == "1")
        await client.disconnect()
        await d.stop()
    }

    @Test func aStreamThatDoesNotAcknowledgeLeavesItsDeliverySent() async throws {
        // The contrast to the test above: the same stream (ack=1) read without acknowledging.
        let d = try await ClientTestDaemon.start(ackTimeout: 30)
        let device = ClientTestDaemon.device(2)
        try await d.register(user: "alice", device: device)
        var request = URLRequest(url: URL(string: "\(d.url.absoluteString)/v1/stream?app=\(ClientTestDaemon.app)&ack=1")!)
        request.setValue("Bearer \(ClientTestDaemon.token(user: "alice", device: device))", forHTTPHeaderField: "Authorization")
        let stream = makeStreamConnection(request: request, idleTimeout: 60)
        stream.start()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 })
        let id = try await d.send(to: "alice", title: "t")
        var text = ""
        for try await piece in stream.pieces {
            if case .bytes(let data) = piece { text += String(decoding: data, as: UTF8.self) }
            if text.contains("event: notification") { break }
        }
        #expect(text.contains(id))
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await d.routes(id) == ["live sent"])
        await stream.close()
        await d.stop()
    }

    @Test func disconnectIsSeenByTheDaemonAtOnce() async throws {
        // The heartbeat is 30 s: only the close itself can end the stream this fast.
        let d = try await ClientTestDaemon.start(heartbeat: 30)
        let device = ClientTestDaemon.device(3)
        try await d.register(user: "alice", device: device)
        let log = EventLog()
        let client = Self.client(d, device: device, log: log)
        client.connect()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 && client.status == .connected })
        let start = Date()
        await client.disconnect()
        #expect(await eventually(timeout: 2) { d.daemon.openStreams == 0 })
        #expect(Date().timeIntervalSince(start) < 2)
        await d.stop()
    }

    @Test func aDaemonRestartIsRidenOutWithLastEventIDAndNoDuplicate() async throws {
        let port = try Loopback.freePort()
        let directory = try TemporaryDirectory(prefix: "herald-client-restart")
        defer { directory.remove() }
        var d = try await ClientTestDaemon.start(port: port, directory: directory)
        let device = ClientTestDaemon.device(4)
        try await d.register(user: "alice", device: device)
        let log = EventLog()
        let store = FileClientStore(path: directory.file("client-state.json"))
        let client = Self.client(d, device: device, store: store, log: log)
        client.connect()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 && client.status == .connected })
        let first = try await d.send(to: "alice", title: "one")
        #expect(try await take(1, from: client).map(\.id) == [first])
        #expect(await eventually(timeout: 10) { log.acknowledged.contains(1) })
        // The daemon stops (": server shutting down", a clean end); the client keeps trying.
        await d.stop(removing: false)
        #expect(await eventually(timeout: 10) { log.drops.count >= 2 })
        d = try await ClientTestDaemon.start(port: port, directory: directory)
        #expect(await eventually(timeout: 20) { d.daemon.openStreams == 1 && client.status == .connected })
        // It reconnected saying where it stood.
        let reconnects = log.all.compactMap { e -> String?? in if case .connected(let id) = e { return .some(id) } else { return nil } }
        #expect(reconnects == [nil, "1"])
        let second = try await d.send(to: "alice", title: "two")
        let got = try #require(try await take(1, from: client).first)
        #expect(got.id == second)
        #expect(got.eventID == 2)
        #expect(log.received == [first, second])
        #expect(log.duplicates.isEmpty)
        #expect(await eventually(timeout: 10) { (try? await d.routes(second)) == ["live delivered"] })
        await client.disconnect()
        #expect(try store.load().lastEventID == "2")
        await d.stop(removing: false)
    }

    @Test func whatWasReadButNotAcknowledgedBeforeADropIsAcknowledgedOnReconnect() async throws {
        let d = try await ClientTestDaemon.start(policy: "local-only", ackTimeout: 20)
        let device = ClientTestDaemon.device(6)
        try await d.register(user: "alice", device: device)
        // A previous run of the app read events 1 and 2 and died before acknowledging them.
        var request = URLRequest(url: URL(string: "\(d.url.absoluteString)/v1/stream?app=\(ClientTestDaemon.app)&ack=1")!)
        request.setValue("Bearer \(ClientTestDaemon.token(user: "alice", device: device))", forHTTPHeaderField: "Authorization")
        let dying = makeStreamConnection(request: request, idleTimeout: 60)
        dying.start()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 })
        let n1 = try await d.send(to: "alice", title: "one")
        let n2 = try await d.send(to: "alice", title: "two")
        var text = ""
        for try await piece in dying.pieces {
            if case .bytes(let data) = piece { text += String(decoding: data, as: UTF8.self) }
            if text.contains(n1) && text.contains(n2) { break }
        }
        await dying.close()
        #expect(await eventually(timeout: 10) { (try? await d.routes(n2)) == ["live parked"] })
        // It had saved where it stood and what it showed.
        let store = InMemoryClientStore(HeraldClientState(lastEventID: "2", recentNotificationIDs: [n1, n2]))
        let log = EventLog()
        let client = Self.client(d, device: device, store: store, log: log)
        client.connect()
        // Connected, it acknowledges event 2 at once: both are delivered, neither is shown again.
        #expect(await eventually(timeout: 10) { log.acknowledged.contains(2) })
        #expect(await eventually(timeout: 10) { (try? await d.routes(n2)) == ["live delivered"] })
        #expect(try await d.routes(n1) == ["live delivered"])
        #expect(log.received.isEmpty)
        let n3 = try await d.send(to: "alice", title: "three")
        let next = try #require(try await take(1, from: client).first)
        #expect(next.id == n3)
        #expect(next.eventID == 3)
        #expect(log.duplicates.isEmpty)
        await client.disconnect()
        await d.stop()
    }

    @Test func aReplayDropsWhatAPushAlreadyShowedAndAPushOfAStreamedOneIsADuplicate() async throws {
        let d = try await ClientTestDaemon.start()
        let device = ClientTestDaemon.device(5)
        try await d.register(user: "alice", device: device)
        let logA = EventLog()
        let a = Self.client(d, device: device, log: logA)
        a.connect()
        #expect(await eventually(timeout: 10) { d.daemon.openStreams == 1 && a.status == .connected })
        let n1 = try await d.send(to: "alice", title: "one")
        let n2 = try await d.send(to: "alice", title: "two")
        #expect(try await take(2, from: a).map(\.id) == [n1, n2])
        // The stream showed n1: its push (as the app's remote-notification callback sees it) is a duplicate.
        #expect(a.isDuplicate(remoteNotification: ["aps": ["alert": ["title": "one"]], HeraldClient.notificationIDKey: n1]))
        #expect(await eventually(timeout: 10) { logA.acknowledged.contains(2) })
        await a.disconnect()
        // Another install state on the same device: it saw n1 as a push only, and lost its
        // last event id, so it asks for everything (Last-Event-ID: 0).
        let logB = EventLog()
        let storeB = InMemoryClientStore(HeraldClientState(lastEventID: "0"))
        let b = Self.client(d, device: device, store: storeB, log: logB)
        #expect(!b.isDuplicate(remoteNotification: [HeraldClient.notificationIDKey: n1]))   // shown as a push
        b.connect()
        let replayed = try await take(1, from: b)
        #expect(replayed.map(\.id) == [n2])
        #expect(replayed.first?.eventID == 2)
        #expect(await eventually(timeout: 10) { logB.duplicates == [n1] })
        #expect(logB.received == [n2])
        await b.disconnect()
        #expect(storeB.load().recentNotificationIDs == [n1, n2])
        await d.stop()
    }
}
}
