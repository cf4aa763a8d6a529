import Foundation
import HeraldAPNs
import HeraldCore
import HeraldMatrix
import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// The `test` transport type for configurations in these tests; the daemon's transports are
/// injected (``TestDaemon``), so this plugin only parses.
final class TestPlugin: TransportPlugin {
    /// An APNs-like route: hex tokens of its environment (production when none is set), APNs payloads.
    struct Configuration: TransportConfiguration {
        var environment: APNsEnvironment?
        var label: String?
        var summary: String { "test" }
        var platform: Platform? { .ios }
        func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
            var address = try APNsRoute.address(input, attributes: attributes, environment: environment ?? attributes.apnsEnvironment ?? .production)
            if environment == nil, attributes.apnsEnvironment == nil { address.attributes = .apns(.production) }
            return address
        }
        func canCarry(_ attributes: DeviceAttributes) -> Bool {
            environment.map { APNsRoute.canCarry(attributes, environment: $0) } ?? true
        }
        func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
            try APNsRoute.render(content, context: context)
        }
    }
    static let kind = "test"
    static let overrideBlocks = [APNsOptions.block]
    static func configuration(from node: ConfigNode) -> Configuration? {
        Configuration(environment: node.oneOf("environment", APNsEnvironment.self), label: node.string("label"))
    }
    let name: String
    init(name: String, configuration: Configuration, context: TransportContext) throws { self.name = name }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) } }
}

/// A transport that holds every batch until ``open()`` (for backpressure and shutdown tests).
final class GatedTransport: Transport, Sendable {
    let name: String
    private let gate = Locked<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    private let received = Locked<[Delivery]>([])
    init(name: String) { self.name = name }

    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        received.withLock { $0 += batch }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = gate.withLock { g in
                if g.open { return true }
                g.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
        return batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) }
    }

    func open() {
        let waiters = gate.withLock { g in
            g.open = true
            defer { g.waiters = [] }
            return g.waiters
        }
        waiters.forEach { $0.resume() }
    }

    var deliveries: [Delivery] { received.withLock { $0 } }
}

/// A daemon in this process on 127.0.0.1 port 0 with a temporary database and injected transports.
struct TestDaemon {
    static let key = "test-key-0123456789abcdef"
    static let sendOnlyKey = "send-only-0123456789abcdef"
    static let app = "com.example.app"

    let directory: TemporaryDirectory
    let daemon: Daemon
    let port: Int
    let logs: RecordingLogHandler
    var client: HTTPTestClient { HTTPTestClient(port: port, key: Self.key) }
    var database: String { directory.file("herald.db") }

    static var registry: TransportRegistry {
        var r = TransportRegistry()
        r.register(TestPlugin.self)
        r.register(section: MatrixConfiguration.self)
        return r
    }

    /// Configuration JSON with a `server` section and `transports` (default: one `test` transport "t").
    static func configJSON(server: String = "", transports: String = #"{"t": {"type": "test"}}"#, routes: String = #"["t"]"#,
                           keys: Bool = true, extra: String = "") -> String {
        let keyList = keys ? """
            "keys": [{"id": "backend", "secret": "\(key)", "scopes": ["send", "devices", "admin"]},
                     {"id": "sender", "secret": "\(sendOnlyKey)", "scopes": ["send"]}],
            """ : ""
        return """
        {
          "storage": {"path": "herald.db", "synchronous": "normal"},
          "apps": {"\(app)": {"routes": \(routes)}, "org.other.app": {"routes": \(routes)}},
          "transports": \(transports),
          "api": {\(keyList) "listen": "127.0.0.1:0", "maxBodyBytes": 4096},
          "delivery": {"initialBackoff": "1s", "maxAttempts": 3, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h" \(server.isEmpty ? "" : ", " + server)},
          "log": {"level": "debug"} \(extra)
        }
        """
    }

    static func parse(_ json: String, directory: TemporaryDirectory) throws -> DaemonConfiguration {
        try DaemonConfiguration.parse(Data(json.utf8), baseDirectory: directory.path, registry: registry, environment: [:])
    }

