import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldHTTP2
import HeraldSimulator
import HeraldSQLite
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// Every test of the transport runs against both engines (`@Test(arguments: Engine.allCases)`).
typealias Engine = APNsHTTP2Configuration.Engine

extension APNsHTTP2Configuration.Engine {
    /// How each engine words a request that ran out of time.
    var timeoutMarker: String { self == .curl ? "(curl error 28)" : "the request timed out after" }
    /// How each engine words a stream the server reset.
    var resetMarker: String { self == .curl ? "(curl error 92)" : "(RST_STREAM INTERNAL_ERROR)" }
}

/// The transport against the APNs HTTP/2 simulator on 127.0.0.1 port 0, over real TLS.
struct TransportFixture {
    let apns: HTTP2SimulatorHarness
    let certs: TestCertificates

    static func token(_ n: Int) -> String { String(format: "%064x", n) }

    /// A transport pointed at the simulator. `extra` adds or overrides configuration keys.
    func transport(engine: Engine = .curl, _ extra: [String: JSONValue] = [:], clock: any WallClock = SystemClock(),
                   metrics: MetricsRegistry = MetricsRegistry(), token: Bool = true) throws -> APNsHTTP2Transport {
        var section: [String: JSONValue] = ["environment": "sandbox", "endpoint": .string(apns.baseURL), "caFile": .string(certs.caFile),
                                            "engine": .string(engine.rawValue)]
        if token {
            section["keyFile"] = .string(certs.authKey)
            section["keyId"] = .string(certs.authKeyID)
            section["teamId"] = .string(certs.teamID)
        }
        for (k, v) in extra { section[k] = v }
        let context = JSONReadContext(baseDirectory: "/")
        let configuration = APNsHTTP2Transport.configuration(from: JSONNode(root: .object(section), context: context))
        guard let configuration, context.errors.isEmpty else {
            throw TestSetupError("configuration: \(context.errors.map(\.description))")
        }
        return try APNsHTTP2Transport(name: "apns", configuration: configuration,
                                      context: TransportContext(logger: .disabled, clock: clock, metrics: metrics))
    }

    static func delivery(_ n: Int, content: NotificationContent = NotificationContent(alert: .text("Hello"))) -> Delivery {
        Delivery(id: Int64(n), notificationID: "n\(n)", app: "com.example.app", topic: "com.example.app", token: token(n),
                 user: nil, transport: "apns", content: content)
    }

    static func tokenAuth(faults: HTTP2Faults = HTTP2Faults(), clock: (any WallClock)? = nil,
                          configure: @escaping (inout APNsHTTP2Simulator.Configuration) -> Void = { _ in }) throws -> TransportFixture {
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults) { c in
            if let clock { c.clock = clock }
            configure(&c)
        }
        return TransportFixture(apns: apns, certs: apns.certificates)
    }
}

@Suite(.serialized) struct SimulatorIntegrationTests {
    @Test(arguments: Engine.allCases) func tokenAuthDeliversWithEveryHeader(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        var content = NotificationContent(alert: .fields(Alert(title: "T", body: "B")), badge: 2, data: ["k": "v"])
        content.apns.collapseID = "c-1"
        content.apns.expiration = Int64(Date().timeIntervalSince1970) + 3600
        content.apns.priority = 5
        let batch = (1...40).map { TransportFixture.delivery($0, content: content) }
        let outcomes = await transport.deliver(batch)
        #expect(transport.client.isRunning && transport.client.configuration.engine == (engine == .curl ? .curl : .nghttp2))
        await transport.shutdown()
        #expect(outcomes == batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) })
        let received = f.apns.simulator.received
        #expect(received.count == 40)
        let first = try #require(received.first { $0.deviceToken == TransportFixture.token(1) })
        #expect(first.apnsID == batch[0].messageID.uuidString.lowercased())
        #expect(first.topic == "com.example.app" && first.pushType == .alert)
        #expect(first.priority == 5 && first.collapseID == "c-1" && first.expiration == content.apns.expiration)
        #expect(first.keyID == "ABC123DEFG" && first.teamID == "DEF123GHIJ")
        #expect(first.payloadJSON == ["aps": ["alert": ["title": "T", "body": "B"], "badge": 2], "herald_id": "n1", "k": "v"])
        #expect(Set(received.map(\.connectionID)).count == 1)  // multiplexed on one connection
    }

