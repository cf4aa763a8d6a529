import APNsBinaryProtocol
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
@testable import HeraldAPNsBinary

/// The transport against the in-process binary gateway (and feedback service) on 127.0.0.1
/// port 0, over mutual TLS with the test certificates.
struct BinaryFixture {
    let gateway: APNsBinarySimulator
    let certs: TestCertificates

    init(feedback: FeedbackSimulator? = nil, rules: (inout APNsBinaryRules) -> Void = { _ in }) throws {
        gateway = try BinarySimulatorHarness.gateway(feedback: feedback, rules: rules)
        certs = try TestCertificates.shared()
    }

    init(gateway: APNsBinarySimulator, certs: TestCertificates) {
        self.gateway = gateway
        self.certs = certs
    }

    static func token(_ n: Int) -> String { String(format: "%064x", n) }

    /// The section a config would hold; `extra` adds or overrides keys (`null` removes one).
    func section(_ extra: [String: JSONValue] = [:], feedbackPort: Int? = nil) -> [String: JSONValue] {
        var s: [String: JSONValue] = ["environment": "sandbox", "endpoint": .string("127.0.0.1:\(gateway.port)"),
                                      "caFile": .string(certs.caFile), "certFile": .string(certs.clientCertificate),
                                      "keyFile": .string(certs.clientKey)]
        if let feedbackPort { s["feedbackEndpoint"] = .string("127.0.0.1:\(feedbackPort)") }
        for (k, v) in extra { if v == .null { s[k] = nil } else { s[k] = v } }
        return s
    }

    /// Parses a section as the config reader does; returns the configuration or the errors.
    static func parse(_ section: [String: JSONValue]) -> (APNsBinaryConfiguration?, [String]) {
        let context = JSONReadContext(baseDirectory: "/")
        let node = JSONNode(root: .object(section), context: context)
        let configuration = APNsBinaryTransport.configuration(from: node)
        return (context.errors.isEmpty ? configuration : nil, context.errors.map(\.description))
    }

    func transport(_ extra: [String: JSONValue] = [:], feedbackPort: Int? = nil, clock: any WallClock = SystemClock(),
                   metrics: MetricsRegistry = MetricsRegistry()) throws -> APNsBinaryTransport {
        let (configuration, errors) = Self.parse(section(extra, feedbackPort: feedbackPort))
        guard let configuration else { throw TestSetupError("configuration: \(errors)") }
        return try APNsBinaryTransport(name: "legacy", configuration: configuration,
                                       context: TransportContext(logger: .disabled, clock: clock, metrics: metrics))
    }

    static func delivery(_ n: Int, content: NotificationContent = NotificationContent(alert: .text("Hello \(0)")),
                         payload: [UInt8]? = nil) -> Delivery {
        Delivery(id: Int64(n), notificationID: "n\(n)", app: "com.example.app", topic: "com.example.app", token: token(n),
                 user: nil, transport: "legacy", content: content,
                 payload: payload.map { RenderedPayload(body: $0) } ?? APNsRoute.rendered([Delivery(id: 0, notificationID: "n\(n)", app: "com.example.app", topic: "com.example.app", token: "", user: nil, transport: "legacy", content: content)])[0].payload)
    }

    /// Tokens the gateway accepted, in order of arrival.
    var receivedTokens: [String] { gateway.received.map(\.notification.tokenHex) }
}

extension DeliveryOutcome {
    var isDelivered: Bool { if case .delivered = self { return true } else { return false } }
    var evidence: String? { if case .delivered(_, let e) = self { return e } else { return nil } }
}
