import Foundation
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// The gateway as Apple ran it: TLS with a required client certificate. Clients: HeraldCrypto's
/// TLS client (Swift) and `openssl s_client` (independent of Herald's code).
@Suite("Binary gateway over mutual TLS")
struct BinarySimulatorTLSTests {
    let good = BinaryWire.token(0x31)

    @Test func swiftClientSplitAndBatchedFramesWithCertificateIdentity() async throws {
        let sim = try BinarySimulatorHarness.gateway()
        defer { sim.stop() }
        let client = try TLSTestClient(port: sim.port)
        // One frame across three TLS records, the middle one a single byte.
        let first = BinaryWire.frame(token: good, identifier: 1, expiry: 0, priority: 10)
        client.send(Array(first[0..<6]))
        client.send([first[6]])
        client.send(Array(first[7...]))
        // Then 30 notifications, all three commands, in one write (one record).
        var batch: [UInt8] = []
        for i in 2...31 {
            batch += i % 2 == 0 ? BinaryWire.enhanced(identifier: UInt32(i), token: good) : BinaryWire.frame(token: good, identifier: UInt32(i))
        }
        client.send(batch + BinaryWire.simple(token: good))
        #expect(await sim.waitForNotifications(count: 32))
        let received = sim.received
        #expect(received.compactMap(\.notification.identifier) == Array(1...31).map(UInt32.init))
        #expect(received.last?.notification.command == 0)
        let identity = try #require(received.first?.client)
        #expect(identity.uid == "com.example.app")
        #expect(identity.topics == ["com.example.app", "com.example.app.voip", "com.example.app.complication"])
        #expect(identity.subject.contains("CN=Apple Push Services: com.example.app"))
        #expect(sim.connectionCount == 1)
    }

    @Test func swiftClientReadsTheErrorThenTheClose() async throws {
        let dead = BinaryWire.token(0xdd)
        let sim = try BinarySimulatorHarness.gateway { $0.invalidTokens = [BinaryWire.hex(dead)] }
        defer { sim.stop() }
        let client = try TLSTestClient(port: sim.port)
        client.send(BinaryWire.frame(token: good, identifier: 10) + BinaryWire.frame(token: dead, identifier: 11)
                    + BinaryWire.frame(token: good, identifier: 12))
        let (bytes, end) = client.readToEnd()
        #expect(BinaryWire.decodeError(bytes) == .init(command: 8, status: 8, identifier: 11))
        #expect(end == .closed)
        #expect(sim.received.map(\.notification.identifier) == [10])
        #expect(sim.rejections.first?.response.reason == "token dddddddd… is configured as invalid")
    }