    @Test(arguments: Engine.allCases) func certificateAuthWithP12AndCombinedPEM(engine: Engine) async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth()
        defer { apns.stop() }
        let f = TransportFixture(apns: apns, certs: apns.certificates)
        for extra: [String: JSONValue] in [["p12File": .string(f.certs.clientP12), "passphrase": .string(f.certs.p12Passphrase)],
                                           ["certFile": .string(f.certs.clientCombined)]] {
            let transport = try f.transport(engine: engine, extra, token: false)
            try await transport.start()
            let outcomes = await transport.deliver([TransportFixture.delivery(1), TransportFixture.delivery(2)])
            await transport.shutdown()
            #expect(outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(outcomes)")
        }
        #expect(apns.simulator.received.count == 4)
    }

    @Test(arguments: Engine.allCases) func applesErrorsBecomeOutcomes(engine: Engine) async throws {
        let unregisteredAt = Date(timeIntervalSince1970: 1_790_000_000.5)
        var faults = HTTP2Faults()
        faults.unregistered = [TransportFixture.token(1): unregisteredAt]
        faults.badDeviceTokens = [TransportFixture.token(2)]
        faults.tokensNotForTopic = [TransportFixture.token(3)]
        faults.tooManyRequests = [TransportFixture.token(4)]
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connectionRetries": 0])
        try await transport.start()
        let outcomes = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(outcomes[0] == .tokenInvalid(since: unregisteredAt, reason: "Unregistered"))
        #expect(outcomes[1] == .tokenInvalid(since: nil, reason: "BadDeviceToken"))
        #expect(outcomes[2] == .tokenInvalid(since: nil, reason: "DeviceTokenNotForTopic"))
        #expect(outcomes[3] == .retry(after: nil, reason: "TooManyRequests"))
        if case .delivered = outcomes[4] {} else { Issue.record("expected delivered, got \(outcomes[4])") }
    }

    @Test(arguments: Engine.allCases) func unregisteredInvalidatesTheStoreThroughTheDispatcher(engine: Engine) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteTokenStore(path: dir.file("h.db"))
        let registeredAt = Date(timeIntervalSince1970: 1_780_000_000)
        for n in 1...2 {
            _ = try await store.register(DeviceRegistration(app: "com.example.app", token: TransportFixture.token(n), user: "alice",
                                                            transport: "apns", environment: .sandbox), at: registeredAt)
        }
        // Token 1 died after its registration; token 2 was registered again after Apple's timestamp.
        _ = try await store.register(DeviceRegistration(app: "com.example.app", token: TransportFixture.token(2), user: "alice",
                                                        transport: "apns", environment: .sandbox), at: registeredAt.addingTimeInterval(7200))
        var faults = HTTP2Faults()
        faults.unregistered = [TransportFixture.token(1): registeredAt.addingTimeInterval(3600),
                               TransportFixture.token(2): registeredAt.addingTimeInterval(3600)]
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        let configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "engine": "\(engine.rawValue)", "environment": "sandbox", "endpoint": "\(f.apns.baseURL)", "caFile": "\(f.certs.caFile)",
                                 "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}}}
        """.utf8), baseDirectory: dir.path, registry: { var r = TransportRegistry(); r.register(APNsHTTP2Transport.self); return r }(), environment: [:])
        let dispatcher = Dispatcher(configuration: configuration, store: store, transports: ["apns": transport], logger: .disabled)
        let reports = try await dispatcher.send(NotificationRequest(app: "com.example.app", users: ["alice"], content: NotificationContent(alert: .text("x"))))
        await transport.shutdown()
        #expect(reports.map(\.outcome) == [.invalidToken, .invalidToken])
        #expect(try await store.device(app: "com.example.app", token: TransportFixture.token(1))?.invalidatedAt == registeredAt.addingTimeInterval(3600))
        #expect(try await store.device(app: "com.example.app", token: TransportFixture.token(2))?.invalidatedAt == nil)
    }

    @Test(arguments: Engine.allCases) func providerTokenRefreshesAtFiftyMinutesWithoutAStormAcrossConnections(engine: Engine) async throws {
        let clock = TestClock(start: Date())
        let f = try TransportFixture.tokenAuth(clock: clock)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connections": 3], clock: clock)
        try await transport.start()
        _ = await transport.deliver((1...30).map { TransportFixture.delivery($0) })
        clock.advance(by: 49 * 60)
        _ = await transport.deliver((31...60).map { TransportFixture.delivery($0) })
        clock.advance(by: 2 * 60)
        let last = await transport.deliver((61...90).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(last.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(last)")
        let received = f.apns.simulator.received
        #expect(received.count == 90)
        #expect(Set(received.map(\.connectionID)).count == 3)
        let tokens = Set(received.compactMap(\.tokenIssuedAt))
        #expect(tokens.count == 2)  // one token for 50 minutes on every connection, then one new one
        #expect(Set(received.filter { $0.deviceToken <= TransportFixture.token(60) }.compactMap(\.tokenIssuedAt)).count == 1)
        #expect(f.apns.simulator.counters.rejected["TooManyProviderTokenUpdates"] == nil)
    }

    /// Sends 500 notifications through connections the simulator keeps ending (per `faults`),
    /// expects every one delivered, and returns what the simulator received.
    func deliverAllThrough(engine: Engine, _ faults: HTTP2Faults) async throws -> (received: [ReceivedNotification], counters: HTTP2SimulatorCounters) {
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connectionRetries": 5, "maxConcurrentStreams": 50])
        try await transport.start()
        let batch = (1...500).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        for (d, o) in zip(batch, outcomes) {
            #expect(o == .delivered(receipt: d.messageID.uuidString.lowercased()), "\(d.token): \(o)")
        }
        return (f.apns.simulator.received, f.apns.simulator.counters)
    }

    @Test(arguments: Engine.allCases) func goAwayLosesNothingAndSendsNothingTwice(engine: Engine) async throws {
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 120
        let (received, counters) = try await deliverAllThrough(engine: engine, faults)
        // A graceful GOAWAY names the last stream it answered: nothing arrives twice.
        let ids = received.map(\.apnsID)
        #expect(ids.count == 500)
        #expect(Set(ids).count == 500)
        #expect(counters.goAways >= 4)
    }

    @Test(arguments: Engine.allCases) func droppedConnectionsLoseNothingAndResendOnlyWhatWasNotAnswered(engine: Engine) async throws {
        var faults = HTTP2Faults()
        faults.closeAfterStreams = 70
        let (received, counters) = try await deliverAllThrough(engine: engine, faults)
        #expect(Set(received.map(\.apnsID)).count == 500)
        #expect(counters.abruptCloses >= 4)
        // A socket closed without GOAWAY can take answers already written with it; only those
        // are sent again: the first copy of a repeat is among the last answers of a connection
        // the server dropped (at most one window of streams before the close).
        let byConnection = Dictionary(grouping: received, by: \.connectionID)
        var seen: [String: ReceivedNotification] = [:]
        for r in received.sorted(by: { $0.time < $1.time }) {
            if let first = seen[r.apnsID] {
                let answered = byConnection[first.connectionID] ?? []
                #expect(answered.count == 70, "a repeat of a notification answered on a connection that was not dropped")
                let later = answered.filter { $0.streamID > first.streamID }.count
                #expect(later < 50, "a repeat of a notification answered long before the drop")
            } else {
                seen[r.apnsID] = r
            }
        }
    }

    @Test(arguments: Engine.allCases) func serverErrorsAndThrottlingAreRetriedUntilDelivered(engine: Engine) async throws {
        var faults = HTTP2Faults()
        faults.internalServerErrors = 3
        faults.serviceUnavailable = 2
        faults.throttledRequests = 4
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "engine": "\(engine.rawValue)", "environment": "sandbox", "endpoint": "\(f.apns.baseURL)", "caFile": "\(f.certs.caFile)",
                                 "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}},
         "delivery": {"maxAttempts": 8, "initialBackoff": "10ms", "maxBackoff": "50ms"}}
        """.utf8), baseDirectory: dir.path, registry: { var r = TransportRegistry(); r.register(APNsHTTP2Transport.self); return r }(), environment: [:])
        let dispatcher = Dispatcher(configuration: configuration, store: try SQLiteTokenStore(path: dir.file("h.db")),
                                    transports: ["apns": transport], logger: .disabled)
        let reports = try await dispatcher.send(NotificationRequest(app: "com.example.app", tokens: [TransportFixture.token(1), TransportFixture.token(2)],
                                                                    content: NotificationContent(alert: .text("x")), attributes: .apns(.sandbox)))
        await transport.shutdown()
        #expect(reports.map(\.outcome) == [.delivered, .delivered])
        // Every refused attempt was tried again: 2 deliveries + 3 × 500 + 2 × 503 + 4 × 429.
        let attempts: Int = reports.map(\.attempts).reduce(0, +)
        #expect(attempts == 11)
        #expect(f.apns.simulator.received.count == 2)
        #expect(f.apns.simulator.counters.requests == 11)
        #expect(f.apns.simulator.counters.rejected == ["InternalServerError": 3, "ServiceUnavailable": 2, "TooManyRequests": 4])
    }

    @Test(arguments: Engine.allCases) func aSilentServerHitsTheRequestDeadline(engine: Engine) async throws {
        var faults = HTTP2Faults()
        faults.latency = 30
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["timeout": "300ms", "connectionRetries": 0])
        try await transport.start()
        let started = Date()
        let outcomes = await transport.deliver([TransportFixture.delivery(1)])
        #expect(Date().timeIntervalSince(started) < 10)
        await transport.shutdown()
        guard case .retry(_, let reason) = outcomes[0] else { Issue.record("expected retry, got \(outcomes[0])"); return }
        #expect(reason.hasPrefix("no answer: ") && reason.contains(engine.timeoutMarker), "\(reason)")
    }

    @Test(arguments: Engine.allCases) func badCredentialsAndUnreachableEndpointsFailClearly(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        // A key APNs does not know: 403 InvalidProviderToken, not retried.
        let other = try TemporaryDirectory()
        defer { other.remove() }
        _ = try await Run.program("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other.file("k.p8")])
        let stranger = try f.transport(engine: engine, ["keyFile": .string(other.file("k.p8"))])
        try await stranger.start()
        let refused = await stranger.deliver([TransportFixture.delivery(1)])
        await stranger.shutdown()
        #expect(refused == [.setupFailure(reason: "InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile")])

        // Nothing listens: a retryable outcome naming the connection failure, quickly.
        let port = f.apns.port
        f.apns.stop()
        let unreachable = try f.transport(engine: engine, ["endpoint": .string("https://127.0.0.1:\(port)"), "connectionRetries": 1, "timeout": "2s"])
        try await unreachable.start()
        let outcome = await unreachable.deliver([TransportFixture.delivery(2)])
        await unreachable.shutdown()
        guard case .retry(_, let reason) = outcome[0] else { Issue.record("expected retry, got \(outcome[0])"); return }
        #expect(reason.contains("connect") || reason.contains("Connection refused"), "\(reason)")
    }
}

