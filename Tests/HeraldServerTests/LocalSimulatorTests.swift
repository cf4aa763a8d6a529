import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldLocalTransport
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing

/// The real local transport behind a gate: once ``arm()``ed, the next batch waits after the
/// worker claimed it and before it reaches the stream hub, until ``release()``.
final class GatedLocalTransport: Transport, Sendable {
    private struct State {
        var armed = false
        var opened = false
        var gate: CheckedContinuation<Void, Never>?
        var held: [Delivery] = []
        var outcomes: [DeliveryOutcome] = []
    }
    let inner: any Transport
    private let state = Locked(State())

    init(_ inner: any Transport) { self.inner = inner }

    var name: String { inner.name }
    var preferredBatchSize: Int { inner.preferredBatchSize }
    func start() async throws { try await inner.start() }
    func checkReport() async -> [CheckFinding] { await inner.checkReport() }
    func shutdown() async {
        release()
        await inner.shutdown()
    }

    /// Holds the next batch.
    func arm() { state.withLock { $0.armed = true } }

    /// Lets the held batch (or the next one to be held) through.
    func release() {
        let gate = state.withLock { s in
            s.opened = true
            defer { s.gate = nil }
            return s.gate
        }
        gate?.resume()
    }

    /// The batch held at the gate.
    var held: [Delivery] { state.withLock { $0.held } }
    /// What the local transport answered for it once released.
    var outcomes: [DeliveryOutcome] { state.withLock { $0.outcomes } }

    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        let hold = state.withLock { s in
            guard s.armed else { return false }
            s.armed = false
            s.held += batch
            return true
        }
        if hold {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s in
                    if s.opened { return true }
                    s.gate = c
                    return false
                }
                if now { c.resume() }
            }
        }
        let outcomes = await inner.deliver(batch)
        if hold { state.withLock { $0.outcomes += outcomes } }
        return outcomes
    }
}

/// Presence picks the route, with the real `apns-http2` transport as the push route against the
/// HTTP/2 APNs simulator (TLS, token auth): a device with its stream open gets the stream and
/// APNs nothing; once its stream closed and the presence grace passed, APNs gets it.
@Suite(.serialized, .stopsDaemons) struct LocalSimulatorTests {
    static let secret = "local-simulator-secret-0123456789abcdef"
    static let app = TestDaemon.app
    static let device = TestDaemon.token(0x51)

    static func config(apns: HTTP2SimulatorHarness, grace: Int) -> String {
        let c = apns.certificates
        return """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": ["apns", "live"], "foreground": "local-first", "clientSecret": "\(secret)",
                              "presenceGrace": \(grace)}},
          "transports": {
            "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                     "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"},
            "live": {"type": "local"}
          },
          "api": {"keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["send", "devices", "admin"]}],
                  "listen": "127.0.0.1:0", "streams": {"heartbeat": 1}},
          "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"}
        }
        """
    }