    /// Each status the gateway produces, through `openssl s_client`: the exact 6 bytes, and the
    /// reason recorded.
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var input: [UInt8]
        var rules: @Sendable (inout APNsBinaryRules) -> Void = { _ in }
        var status: UInt8
        var identifier: UInt32
        var reason: String
        var testDescription: String { name }
    }

    static let token = BinaryWire.token(0x42)
    static let cases: [Case] = [
        Case(name: "2 missing token", input: BinaryWire.frame(token: nil, identifier: 2),
             status: 2, identifier: 2, reason: "the frame has no item 1 (device token)"),
        Case(name: "4 missing payload", input: BinaryWire.frame(token: token, payload: nil, identifier: 4),
             status: 4, identifier: 4, reason: "the frame has no item 2 (payload)"),
        Case(name: "5 token size (command 1)", input: BinaryWire.enhanced(identifier: 5, token: BinaryWire.token(1, count: 16)),
             status: 5, identifier: 5, reason: "token is 16 bytes; command 1 requires 32"),
        Case(name: "6 topic size", input: BinaryWire.frame(token: token, identifier: 6), rules: { $0.maximumTopicSize = 5 },
             status: 6, identifier: 6, reason: "topic \"com.example.app\" is 15 bytes; at most 5"),
        Case(name: "7 payload size", input: BinaryWire.frame(token: token, payload: [UInt8](repeating: 0x20, count: 2049), identifier: 7),
             status: 7, identifier: 7, reason: "payload is 2049 bytes; command 2 allows at most 2048"),
        Case(name: "8 invalid token", input: BinaryWire.enhanced(identifier: 8, token: token),
             rules: { $0.invalidTokens = [BinaryWire.hex(token)] },
             status: 8, identifier: 8, reason: "token 42424242… is configured as invalid"),
        Case(name: "10 shutdown", input: BinaryWire.frame(token: token, identifier: 100) + BinaryWire.frame(token: token, identifier: 101),
             rules: { $0.shutdownAfter = 1 },
             status: 10, identifier: 100, reason: "shutdown after 1 notification on this connection; identifier is the last accepted one"),
        Case(name: "1 processing error (fault)", input: BinaryWire.frame(token: token, identifier: 1),
             rules: { $0.tokenFaults[BinaryWire.hex(token)] = .processingError },
             status: 1, identifier: 1, reason: "fault injected for token 42424242…: status 1 (Processing error)"),
        Case(name: "128 unknown item", input: BinaryWire.frame([BinaryWire.item(1, token), BinaryWire.item(2, BinaryWire.alert),
                                                               BinaryWire.item(3, BinaryWire.u32(128)), BinaryWire.item(77, [])]),
             status: 128, identifier: 128, reason: "unknown item id 77; items are 1 token, 2 payload, 3 identifier, 4 expiration, 5 priority"),
        Case(name: "255 unknown item (configured)", input: BinaryWire.frame([BinaryWire.item(77, []), BinaryWire.item(3, BinaryWire.u32(255))]),
             rules: { $0.protocolErrorStatus = .unknown },
             status: 255, identifier: 255, reason: "unknown item id 77; items are 1 token, 2 payload, 3 identifier, 4 expiration, 5 priority"),
    ]

    @Test(arguments: cases)
    func opensslClientGetsTheStatus(_ c: Case) async throws {
        let sim = try BinarySimulatorHarness.gateway(rules: c.rules)
        defer { sim.stop() }
        let result = try await OpenSSLClient.run(port: sim.port, input: c.input)
        #expect(BinaryWire.decodeError(result.stdout) == .init(command: 8, status: c.status, identifier: c.identifier),
                "s_client stderr: \(result.stderr)")
        let rejection = try #require(sim.rejections.first)
        #expect(rejection.response.status.rawValue == c.status)
        #expect(rejection.response.reason == c.reason)
    }

    @Test func opensslClientThatKeepsSendingStillReadsTheError() async throws {
        let sim = try BinarySimulatorHarness.gateway()
        defer { sim.stop() }
        var flood: [UInt8] = []
        for i in 0..<20_000 { flood += BinaryWire.frame(token: good, identifier: UInt32(i + 2)) }
        let result = try await OpenSSLClient.run(port: sim.port, input: BinaryWire.frame(token: nil, identifier: 1) + flood)
        #expect(BinaryWire.decodeError(result.stdout) == .init(command: 8, status: 2, identifier: 1), "stderr: \(result.stderr)")
        #expect(sim.received.isEmpty)
    }

    @Test func opensslClientDeliversAndIsRecorded() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = APNsBinarySimulator.Configuration(tls: BinarySimulatorHarness.tlsFiles(try TestCertificates.shared()))
        configuration.record = try BinaryRecordSink(path: dir.file("record.jsonl"))
        let sim = APNsBinarySimulator(configuration: configuration)
        try sim.start()
        defer { sim.stop() }
        let input = BinaryWire.simple(token: good) + BinaryWire.enhanced(identifier: 2, expiry: 1_800_000_000, token: good)
            + BinaryWire.frame(token: good, payload: Array(#"{"aps":{"content-available":1}}"#.utf8), identifier: 3, priority: 5)
        let result = try await OpenSSLClient.run(port: sim.port, input: input) {
            _ = await sim.waitForNotifications(count: 3)
        }
        #expect(result.stdout.isEmpty)  // nothing is sent on success
        try #require(sim.received.map(\.notification.command) == [0, 1, 2])
        #expect(sim.received[1].notification.expiry == 1_800_000_000)
        #expect(sim.received[2].notification.priority == 5)
        sim.stop()
        configuration.record?.close()
        let lines = try String(contentsOfFile: dir.file("record.jsonl"), encoding: .utf8).split(separator: "\n")
        let notifications = try lines.map { try JSONValue.parse(String($0)) }.filter { $0["event"]?.stringValue == "notification" }
        #expect(notifications.count == 3)
        #expect(notifications.allSatisfy { $0["client"]?["uid"]?.stringValue == "com.example.app" })
        #expect(notifications[2]["client"]?["topics"]?.arrayValue?.count == 3)
    }

    @Test func clientWithoutCertificateIsRefusedAtTheHandshake() async throws {
        let sim = try BinarySimulatorHarness.gateway()
        defer { sim.stop() }
        let result = try await OpenSSLClient.run(port: sim.port, input: BinaryWire.simple(token: good), certificate: nil, key: nil)
        #expect(result.status != 0)
        #expect(result.stdout.isEmpty)
        #expect(await sim.waitForRefusals(count: 1))
        #expect(sim.refusedHandshakes.first?.contains("certificate") == true, "\(sim.refusedHandshakes)")
        #expect(sim.received.isEmpty)
        #expect(sim.connectionCount == 0)
    }

    @Test func clientFromAnotherCAIsRefusedAtTheHandshake() async throws {
        let sim = try BinarySimulatorHarness.gateway()
        defer { sim.stop() }
        let certs = try TestCertificates.shared()
        let result = try await OpenSSLClient.run(port: sim.port, input: BinaryWire.simple(token: good),
                                                 certificate: certs.otherClientCertificate, key: certs.otherClientKey)
        #expect(result.status != 0)
        #expect(await sim.waitForRefusals(count: 1))
        #expect(sim.refusedHandshakes.first?.contains("verif") == true, "\(sim.refusedHandshakes)")
        #expect(sim.received.isEmpty)
    }

    @Test func silentClientIsRefusedAfterTheHandshakeTimeout() async throws {
        var configuration = APNsBinarySimulator.Configuration(tls: BinarySimulatorHarness.tlsFiles(try TestCertificates.shared()))
        configuration.handshakeTimeout = 0.3
        let sim = APNsBinarySimulator(configuration: configuration)
        try sim.start()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)  // TCP only: never says hello
        #expect(socket.readToEnd().isEmpty)
        #expect(await sim.waitForRefusals(count: 1))
        #expect(sim.refusedHandshakes == ["the TLS handshake timed out"])
    }

    @Test func stopClosesOpenTLSConnections() async throws {
        let sim = try BinarySimulatorHarness.gateway()
        let client = try TLSTestClient(port: sim.port)
        client.send(BinaryWire.simple(token: good))
        #expect(await sim.waitForNotifications(count: 1))
        sim.stop()
        let (bytes, end) = client.readToEnd()
        #expect(bytes.isEmpty)
        #expect(end == .closed)
    }

    @Test func certificateWithoutTopicGetsStatus3() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let (certificate, key) = try await makeCertificateWithoutTopic(in: dir)
        let sim = try BinarySimulatorHarness.gateway()
        defer { sim.stop() }
        let client = try TLSTestClient(port: sim.port, certificate: certificate, key: key)
        client.send(BinaryWire.enhanced(identifier: 33, token: good))
        #expect(BinaryWire.decodeError(client.readToEnd().bytes) == .init(command: 8, status: 3, identifier: 33))
        #expect(sim.rejections.first?.response.reason
                == "the client certificate (O=Herald Tests, CN=No Topic Client) names no topic: no UID and no topics extension"
                || sim.rejections.first?.response.reason
                == "the client certificate (CN=No Topic Client, O=Herald Tests) names no topic: no UID and no topics extension")
    }
}
