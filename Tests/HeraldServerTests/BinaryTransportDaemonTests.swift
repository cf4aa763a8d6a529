import APNsBinaryProtocol
import Foundation
import HeraldAPNsBinary
import HeraldCore
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing

/// The daemon with a real `apns-binary` transport: from the API to the simulated gateway, and
/// the feedback service read on schedule by the daemon's ``DeadTokenPoller``.
@Suite(.serialized, .stopsDaemons) struct BinaryTransportDaemonTests {
    /// A real binary transport to `gateway` (and `feedback`), built as the registry would.
    static func transport(_ name: String, gateway: APNsBinarySimulator, feedback: FeedbackSimulator?,
                          feedbackInterval: String) throws -> APNsBinaryTransport {
        let certs = try TestCertificates.shared()
        var section: [String: JSONValue] = ["environment": "sandbox", "endpoint": .string("127.0.0.1:\(gateway.port)"),
                                            "caFile": .string(certs.caFile), "certFile": .string(certs.clientCombined),
                                            "feedbackInterval": .string(feedbackInterval)]
        if let feedback { section["feedbackEndpoint"] = .string("127.0.0.1:\(feedback.port)") }
        let context = JSONReadContext(baseDirectory: "/")
        guard let configuration = APNsBinaryTransport.configuration(from: JSONNode(root: .object(section), context: context)) else {
            throw TestSetupError("\(context.errors)")
        }
        return try APNsBinaryTransport(name: name, configuration: configuration, context: TransportContext(logger: .disabled))
    }

    @Test func theDaemonDeliversThroughTheBinaryGatewayFromTheAPI() async throws {
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let config = TestDaemon.configJSON(transports: #"{"legacy": {"type": "test", "environment": "sandbox"}}"#, routes: #"["legacy"]"#)
        let d = try await TestDaemon.start(config: config, transports: { name in
            try! Self.transport(name, gateway: gateway, feedback: nil, feedbackInterval: "0")
        })
        #expect(try await d.register(user: "alice", token: TestDaemon.token(1)).status == 201)
        #expect(try await d.register(user: "alice", token: TestDaemon.token(2)).status == 201)
        let accepted = try await d.client.post("/v1/notifications", #"{"app":"com.example.app","users":["alice"],"alert":"Hello from the API"}"#)
        #expect(accepted.status == 202)
        let id = try #require(accepted.json?["id"]?.stringValue)
        let final = try await d.waitUntilFinal(id)
        await d.stop()
        let deliveries = final["deliveries"]?.arrayValue ?? []
        #expect(deliveries.count == 2)
        for delivery in deliveries {
            #expect(delivery["state"]?.stringValue == "delivered", "\(delivery)")
            #expect(delivery["reason"]?.stringValue?.hasPrefix("proven: ") == true, "\(delivery)")
        }
        let received = gateway.received
        #expect(Set(received.map(\.notification.tokenHex)) == [TestDaemon.token(1), TestDaemon.token(2)])
        #expect(received.allSatisfy { $0.notification.command == 2 && $0.notification.payloadText == #"{"aps":{"alert":"Hello from the API"},"herald_id":"\#(id)"}"# })
    }

    @Test func theDaemonPollsTheFeedbackServiceAndRetiresTheToken() async throws {
        let feedback = try BinarySimulatorHarness.feedback()
        defer { feedback.stop() }
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let config = TestDaemon.configJSON(transports: #"{"legacy": {"type": "test", "environment": "sandbox"}}"#, routes: #"["legacy"]"#)
        let d = try await TestDaemon.start(config: config, transports: { name in
            try! Self.transport(name, gateway: gateway, feedback: feedback, feedbackInterval: "100ms")
        })
        #expect(try await d.register(user: "alice", token: TestDaemon.token(1)).status == 201)
        #expect(try await d.register(user: "alice", token: TestDaemon.token(2)).status == 201)
        // Apple's time is after the registration: the token is retired at the next poll.
        try feedback.addDeadToken(TestDaemon.token(1), time: Date().addingTimeInterval(2))
        let retired = await eventually(timeout: 20) {
            let list = try? await d.client.get("/v1/users/alice/devices?app=com.example.app")
            return list?.json?["devices"]?.arrayValue?.first { $0["token"]?.stringValue == TestDaemon.token(1) }?["invalidated_at"] != .null
        }
        let list = try await d.client.get("/v1/users/alice/devices?app=com.example.app")
        // And again every feedbackInterval.
        let polled = feedback.deliveries.count
        #expect(await feedback.waitForDeliveries(count: polled + 2))
        await d.stop()
        #expect(retired)
        let two = list.json?["devices"]?.arrayValue?.first { $0["token"]?.stringValue == TestDaemon.token(2) }
        #expect(two?["invalidated_at"] == .null)
        #expect(d.logs.records.contains { $0.message == "dead tokens applied" })
    }

    @Test func aReloadThatTurnsFeedbackOnIsPolled() async throws {
        let feedback = try BinarySimulatorHarness.feedback()
        defer { feedback.stop() }
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let builds = Locked(0)
        let d = try await TestDaemon.start(
            config: TestDaemon.configJSON(transports: #"{"legacy": {"type": "test", "environment": "sandbox", "label": "off"}}"#,
                                          routes: #"["legacy"]"#),
            transports: { name in
                let n = builds.withLock { b in b += 1; return b }
                return try! Self.transport(name, gateway: gateway, feedback: feedback, feedbackInterval: n == 1 ? "0" : "100ms")
            })
        #expect(try await d.register(user: "alice", token: TestDaemon.token(1)).status == 201)
        try feedback.addDeadToken(TestDaemon.token(1), time: Date().addingTimeInterval(2))
        let next = TestDaemon.configJSON(transports: #"{"legacy": {"type": "test", "environment": "sandbox", "label": "on"}}"#,
                                         routes: #"["legacy"]"#)
        #expect(await d.daemon.reload(try TestDaemon.parse(next, directory: d.directory)) == .applied(added: [], changed: ["legacy"], removed: []))
        let retired = await eventually(timeout: 20) {
            let list = try? await d.client.get("/v1/users/alice/devices?app=com.example.app")
            return list?.json?["devices"]?.arrayValue?.first?["invalidated_at"] != .null
        }
        await d.stop()
        #expect(retired)
        #expect(builds.withLock { $0 } == 2)
    }
}
