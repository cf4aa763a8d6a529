import Foundation
import HeraldChinaPush
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// Reads a plugin section: the configuration and the errors.
func readSection<C>(_ json: JSONValue, _ read: (ConfigNode) -> C?) -> (C?, [String]) {
    let context = JSONReadContext(baseDirectory: "/")
    let node = JSONNode(root: json, context: context)
    let c = read(node)
    context.reportUnknownKeys()
    return (c, context.errors.map(\.description))
}

/// A vendor push token of realistic shape.
func vendorToken(_ n: Int, prefix: String = "IQAAAACy0") -> String {
    prefix + String(repeating: "k9Qz", count: 20) + "-\(n)"
}

/// A transport of any vendor against its simulator in-process (real TLS), sharing a test clock.
final class VendorFixture<T: Transport>: @unchecked Sendable {
    let simulator: ChinaVendorSimulator
    let certificates: TestCertificates
    let clock: TestClock
    let metrics = MetricsRegistry()
    private(set) var transport: T!
    let render: @Sendable (NotificationContent, RenderContext) throws -> RenderedPayload
    private var nextID: Int64 = 0

    /// - Parameters:
    ///   - section: the plugin's section given the simulator's base URL and CA file.
    ///   - make: reads the section and makes the transport.
    init(vendor: ChinaVendor, configureSimulator: (inout ChinaVendorSimulator.Configuration) -> Void = { _ in },
         section: (ChinaVendorSimulator, String) -> [String: JSONValue],
         make: ([String: JSONValue], TransportContext) throws -> (T, @Sendable (NotificationContent, RenderContext) throws -> RenderedPayload)) async throws {
        certificates = try TestCertificates.shared()
        clock = TestClock(start: Date())
        var c = ChinaVendorSimulator.Configuration(vendor: vendor, tls: .init(certificateFile: certificates.serverCertificate, keyFile: certificates.serverKey))
        c.clock = clock
        configureSimulator(&c)
        simulator = try ChinaVendorSimulator(configuration: c)
        try simulator.start()
        var members = section(simulator, certificates.caFile)
        members["timeout"] = 5
        let (t, r) = try make(members, TransportContext(logger: .disabled, clock: clock, metrics: metrics))
        transport = t
        render = r
        try await transport.start()
    }

    func stop() async {
        await transport.shutdown()
        simulator.stop()
    }

    /// Deliveries of one notification to `tokens`, rendered as the delivery engine renders them.
    func deliveries(_ tokens: [String], _ content: NotificationContent = NotificationContent(title: "Hi", body: "there")) throws -> [Delivery] {
        nextID += 1
        let notification = "n\(nextID)"
        return try tokens.enumerated().map { i, token in
            var d = Delivery(id: nextID * 10_000 + Int64(i), notificationID: notification, app: "com.example.app", topic: "com.example.app",
                             token: token, user: nil, transport: "vendor", content: content)
            d.payload = try render(content, d.renderContext)
            return d
        }
    }

    func send(_ tokens: [String], _ content: NotificationContent = NotificationContent(title: "Hi", body: "there")) async throws -> [DeliveryOutcome] {
        await transport.deliver(try deliveries(tokens, content))
    }
}

func isDelivered(_ o: DeliveryOutcome) -> Bool { if case .delivered = o { return true } else { return false } }
func isRetry(_ o: DeliveryOutcome) -> Bool { if case .retry = o { return true } else { return false } }
func isSetupFailure(_ o: DeliveryOutcome) -> Bool { if case .setupFailure = o { return true } else { return false } }
func isTokenInvalid(_ o: DeliveryOutcome) -> Bool { if case .tokenInvalid = o { return true } else { return false } }