/// A minimal HTTP CONNECT proxy on 127.0.0.1 port 0: reads the CONNECT line, connects upstream,
/// answers 200 and relays bytes both ways. Counts the tunnels it opened.
final class ConnectProxy: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let tunnels = Locked<[String]>([])
    /// While set, the tunnels open now relay nothing (a connection a middlebox silently dropped);
    /// tunnels opened later work.
    private let frozenBefore = Locked(0)
    private let opened = Locked(0)

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        listen(listener, 16)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Accepts connections on a background thread until ``stop()``.
    func start() {
        let fd = listener
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.serve(client) }
            }
        }
    }

    var targets: [String] { tunnels.withLock { $0 } }
    /// The CONNECT requests' heads, as received.
    var requestHeads: [String] { heads.withLock { $0 } }
    private let heads = Locked<[String]>([])

    /// Silences every tunnel open now, for good.
    func freezeOpenTunnels() { frozenBefore.withLock { $0 = opened.value } }

    func stop() { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }

    private func serve(_ client: Int32) {
        var request = [UInt8]()
        var byte: UInt8 = 0
        while !request.suffix(4).elementsEqual([13, 10, 13, 10]) {
            guard recv(client, &byte, 1, 0) == 1 else { close(client); return }
            request.append(byte)
        }
        let line = String(decoding: request, as: UTF8.self).split(separator: "\r\n").first ?? ""
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0] == "CONNECT", let colon = parts[1].lastIndex(of: ":"),
              let upstreamPort = UInt16(parts[1][parts[1].index(after: colon)...]) else { close(client); return }
        tunnels.withLock { $0.append(String(parts[1])) }
        let head = String(decoding: request, as: UTF8.self)
        heads.withLock { $0.append(head) }
        let number = opened.withLock { n -> Int in n += 1; return n }
        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = upstreamPort.bigEndian
        let rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { close(client); close(upstream); return }
        let ok = Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)
        _ = ok.withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) }
        let frozen: @Sendable () -> Bool = { [frozenBefore] in number <= frozenBefore.value }
        Thread.detachNewThread { Self.relay(from: upstream, to: client, frozen: frozen) }
        Self.relay(from: client, to: upstream, frozen: frozen)
    }

    private static func relay(from a: Int32, to b: Int32, frozen: @escaping @Sendable () -> Bool) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(a, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            if frozen() { continue }  // swallowed: the peer hears nothing, and no close either
            _ = buffer.withUnsafeBytes { send(b, $0.baseAddress, n, Int32(MSG_NOSIGNAL)) }
        }
        shutdown(b, Int32(SHUT_WR))
    }
}

