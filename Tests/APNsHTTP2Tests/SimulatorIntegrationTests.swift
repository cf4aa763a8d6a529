import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldStore
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// The transport against the APNs HTTP/2 simulator on 127.0.0.1 port 0, over real TLS.
struct TransportFixture {
    let apns: HTTP2SimulatorHarness
    let certs: TestCertificates

    static func token(_ n: Int) -> String { String(format: "%064x", n) }

    /// A transport pointed at the simulator. `extra` adds or overrides configuration keys.
    func transport(_ extra: [String: JSONValue] = [:], clock: any WallClock = SystemClock(),
                   metrics: MetricsRegistry = MetricsRegistry(), token: Bool = true) throws -> APNsHTTP2Transport {
        var section: [String: JSONValue] = ["environment": "sandbox", "endpoint": .string(apns.baseURL), "caFile": .string(certs.caFile)]
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
        Delivery(id: Int64(n), notificationID: "n", app: "com.example.app", topic: "com.example.app", token: token(n),
                 user: nil, environment: .sandbox, transport: "apns", content: content)
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
    @Test func tokenAuthDeliversWithEveryHeader() async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport()
        try await transport.start()
        var content = NotificationContent(alert: .fields(Alert(title: "T", body: "B")), badge: 2, data: ["k": "v"])
        content.apns.collapseID = "c-1"
        content.apns.expiration = Int64(Date().timeIntervalSince1970) + 3600
        content.apns.priority = 5
        let batch = (1...40).map { TransportFixture.delivery($0, content: content) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes == batch.map { .delivered(apnsID: $0.apnsID.uuidString.lowercased()) })
        let received = f.apns.simulator.received
        #expect(received.count == 40)
        let first = try #require(received.first { $0.deviceToken == TransportFixture.token(1) })
        #expect(first.apnsID == batch[0].apnsID.uuidString.lowercased())
        #expect(first.topic == "com.example.app" && first.pushType == .alert)
        #expect(first.priority == 5 && first.collapseID == "c-1" && first.expiration == content.apns.expiration)
        #expect(first.keyID == "ABC123DEFG" && first.teamID == "DEF123GHIJ")
        #expect(first.payloadJSON == ["aps": ["alert": ["title": "T", "body": "B"], "badge": 2], "k": "v"])
        #expect(Set(received.map(\.connectionID)).count == 1)  // multiplexed on one connection
    }

