import APNsBinaryProtocol
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsBinary

/// Every way users hold their certificate loads and delivers; setup problems pause the transport
/// (`setupFailure`) instead of failing the notifications.
@Suite(.serialized) struct CredentialTests {
    @Test func p12EncryptedPEMAndCombinedPEMAllDeliver() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let variants: [[String: JSONValue]] = [
            ["certFile": .null, "keyFile": .null, "p12File": .string(f.certs.clientP12), "passphrase": .string(f.certs.p12Passphrase)],
            ["keyFile": .string(f.certs.clientEncryptedKey), "passphrase": .string(f.certs.p12Passphrase)],
            ["certFile": .string(f.certs.clientCombined), "keyFile": .null],
        ]
        for (i, extra) in variants.enumerated() {
            let transport = try f.transport(extra)
            try await transport.start()
            let outcomes = await transport.deliver([BinaryFixture.delivery(i + 1)])
            await transport.shutdown()
            #expect(outcomes[0].isDelivered, "variant \(i): \(outcomes)")
        }
        #expect(f.receivedTokens == (1...3).map(BinaryFixture.token))
        #expect(f.gateway.received.allSatisfy { $0.client?.uid == "com.example.app" })
    }

    @Test func aWrongOrMissingPassphraseNamesTheKeyAndHidesTheSecret() throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let (p12, p12Errors) = BinaryFixture.parse(f.section(["certFile": .null, "keyFile": .null, "p12File": .string(f.certs.clientP12),
                                                             "passphrase": "hunter2-wrong"]))
        #expect(p12 == nil)
        #expect(p12Errors.count == 1 && p12Errors[0].hasPrefix("passphrase: wrong passphrase for \(f.certs.clientP12)"))
        #expect(!p12Errors[0].contains("hunter2-wrong"))
        let (pem, pemErrors) = BinaryFixture.parse(f.section(["keyFile": .string(f.certs.clientEncryptedKey)]))
        #expect(pem == nil)
        #expect(pemErrors.count == 1 && pemErrors[0].hasPrefix("passphrase: ") && pemErrors[0].contains("no passphrase was given"))
    }

    @Test func configurationErrorsCarryTheirPaths() throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let (c, errors) = BinaryFixture.parse(f.section(["endpoint": "https://gateway", "format": "compact", "maxPayload": 0,
                                                         "connections": 100, "feedbackEndpoint": "nowhere"]))
        #expect(c == nil)
        #expect(errors.contains { $0.hasPrefix("endpoint: expected host:port") })
        #expect(errors.contains { $0.hasPrefix("feedbackEndpoint: expected host:port") })
        #expect(errors.contains { $0.hasPrefix("format: unknown value \"compact\"; expected one of: simple, enhanced, frame") })
        #expect(errors.contains { $0.hasPrefix("maxPayload: ") })
        #expect(errors.contains { $0.hasPrefix("connections: ") })
        let (defaults, none) = BinaryFixture.parse(["environment": "production", "certFile": .string(f.certs.clientCombined)])
        #expect(none.isEmpty)
        #expect(defaults?.endpoint.description == "gateway.push.apple.com:2195")
        #expect(defaults?.feedbackEndpoint.description == "feedback.push.apple.com:2196")
        #expect(defaults?.format == .frame && defaults?.maxPayload == 2048 && defaults?.connections == 1 && defaults?.feedbackInterval == 3600)
        let (sandbox, _) = BinaryFixture.parse(["environment": "sandbox", "certFile": .string(f.certs.clientCombined), "feedbackInterval": 0])
        #expect(sandbox?.endpoint.description == "gateway.sandbox.push.apple.com:2195")
        #expect(sandbox?.feedbackEndpoint.description == "feedback.sandbox.push.apple.com:2196")
        #expect(sandbox?.feedbackInterval == nil)
    }

    @Test func aCertificateTheGatewayRefusesIsASetupFailure() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["certFile": .string(f.certs.otherClientCertificate), "keyFile": .string(f.certs.otherClientKey)])
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1), BinaryFixture.delivery(2)])
        await transport.shutdown()
        for outcome in outcomes {
            guard case .setupFailure(let reason) = outcome else { Issue.record("expected a setup failure, got \(outcome)"); continue }
            #expect(reason.contains("the gateway refused the client certificate"))
        }
        #expect(f.gateway.received.isEmpty)
        #expect(await f.gateway.waitForRefusals(count: 1))
    }

    @Test func aGatewayCertificateThatCannotBeVerifiedIsASetupFailure() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["caFile": .string(f.certs.otherCA)])
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1)])
        await transport.shutdown()
        guard case .setupFailure(let reason) = outcomes[0] else { Issue.record("expected a setup failure, got \(outcomes)"); return }
        #expect(reason.contains("the gateway's certificate could not be verified") && reason.contains("check caFile and endpoint"))
        #expect(f.gateway.received.isEmpty)
    }

    @Test func anExpiredCertificateIsASetupFailureWithoutConnecting() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let later = TestClock(start: Date().addingTimeInterval(20 * 365 * 86400))
        let transport = try f.transport(clock: later)
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1)])
        await transport.shutdown()
        guard case .setupFailure(let reason) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(reason.contains("expired on") && reason.contains("renew it"))
        #expect(f.gateway.connectionCount == 0)
        let findings = await transport.checkReport()
        #expect(findings.contains { $0.severity == .error && $0.message.contains("the certificate expired on") })
    }

    @Test func checkReportsSubjectTopicAndExpiry() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport()
        let findings = await transport.checkReport()
        #expect(findings.contains { $0.severity == .ok && $0.message.hasPrefix("certificate from \(f.certs.clientCertificate): UID=com.example.app") })
        #expect(findings.contains(CheckFinding(.ok, "topic com.example.app (the certificate's UID)")))
        #expect(findings.contains { $0.severity == .ok && $0.message.hasPrefix("certificate valid until ") })
        let notAfter = try ClientIdentity.load(certificateFile: f.certs.clientCertificate, keyFile: f.certs.clientKey, passphrase: nil)
            .certificate.notAfter
        let soon = try f.transport(clock: TestClock(start: notAfter.addingTimeInterval(-10.5 * 86400)))
        #expect(await soon.checkReport().contains { $0.severity == .warning && $0.message.hasPrefix("the certificate expires in 10 days") })
    }

    @Test func anUnreachableGatewayIsATemporaryFailure() async throws {
        let f = try BinaryFixture()
        let port = f.gateway.port
        f.gateway.stop()
        let transport = try f.transport(["endpoint": .string("127.0.0.1:\(port)")])
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1)])
        await transport.shutdown()
        guard case .retry(let after, let reason) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(after != nil && reason.contains("cannot reach the gateway 127.0.0.1:\(port)"))
    }
}
