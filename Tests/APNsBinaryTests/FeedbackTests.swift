import APNsBinaryProtocol
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldSQLite
import HeraldTestKit
import Testing
@testable import HeraldAPNsBinary

/// The feedback service's tuples become reports; the host applies them to the store with
/// Apple's timestamp rule.
@Suite(.serialized) struct FeedbackTests {
    static let t0: UInt32 = 1_780_000_000

    @Test func tuplesBecomeReportsThatRetireTokensExceptReregisteredOnes() async throws {
        let dead = [(token: BinaryFixture.token(1), time: Self.t0), (token: BinaryFixture.token(2), time: Self.t0)]
        let feedback = try BinarySimulatorHarness.feedback(deadTokens: dead)
        defer { feedback.stop() }
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["feedbackInterval": "30m"], feedbackPort: feedback.port)
        #expect(transport.deadTokenPollInterval == 1800)

        let reports = try await transport.fetchDeadTokens()
        #expect(reports.map(\.token) == [BinaryFixture.token(1), BinaryFixture.token(2)])
        #expect(reports.allSatisfy { $0.since == Date(timeIntervalSince1970: TimeInterval(Self.t0)) })
        #expect(try await transport.fetchDeadTokens().isEmpty)  // the service forgets what it sent

        // The host's side: device 1 registered before Apple's time is retired; device 2 was
        // registered again after it and stays.
        let dir = try TemporaryDirectory(prefix: "herald-feedback")
        defer { dir.remove() }
        let store = try SQLiteTokenStore(path: dir.file("herald.db"))
        let before = Date(timeIntervalSince1970: TimeInterval(Self.t0) - 3600)
        let after = Date(timeIntervalSince1970: TimeInterval(Self.t0) + 60)
        _ = try await store.register(DeviceRegistration(app: "com.example.app", token: BinaryFixture.token(1), user: "alice",
                                                        transport: "legacy", environment: .sandbox), at: before)
        _ = try await store.register(DeviceRegistration(app: "com.example.app", token: BinaryFixture.token(2), user: "bob",
                                                        transport: "legacy", environment: .sandbox), at: after)
        var registry = TransportRegistry()
        registry.register(APNsBinaryTransport.self)
        let json = """
        {"storage": {"path": "\(dir.file("herald.db"))"},
         "apps": {"com.example.app": {"routes": ["legacy"]}, "com.example.other": {"routes": ["other"]}},
         "transports": {"legacy": {"type": "apns-binary", "environment": "sandbox", "certFile": "\(f.certs.clientCombined)"},
                        "other": {"type": "apns-binary", "environment": "production", "certFile": "\(f.certs.clientCombined)"}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(json.utf8), baseDirectory: dir.path, registry: registry)
        let results = await TokenInvalidator(store: store, logger: .disabled, metrics: MetricsRegistry())
            .apply(reports, transport: "legacy", configuration: configuration)
        #expect(results.map(\.app) == ["com.example.app", "com.example.app"])  // only apps routed through it
        let one = try await store.device(app: "com.example.app", token: BinaryFixture.token(1))
        let two = try await store.device(app: "com.example.app", token: BinaryFixture.token(2))
        #expect(one?.invalidatedAt == Date(timeIntervalSince1970: TimeInterval(Self.t0)))
        #expect(one?.invalidationReason == "feedback service: the app is no longer installed")
        #expect(two?.isActive == true)
    }

    @Test func anUninstalledAppIsAcceptedThenReported() async throws {
        let feedback = try BinarySimulatorHarness.feedback()
        defer { feedback.stop() }
        let gateway = try BinarySimulatorHarness.gateway(uninstalledTokens: [BinaryFixture.token(7)], feedback: feedback)
        defer { gateway.stop() }
        let f = BinaryFixture(gateway: gateway, certs: try TestCertificates.shared())
        let transport = try f.transport(feedbackPort: feedback.port)
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(6), BinaryFixture.delivery(7)])
        await transport.shutdown()
        #expect(outcomes.allSatisfy { $0.isDelivered })
        let reports = try await transport.fetchDeadTokens()
        #expect(reports.map(\.token) == [BinaryFixture.token(7)])
    }

    @Test func anUnreachableFeedbackServiceThrowsAClearError() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(feedbackPort: 1)
        await #expect(throws: TransportError.self) { try await transport.fetchDeadTokens() }
        do { _ = try await transport.fetchDeadTokens() } catch {
            #expect(String(describing: error).contains("cannot read the feedback service 127.0.0.1:1"))
        }
    }
}