    /// Starts a daemon; `transports` builds each transport by name (default: ``ScriptedTransport`` delivering).
    /// A daemon whose transports are the real plugins of `registry` (as `herald serve` builds
    /// them), in a fresh folder named with `prefix`; the suite's `.stopsDaemons` stops it.
    static func start(plugins config: String, registry: TransportRegistry, environment: [String: String] = [:],
                      prefix: String) async throws -> TestDaemon {
        let directory = try TemporaryDirectory(prefix: prefix)
        let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: directory.path, registry: registry,
                                                          environment: environment)
        let logs = RecordingLogHandler()
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                            options: Daemon.Options(random: { 0.5 }, environment: [:]))
        let port = try await daemon.start()
        let started = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        StopsDaemons.current?.withLock { $0.append(started) }
        return started
    }

    static func start(config: String = configJSON(), clock: any WallClock = SystemClock(),
                      transports: (@Sendable (String) -> any Transport)? = nil,
                      directory: TemporaryDirectory? = nil, fromFile: Bool = false) async throws -> TestDaemon {
        let directory = try directory ?? TemporaryDirectory(prefix: "herald-server")
        let configuration: DaemonConfiguration
        if fromFile {
            let path = try directory.write("config.json", config)
            configuration = try DaemonConfiguration.load(path: path, registry: registry, environment: [:])
        } else {
            configuration = try parse(config, directory: directory)
        }
        let logs = RecordingLogHandler()
        let make = transports ?? { name in ScriptedTransport(name: name, clock: SystemClock()) }
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                            options: Daemon.Options(clock: clock, random: { 0.5 },
                                                    makeTransport: { spec, _ in make(spec.name) },
                                                    environment: [:], frontEnds: [MatrixGateway.self]))
        let port = try await daemon.start()
        let started = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        if let scope = StopsDaemons.current {
            scope.withLock { $0.append(started) }
        } else {
            Issue.record("a test that starts a TestDaemon needs the .stopsDaemons trait (on its suite) so the daemon is stopped")
        }
        return started
    }

    /// Shuts the daemon down (a second call does nothing) and removes its folder.
    func stop() async {
        await daemon.shutdown()
        directory.remove()
    }

    /// A 64-hex-digit token ending in `n`.
    static func token(_ n: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 64 - hex.count) + hex
    }

    /// Registers a device through the API.
    @discardableResult
    func register(user: String, token: String, app: String = TestDaemon.app) async throws -> HTTPTestClient.Response {
        try await client.post("/v1/devices", #"{"app":"\#(app)","user":"\#(user)","token":"\#(token)"}"#)
    }

    /// Polls `GET /v1/notifications/{id}` until every delivery is final (real time, up to `timeout`).
    func waitUntilFinal(_ id: String, timeout: TimeInterval = 10) async throws -> JSONValue {
        let end = Date().addingTimeInterval(timeout)
        while true {
            let r = try await client.get("/v1/notifications/\(id)")
            if let deliveries = r.json?["deliveries"]?.arrayValue,
               deliveries.allSatisfy({ !["queued", "sent"].contains($0["state"]?.stringValue ?? "") }) {
                return r.json!
            }
            if Date() > end { return r.json ?? .null }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }
}

/// Stops every ``TestDaemon`` a test started, awaited, once the test returns or throws.
///
/// `defer` cannot await, so tests do not stop their daemons themselves: `@Suite(.stopsDaemons)`.
struct StopsDaemons: TestTrait, SuiteTrait, TestScoping {
    @TaskLocal static var current: Locked<[TestDaemon]>?

    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let started = Locked<[TestDaemon]>([])
        do {
            try await Self.$current.withValue(started) { try await function() }
        } catch {
            for d in started.withLock({ $0 }).reversed() { await d.stop() }
            throw error
        }
        for d in started.withLock({ $0 }).reversed() { await d.stop() }
    }
}

extension Trait where Self == StopsDaemons {
    /// Stops (awaited) every daemon the test started, on every path.
    static var stopsDaemons: StopsDaemons { StopsDaemons() }
}

/// A transport with a ledger: it claims to have accepted `accepted` before a restart.
final class LedgerTransport: DeliveryLedger, Sendable {
    let name: String
    private let accepted: Set<String>
    private let state = Locked<(asked: Set<String>, sent: [Delivery])>(([], []))
    init(name: String, accepted: Set<String>) {
        self.name = name
        self.accepted = accepted
    }
    func acceptedDeliveries(among apnsIDs: Set<String>) async throws -> Set<String> {
        state.withLock { $0.asked = apnsIDs }
        return apnsIDs.intersection(accepted)
    }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        state.withLock { $0.sent += batch }
        return batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) }
    }
    var asked: Set<String> { state.withLock { $0.asked } }
    var sent: [Delivery] { state.withLock { $0.sent } }
}
