import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// The CLI with an `apns-binary` transport pointed at the in-process simulators.
@Suite(.serialized) struct APNsBinaryCLITests {
    static func fixture(gateway: APNsBinarySimulator, feedback: FeedbackSimulator? = nil) throws -> CLIFixture {
        let certs = try TestCertificates.shared()
        let feedbackKey = feedback.map { #", "feedbackEndpoint": "127.0.0.1:\#($0.port)""# } ?? ""
        return try CLIFixture(extraTransports: """
        , "legacy": {"type": "apns-binary", "environment": "production", "endpoint": "127.0.0.1:\(gateway.port)",
                     "caFile": "\(certs.caFile)", "p12File": "\(certs.clientP12)", "passphrase": "${P12_PASS}"\(feedbackKey)}
        """, routes: #"["legacy"]"#)
    }

    func run(_ f: CLIFixture, _ arguments: [String]) async throws -> ProcessResult {
        try await Run.herald(arguments + ["--config", f.config], environment: f.env.merging(["P12_PASS": try TestCertificates.shared().p12Passphrase]) { $1 },
                       directory: f.dir.path)
    }

    @Test func sendReachesTheBinaryGateway() async throws {
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let f = try Self.fixture(gateway: gateway)
        defer { f.dir.remove() }
        for n in 1...2 { #expect(try await run(f, ["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(n)]).status == 0) }
        let send = try await run(f, ["send", "--app", "com.example.app", "--user", "alice", "--title", "Hi", "--body", "Binary", "--json"])
        #expect(send.status == 0, "\(send.stderr)")
        let lines = try send.lines.map { try JSONValue.parse($0) }
        #expect(lines.count == 2)
        for line in lines {
            #expect(line["outcome"]?.stringValue == "delivered")
            #expect(line["transport"]?.stringValue == "legacy")
            #expect(line["reason"]?.stringValue?.hasPrefix("proven: the gateway rejected Herald's proof notification") == true, "\(line)")
        }
        #expect(Set(gateway.received.map(\.notification.tokenHex)) == [f.token(1), f.token(2)])
        // The notification's id rides beside aps (one notification: one id in both).
        let ids = Set(gateway.received.compactMap { $0.notification.payloadText.firstMatch(of: /^\{"aps":\{"alert":\{"title":"Hi","body":"Binary"\}\},"herald_id":"([0-9a-f-]{36})"\}$/)?.1 })
        #expect(ids.count == 1 && gateway.received.count == 2, "\(gateway.received.map(\.notification.payloadText))")
    }

    @Test func sendWithACertificateTheGatewayRefusesFailsClearlyAndExits() async throws {
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let certs = try TestCertificates.shared()
        let f = try CLIFixture(extraTransports: """
        , "legacy": {"type": "apns-binary", "environment": "production", "endpoint": "127.0.0.1:\(gateway.port)",
                     "caFile": "\(certs.caFile)", "certFile": "\(certs.otherClientCertificate)", "keyFile": "\(certs.otherClientKey)"}
        """, routes: #"["legacy"]"#)
        defer { f.dir.remove() }
        let send = try await f.run(["send", "--app", "com.example.app", "--token", f.token(1), "--token", f.token(2), "--alert", "hi", "--json"])
        #expect(send.status == 1, "\(send.stderr)")  // it ran; each device says how it ended, and none was delivered
        #expect(send.stderr.contains("herald: 2 of 2 devices not delivered (2 failed)"), "\(send.stderr)")
        let lines = try send.lines.map { try JSONValue.parse($0) }
        #expect(lines.count == 2)
        for line in lines {
            #expect(line["outcome"]?.stringValue == "failed")
            #expect(line["reason"]?.stringValue?.contains("the gateway refused the client certificate") == true, "\(line)")
        }
        #expect(gateway.received.isEmpty)
    }

    @Test func feedbackRetiresTokensAndKeepsReregisteredOnes() async throws {
        let feedback = try BinarySimulatorHarness.feedback()
        defer { feedback.stop() }
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let f = try Self.fixture(gateway: gateway, feedback: feedback)
        defer { f.dir.remove() }
        for n in 1...2 { _ = try await run(f, ["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(n)]) }
        // Token 1 died after its registration; token 2 was registered again after Apple's time.
        let after = Date().addingTimeInterval(5), before = Date().addingTimeInterval(-3600)
        try feedback.addDeadToken(f.token(1), time: after)
        try feedback.addDeadToken(f.token(2), time: before)

        let dry = try await run(f, ["feedback", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("legacy: 2 dead tokens reported"))
        #expect(dry.stdout.contains("would retire: \(Redact.token(f.token(1))) app com.example.app"), "\(dry.stdout)")
        #expect(dry.stdout.contains("would keep (registered again after): \(Redact.token(f.token(2)))"))
        await #expect(!(try run(f, ["devices", "list", "--user", "alice", "--json"]).stdout.contains("invalidated_at\":\"")))

        try feedback.addDeadToken(f.token(1), time: after)
        try feedback.addDeadToken(f.token(2), time: before)
        let applied = try await run(f, ["feedback", "--transport", "legacy"])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(applied.stdout.contains("retired: \(Redact.token(f.token(1))) app com.example.app"), "\(applied.stdout)")
        #expect(applied.stdout.contains("kept (registered again after): \(Redact.token(f.token(2)))"))
        let list = try await run(f, ["devices", "list", "--app", "com.example.app", "--user", "alice", "--json"])
        let devices = try list.lines.map { try JSONValue.parse($0) }
        #expect(devices.first { $0["token"]?.stringValue == f.token(1) }?["invalidated_at"] != .null, "\(list.stdout)")
        #expect(devices.first { $0["token"]?.stringValue == f.token(2) }?["invalidated_at"] == .null)
    }

    @Test func feedbackHelpAndErrors() async throws {
        let help = try await Run.herald(["feedback", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: herald feedback [--transport NAME] [--dry-run] [--config PATH]"))
        #expect(try await Run.herald(["--help"]).stdout.contains("  feedback"))
        let bench = try await Run.herald(["bench", "apns-binary", "--help"])
        #expect(bench.status == 2 && bench.stderr.contains("moved to their own binary, herald-bench"), "\(bench.stderr)")
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let f = try Self.fixture(gateway: gateway)
        defer { f.dir.remove() }
        let unknown = try await run(f, ["feedback", "--transport", "nope"])
        #expect(unknown.status == 2 && unknown.stderr.contains("--transport: no transport \"nope\""))
        let wrongKind = try await run(f, ["feedback", "--transport", "dry"])
        #expect(wrongKind.status == 2 && wrongKind.stderr.contains("dry (log) has no feedback service"))
    }

    @Test func checkReportsTheBinaryCertificate() async throws {
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let f = try Self.fixture(gateway: gateway)
        defer { f.dir.remove() }
        let check = try await run(f, ["check"])
        #expect(check.status == 0, "\(check.stderr)")
        #expect(check.stdout.contains("legacy: apns-binary production 127.0.0.1:\(gateway.port), format frame"))
        #expect(check.stdout.contains("ok: topic com.example.app (the certificate's UID)"))
        #expect(check.stdout.contains("ok: certificate valid until "))
        let wrong = try await Run.herald(["check", "--config", f.config], environment: f.env.merging(["P12_PASS": "hunter2-wrong"]) { $1 })
        #expect(wrong.status == 3)
        #expect(wrong.stderr.contains("transports.legacy.passphrase: wrong passphrase"))
        #expect(!wrong.stderr.contains("hunter2-wrong"))
    }

    /// Issue 24, item 17: Apple switched the binary provider API off on 31 March 2021. `herald
    /// check` warns when a transport points at Apple's hosts (the defaults), and prints the
    /// equivalent apns-http2 section with the same certificate, which works when pasted.
    @Test func checkWarnsThatApplesBinaryAPIIsOffAndPrintsThePasteableHTTP2Section() async throws {
        let certs = try TestCertificates.shared()
        let f = try CLIFixture(extraTransports: """
        , "legacy": {"type": "apns-binary", "environment": "production", "p12File": "\(certs.clientP12)", "passphrase": "${P12_PASS}"}
        """, routes: #"["legacy"]"#)
        defer { f.dir.remove() }
        let check = try await run(f, ["check"])
        let output = check.stdout + check.stderr
        let warning = try #require(check.stderr.split(separator: "\n").first { $0.contains("warning: transports.legacy: Apple switched off") },
                                   "\(output)")
        #expect(warning.contains("the legacy binary provider API on 31 March 2021: gateway.push.apple.com:2195 and feedback.push.apple.com:2196 no longer accept providers"))
        let placeholder = "<your passphrase, as in transports.legacy.passphrase>"
        let section = #""legacy": {"type":"apns-http2","environment":"production","p12File":"\#(certs.clientP12)","passphrase":"\#(placeholder)"}"#
        #expect(warning.hasSuffix("the equivalent section, with the same certificate, is: " + section), "\(warning)")
        #expect(!output.contains(try TestCertificates.shared().p12Passphrase), "the passphrase is never printed")

        // Pasted in place of the binary section (with the passphrase put back), it is a valid apns-http2 transport.
        let pasted = section.replacingOccurrences(of: placeholder, with: "${P12_PASS}")
        let config = try String(contentsOfFile: f.config, encoding: .utf8)
        let start = try #require(config.range(of: #""legacy": {"type": "apns-binary""#))
        let end = try #require(config[start.lowerBound...].range(of: #""${P12_PASS}"}"#))
        try (config[..<start.lowerBound] + pasted + config[end.upperBound...]).write(toFile: f.config, atomically: true, encoding: .utf8)
        let after = try await run(f, ["check"])
        #expect((after.stdout + after.stderr).contains("  legacy: apns-http2 production"), "\(after.stdout)\(after.stderr)")
        #expect(!(after.stdout + after.stderr).contains("switched off"))
        #expect(!after.stderr.contains("configuration has"), "\(after.stderr)")

        // A binary transport pointed at another gateway (a simulator, a provider's relay) is not warned about.
        let gateway = try BinarySimulatorHarness.gateway()
        defer { gateway.stop() }
        let local = try Self.fixture(gateway: gateway)
        defer { local.dir.remove() }
        await #expect(!(try run(local, ["check"]).stderr.contains("switched off")))
    }
}