@Suite(.serialized) struct ConnectionBehaviourTests {
    @Test(arguments: Engine.allCases) func throughAnHTTPConnectProxy(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let proxy = try ConnectProxy()
        proxy.start()
        defer { proxy.stop() }
        // Credentials in the URL, percent-encoded as libcurl takes them.
        let transport = try f.transport(engine: engine, ["proxy": .string("http://herald:p%40ss@127.0.0.1:\(proxy.port)")])
        try await transport.start()
        let outcomes = await transport.deliver((1...20).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(outcomes)")
        #expect(proxy.targets == ["127.0.0.1:\(f.apns.port)"])
        let basic = "Proxy-Authorization: Basic " + Data("herald:p@ss".utf8).base64EncodedString()
        #expect(proxy.requestHeads.allSatisfy { $0.contains(basic + "\r\n") }, "\(proxy.requestHeads)")
        #expect(f.apns.simulator.received.count == 20)
    }

    /// A connection that goes silent without closing (a middlebox dropped it): requests on it
    /// time out, are sent again, and reach APNs on a new connection.
    @Test(arguments: Engine.allCases) func aSilentlyDeadConnectionIsReplaced(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let proxy = try ConnectProxy()
        proxy.start()
        defer { proxy.stop() }
        let transport = try f.transport(engine: engine, ["proxy": .string("http://127.0.0.1:\(proxy.port)"), "timeout": "500ms",
                                                         "connectionRetries": 4])
        try await transport.start()
        let first = TransportFixture.delivery(1), second = TransportFixture.delivery(2)
        let before = await transport.deliver([first])
        proxy.freezeOpenTunnels()
        let after = await transport.deliver([second])
        await transport.shutdown()
        #expect(before == [.delivered(receipt: first.messageID.lowercasedString)])
        #expect(after == [.delivered(receipt: second.messageID.lowercasedString)], "\(after)")
        #expect(proxy.targets.count == 2, "one tunnel, then a new one after the first went silent")
    }

    @Test(arguments: Engine.allCases) func idleConnectionsAreClosedAndReplaced(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["idleTimeout": 1])
        try await transport.start()
        _ = await transport.deliver([TransportFixture.delivery(1)])
        _ = await transport.deliver([TransportFixture.delivery(2)])
        try await Task.sleep(nanoseconds: 2_100_000_000)
        let late = await transport.deliver([TransportFixture.delivery(3)])
        await transport.shutdown()
        if case .delivered = late[0] {} else { Issue.record("expected delivered, got \(late[0])") }
        let connections = f.apns.simulator.received.map(\.connectionID)
        #expect(connections[0] == connections[1])
        #expect(connections[2] != connections[1], "a connection idle longer than idleTimeout must not be reused")
    }