    /// A daemon in this process whose transports are the registry's real ones; the local one
    /// sits behind the returned gate (open unless armed).
    static func start(apns: HTTP2SimulatorHarness, grace: Int) async throws -> (TestDaemon, GatedLocalTransport) {
        let directory = try TemporaryDirectory(prefix: "herald-local-apns")
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        registry.register(LocalTransport.self)
        let configuration = try DaemonConfiguration.parse(Data(config(apns: apns, grace: grace).utf8), baseDirectory: directory.path,
                                                          registry: registry, environment: [:])
        let gated = Locked<GatedLocalTransport?>(nil)
        let logs = RecordingLogHandler()
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                            options: Daemon.Options(random: { 0.5 }, makeTransport: { [registry] spec, context in
                                let transport = try registry.makeTransport(spec, context: context)
                                guard spec.kind == LocalTransport.kind else { return transport }
                                let gate = GatedLocalTransport(transport)
                                gated.withLock { $0 = gate }
                                return gate
                            }, environment: [:]))
        let port = try await daemon.start()
        let started = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        StopsDaemons.current?.withLock { $0.append(started) }
        let gate = try #require(gated.withLock { $0 }, "the daemon made no local transport")
        return (started, gate)
    }

    static func openStream(_ d: TestDaemon) async throws -> StreamClient {
        let stream = try await StreamClient(port: d.port, query: "app=\(app)",
                                            token: LocalDeliveryTests.token(user: "alice", device: device, secret: secret))
        #expect(stream.status == 200, "\(stream.head)")
        #expect(await LocalDeliveryTests.waitForStreams(d, 1))
        return stream
    }

    /// The notification's deliveries as "transport state" once they are `routes` (waiting up
    /// to 20 s), else as they are then.
    static func routes(_ d: TestDaemon, _ id: String, becoming routes: [String]) async -> [String] {
        _ = await eventually(timeout: 20) { (try? await LocalDeliveryTests.routes(d, id)) == routes }
        return (try? await LocalDeliveryTests.routes(d, id)) ?? []
    }

    /// The simulator's records as "device-token alert".
    static func received(_ apns: HTTP2SimulatorHarness) -> [String] {
        apns.simulator.received.map { r in
            let alert = (try? JSONValue.parse(Data(r.payload)))?["aps"]?["alert"]?.stringValue ?? "<no alert: \(String(decoding: r.payload, as: UTF8.self))>"
            return "\(r.deviceToken) \(alert)"
        }
    }

    static func metric(_ d: TestDaemon, _ line: String) async throws -> Bool {
        try await d.client.get("/metrics").text.split(separator: "\n").contains { $0 == line }
    }

    @Test(.timeLimit(.minutes(1))) func aConnectedDeviceGetsItsStreamAndAfterThePresenceGraceAPNsGetsIt() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let (d, _) = try await Self.start(apns: apns, grace: 1)
        try await d.register(user: "alice", token: Self.device)

        // In the foreground: the stream only.
        var stream: StreamClient? = try await Self.openStream(d)
        let first = try await LocalDeliveryTests.send(d, to: "alice", "in the foreground")
        #expect(await Self.routes(d, first, becoming: ["live delivered"]) == ["live delivered"])
        // Written before `delivered` was committed, so this read does not wait.
        let event = try #require(try await stream?.next())
        #expect(event.json?["id"]?.stringValue == first)
        #expect(event.json?["alert"]?.stringValue == "in the foreground")
        #expect(apns.simulator.received.isEmpty, "APNs got a notification for a device in the foreground: \(Self.received(apns))")

        // The app goes to the background: the heartbeat finds the closed socket.
        stream?.raw.close()
        stream = nil
        #expect(await LocalDeliveryTests.waitForStreams(d, 0))
        let second = try await LocalDeliveryTests.send(d, to: "alice", "in the background")
        #expect(await Self.routes(d, second, becoming: ["apns delivered"]) == ["apns delivered"])
        _ = await apns.simulator.waitForNotifications(count: 1, timeout: 10)
        #expect(Self.received(apns) == ["\(Self.device) in the background"])
        #expect(apns.simulator.received.first?.topic == Self.app)
    }

    /// The order is forced by a gate in front of the real local transport: the notification is
    /// planned while the stream is open (so its delivery goes to `live`, with `apns` as its
    /// fallback), the local worker claims it and stops at the gate before the stream hub is
    /// asked; the test then closes the stream, waits until the daemon has forgotten it, and only
    /// then opens the gate. The hub answers "not connected since <close>", the delivery parks for
    /// the grace, and once the grace ends it is handed to `apns`.
    @Test(.timeLimit(.minutes(1))) func aStreamThatClosesBeforeTheLocalWriteFallsBackToAPNsAfterTheGrace() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        // 2 s: the gate opens a few milliseconds after the close, well inside the grace.
        let (d, gate) = try await Self.start(apns: apns, grace: 2)
        defer { gate.release() }
        try await d.register(user: "alice", token: Self.device)
        var stream: StreamClient? = try await Self.openStream(d)
        _ = stream

        gate.arm()
        let id = try await LocalDeliveryTests.send(d, to: "alice", "closed too soon")
        #expect(await eventually(timeout: 20) { gate.held.count == 1 }, "the local worker did not take the delivery")
        #expect(gate.held.first?.notificationID == id)
        #expect(gate.held.first?.fallback == "apns")
        #expect(apns.simulator.received.isEmpty)

        stream?.raw.close()
        stream = nil
        #expect(await LocalDeliveryTests.waitForStreams(d, 0))
        gate.release()

        let arrived = await apns.simulator.waitForNotifications(count: 1, timeout: 15)
        #expect(arrived != nil, "APNs got nothing")
        #expect(Self.received(apns) == ["\(Self.device) closed too soon"])
        #expect(await Self.routes(d, id, becoming: ["apns delivered"]) == ["apns delivered"])
        // The hub found the device gone, the delivery waited out the grace, then left `live`.
        guard case .notConnected(let since)? = gate.outcomes.first else {
            Issue.record("the local transport answered \(gate.outcomes) for a device whose stream had closed")
            return
        }
        #expect(since != nil, "not connected, but no time of the close for the grace")
        #expect(try await Self.metric(d, #"herald_parked_total{transport="live"} 1"#))
        #expect(try await Self.metric(d, #"herald_rerouted_total{transport="live"} 1"#))
    }
}