    @Test func certificateAuthWithP12AndCombinedPEM() async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth()
        defer { apns.stop() }
        let f = TransportFixture(apns: apns, certs: apns.certificates)
        for extra: [String: JSONValue] in [["p12File": .string(f.certs.clientP12), "passphrase": .string(f.certs.p12Passphrase)],
                                           ["certFile": .string(f.certs.clientCombined)]] {
            let transport = try f.transport(extra, token: false)
            try await transport.start()
            let outcomes = await transport.deliver([TransportFixture.delivery(1), TransportFixture.delivery(2)])
            await transport.shutdown()
            #expect(outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(outcomes)")
        }
        #expect(apns.simulator.received.count == 4)
    }

    @Test func everyPushTypeGetsItsTopicSuffixAndAValidPriority() async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport()
        try await transport.start()
        var batch: [Delivery] = []
        for (i, type) in PushType.allCases.enumerated() where type != .mdm {
            var content = type == .background ? NotificationContent() : NotificationContent(alert: .text("x"))
            content.apns.pushType = type
            if type == .background { content.apns.contentAvailable = true }
            batch.append(TransportFixture.delivery(i + 1, content: content))
        }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(outcomes)")
        let byType = Dictionary(uniqueKeysWithValues: f.apns.simulator.received.map { ($0.pushType, $0) })
        for type in PushType.allCases where type != .mdm {
            #expect(byType[type]?.topic == type.topic(forBundleID: "com.example.app"))
        }
        #expect(byType[.background]?.priority == 5)
        #expect(byType[.alert]?.priority == 10)
    }

    @Test func payloadLimitsAreCheckedBeforeSending() async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport()
        try await transport.start()
        let big = String(repeating: "x", count: 4100)
        var voip = NotificationContent(data: ["blob": .string(String(repeating: "y", count: 5000))])
        voip.apns.pushType = .voip
        let outcomes = await transport.deliver([TransportFixture.delivery(1, content: NotificationContent(alert: .text(big))),
                                                TransportFixture.delivery(2, content: voip)])
        await transport.shutdown()
        #expect(outcomes[0] == .rejected(reason: "PayloadTooLarge: the payload is 4120 bytes; APNs accepts at most 4096 for alert notifications"))
        #expect(outcomes[1] == .delivered(apnsID: TransportFixture.delivery(2).apnsID.uuidString.lowercased()) || {
            if case .delivered = outcomes[1] { return true }; return false }())
        #expect(f.apns.simulator.counters.requests == 1)
    }

    @Test func applesErrorsBecomeOutcomes() async throws {
        let unregisteredAt = Date(timeIntervalSince1970: 1_790_000_000.5)
        var faults = HTTP2Faults()
        faults.unregistered = [TransportFixture.token(1): unregisteredAt]
        faults.badDeviceTokens = [TransportFixture.token(2)]
        faults.tokensNotForTopic = [TransportFixture.token(3)]
        faults.tooManyRequests = [TransportFixture.token(4)]
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(["connectionRetries": 0])
        try await transport.start()
        let outcomes = await transport.deliver((1...5).map { TransportFixture.delivery($0) })
        await transport.shutdown()
        #expect(outcomes[0] == .tokenInvalid(since: unregisteredAt, reason: "Unregistered"))
        #expect(outcomes[1] == .tokenInvalid(since: nil, reason: "BadDeviceToken"))
        #expect(outcomes[2] == .tokenInvalid(since: nil, reason: "DeviceTokenNotForTopic"))
        #expect(outcomes[3] == .retry(after: nil, reason: "TooManyRequests"))
        if case .delivered = outcomes[4] {} else { Issue.record("expected delivered, got \(outcomes[4])") }
    }

    @Test func unregisteredInvalidatesTheStoreThroughTheDispatcher() async throws {
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
        let transport = try f.transport()
        try await transport.start()
        let configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(f.apns.baseURL)", "caFile": "\(f.certs.caFile)",
                                 "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}}}
        """.utf8), baseDirectory: dir.path, registry: { var r = TransportRegistry(); r.register(APNsHTTP2Transport.self); return r }(), environment: [:])
        let dispatcher = Dispatcher(configuration: configuration, store: store, transports: ["apns": transport], logger: .disabled)
        let reports = try await dispatcher.send(NotificationRequest(app: "com.example.app", users: ["alice"], content: NotificationContent(alert: .text("x"))))
        await transport.shutdown()
        #expect(reports.map(\.outcome) == [.invalidToken, .invalidToken])
        #expect(try await store.device(app: "com.example.app", token: TransportFixture.token(1))?.invalidatedAt == registeredAt.addingTimeInterval(3600))
        #expect(try await store.device(app: "com.example.app", token: TransportFixture.token(2))?.invalidatedAt == nil)
    }

    @Test func providerTokenRefreshesAtFiftyMinutesWithoutAStormAcrossConnections() async throws {
        let clock = TestClock(start: Date())
        let f = try TransportFixture.tokenAuth(clock: clock)
        defer { f.apns.stop() }
        let transport = try f.transport(["connections": 3], clock: clock)
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

    @Test func goAwayLosesNothingAndSendsNothingTwice() async throws {
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 120
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(["connectionRetries": 5, "maxConcurrentStreams": 50])
        try await transport.start()
        let batch = (1...500).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        for (d, o) in zip(batch, outcomes) {
            #expect(o == .delivered(apnsID: d.apnsID.uuidString.lowercased()), "\(d.token): \(o)")
        }
        // A graceful GOAWAY names the last stream it answered: nothing arrives twice.
        let ids = f.apns.simulator.received.map(\.apnsID)
        #expect(ids.count == 500)
        #expect(Set(ids).count == 500)
        #expect(f.apns.simulator.counters.goAways >= 4)
    }

    @Test func droppedConnectionsLoseNothingAndResendOnlyWhatWasNotAnswered() async throws {
        var faults = HTTP2Faults()
        faults.closeAfterStreams = 70
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(["connectionRetries": 5, "maxConcurrentStreams": 50])
        try await transport.start()
        let batch = (1...500).map { TransportFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        for (d, o) in zip(batch, outcomes) {
            #expect(o == .delivered(apnsID: d.apnsID.uuidString.lowercased()), "\(d.token): \(o)")
        }
        let received = f.apns.simulator.received
        #expect(Set(received.map(\.apnsID)).count == 500)
        #expect(f.apns.simulator.counters.abruptCloses >= 4)
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

    @Test func serverErrorsAreRetriedUntilDelivered() async throws {
        var faults = HTTP2Faults()
        faults.internalServerErrors = 3
        faults.serviceUnavailable = 2
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport()
        try await transport.start()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let configuration = try HeraldConfiguration.parse(Data("""
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(f.apns.baseURL)", "caFile": "\(f.certs.caFile)",
                                 "keyFile": "\(f.certs.authKey)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}},
         "delivery": {"maxAttempts": 8, "initialBackoff": "10ms", "maxBackoff": "50ms"}}
        """.utf8), baseDirectory: dir.path, registry: { var r = TransportRegistry(); r.register(APNsHTTP2Transport.self); return r }(), environment: [:])
        let dispatcher = Dispatcher(configuration: configuration, store: try SQLiteTokenStore(path: dir.file("h.db")),
                                    transports: ["apns": transport], logger: .disabled)
        let reports = try await dispatcher.send(NotificationRequest(app: "com.example.app", tokens: [TransportFixture.token(1), TransportFixture.token(2)],
                                                                    content: NotificationContent(alert: .text("x")), environment: .sandbox))
        await transport.shutdown()
        #expect(reports.map(\.outcome) == [.delivered, .delivered])
        #expect(reports.map(\.attempts).reduce(0, +) == 2 + 5)
        #expect(f.apns.simulator.received.count == 2)
        #expect(f.apns.simulator.counters.rejected["InternalServerError"] == 3)
        #expect(f.apns.simulator.counters.rejected["ServiceUnavailable"] == 2)
    }

    @Test func aSilentServerHitsTheRequestDeadline() async throws {
        var faults = HTTP2Faults()
        faults.latency = 30
        let f = try TransportFixture.tokenAuth(faults: faults)
        defer { f.apns.stop() }
        let transport = try f.transport(["timeout": "300ms", "connectionRetries": 0])
        try await transport.start()
        let started = Date()
        let outcomes = await transport.deliver([TransportFixture.delivery(1)])
        #expect(Date().timeIntervalSince(started) < 10)
        await transport.shutdown()
        guard case .retry(_, let reason) = outcomes[0] else { Issue.record("expected retry, got \(outcomes[0])"); return }
        #expect(reason.hasPrefix("no answer: ") && reason.contains("(curl error 28)"), "\(reason)")
    }

    @Test func badCredentialsAndUnreachableEndpointsFailClearly() async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        // A key APNs does not know: 403 InvalidProviderToken, not retried.
        let other = try TemporaryDirectory()
        defer { other.remove() }
        _ = try Run.program("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other.file("k.p8")])
        let stranger = try f.transport(["keyFile": .string(other.file("k.p8"))])
        try await stranger.start()
        let refused = await stranger.deliver([TransportFixture.delivery(1)])
        await stranger.shutdown()
        #expect(refused == [.failed(reason: "InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile")])

        // Nothing listens: a retryable outcome naming the connection failure, quickly.
        let port = f.apns.port
        f.apns.stop()
        let unreachable = try f.transport(["endpoint": .string("https://127.0.0.1:\(port)"), "connectionRetries": 1, "timeout": "2s"])
        try await unreachable.start()
        let outcome = await unreachable.deliver([TransportFixture.delivery(2)])
        await unreachable.shutdown()
        guard case .retry(_, let reason) = outcome[0] else { Issue.record("expected retry, got \(outcome[0])"); return }
        #expect(reason.contains("connect") || reason.contains("Connection refused"), "\(reason)")
    }
}