    /// libcurl closes a connection idle past `idleTimeout` in the same step in which it opens the
    /// next one: that close is no failure, and the requests on the new connection are not taken back.
    @Test(arguments: Engine.allCases) func closingAnIdleConnectionIsNoFailure(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let metrics = MetricsRegistry()
        let transport = try f.transport(engine: engine, ["idleTimeout": "1s", "connectionRetries": 0], metrics: metrics)
        try await transport.start()
        let first = await transport.deliver([TransportFixture.delivery(1)])
        try await Task.sleep(nanoseconds: 2_100_000_000)
        let one = await transport.deliver([TransportFixture.delivery(2)])
        try await Task.sleep(nanoseconds: 2_100_000_000)
        // A burst after an idle gap goes to a new connection: one request until it answers.
        let burst = await transport.deliver((3...12).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        let outcomes = first + one + burst
        #expect(outcomes.allSatisfy { if case .delivered = $0 { true } else { false } }, "\(outcomes)")
        #expect(metrics.total("herald_apns_connection_failures_total") == 0)
        #expect(metrics.total("herald_apns_requests_without_answer_total") == 0)
        let received = f.apns.simulator.received
        #expect(received.count == 12)
        #expect(Set(received.map(\.connectionID)).count == 3, "a connection idle longer than idleTimeout must not be reused")
        #expect(f.apns.simulator.counters.requests == 12, "nothing was sent twice")
    }

    @Test(arguments: Engine.allCases) func anUnreachableTransportDoesNotHoldUpAnother(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        // "prod" points at a port where nothing listens; "sand" at the simulator.
        let configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": ["prod", "sand"]}},
         "transports": {
           "prod": {"type": "apns-http2", "engine": "\(engine.rawValue)", "environment": "production", "endpoint": "https://127.0.0.1:1", "caFile": "\(f.certs.caFile)",
                    "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "timeout": "2s"},
           "sand": {"type": "apns-http2", "engine": "\(engine.rawValue)", "environment": "sandbox", "endpoint": "\(f.apns.baseURL)", "caFile": "\(f.certs.caFile)",
                    "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}},
         "delivery": {"maxAttempts": 3, "initialBackoff": "300ms"}}
        """.utf8), baseDirectory: dir.path, registry: registry, environment: [:])
        var transports: [String: any Transport] = [:]
        for name in ["prod", "sand"] {
            let t = try registry.makeTransport(configuration.transports[name]!, context: TransportContext(logger: .disabled))
            try await t.start()
            transports[name] = t
        }
        let store = try SQLiteTokenStore(path: dir.file("h.db"))
        for (n, env) in [(1, APNsEnvironment.production), (2, .sandbox)] {
            _ = try await store.register(DeviceRegistration(app: "com.example.app", token: TransportFixture.token(n), user: "alice",
                                                            transport: env == .production ? "prod" : "sand", environment: env), at: Date())
        }
        let arrivals = Locked<[String: Date]>([:])
        let started = Date()
        let dispatcher = Dispatcher(configuration: configuration, store: store, transports: transports, logger: .disabled)
        let reports = try await dispatcher.send(NotificationRequest(app: "com.example.app", users: ["alice"],
                                                                    content: NotificationContent(alert: .text("x")))) { report in
            arrivals.withLock { $0[report.transport ?? ""] = Date() }
        }
        for t in transports.values { await t.shutdown() }
        #expect(reports.first { $0.transport == "sand" }?.outcome == .delivered)
        #expect(reports.first { $0.transport == "prod" }?.outcome == .failed)
        let sandAt = try #require(arrivals.value["sand"]), prodAt = try #require(arrivals.value["prod"])
        #expect(sandAt.timeIntervalSince(started) < 2, "the working transport finished only after \(sandAt.timeIntervalSince(started)) s")
        #expect(prodAt > sandAt)
    }
}

/// A TCP listener on 127.0.0.1 port 0 that accepts each connection and closes it at once (a
/// load balancer in front of a dead APNs), counting the connections.
final class SlammingListener: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let count = Locked(0)
    var connections: Int { count.value }

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        guard bound == 0, listen(listener, 64) == 0 else { throw TestSetupError("cannot listen on 127.0.0.1") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        let fd = listener, count = self.count
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                count.withLock { $0 += 1 }
                close(client)
            }
        }
    }

    func stop() { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }
}

@Suite struct ReconnectBackoffTests {
    @Test(arguments: Engine.allCases) func aFailingEndpointIsRetriedWithBackoffNotAsFastAsRequestsWait(engine: Engine) async throws {
        let certs = try TestCertificates.shared()
        let dead = try SlammingListener()
        defer { dead.stop() }
        let f = TransportFixture(apns: try HTTP2SimulatorHarness.tokenAuth(), certs: certs)
        f.apns.stop()
        let transport = try f.transport(engine: engine, ["endpoint": .string("https://127.0.0.1:\(dead.port)"), "connectionRetries": 10, "timeout": "1s"])
        try await transport.start()
        let started = Date()
        let outcomes = await transport.deliver((1...50).map { TransportFixture.delivery($0) })
        let elapsed = Date().timeIntervalSince(started)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { if case .retry = $0 { true } else { false } }, "\(outcomes.prefix(3))")
        // Backoff 0, 0.1, 0.2, 0.4, 0.8 s …: a handful of connections in this time, not one per resend
        // (50 requests × 11 sends).
        let allowed = 2 + Int(log2(max(elapsed, 0.1) / 0.1 + 1)) + 2
        #expect(dead.connections >= 2)
        #expect(dead.connections <= allowed, "\(dead.connections) connections in \(elapsed) s")
    }
}
