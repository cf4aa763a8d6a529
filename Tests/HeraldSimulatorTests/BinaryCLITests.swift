import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald simulate apns-binary` and `herald simulate feedback` as processes.
@Suite("herald simulate apns-binary / feedback")
struct BinaryCLITests {
    let good = BinaryWire.token(0x51), dead = BinaryWire.token(0xde)

    private func tlsArguments() throws -> [String] {
        let certs = try TestCertificates.shared()
        return ["--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey, "--client-ca", certs.caFile]
    }

    @Test func gatewayWithInvalidTokensFileAndRecord() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let invalid = try dir.write("invalid.txt", "# dead tokens\n\n\(BinaryWire.hex(dead).uppercased())\n")
        let record = dir.file("out.jsonl")
        let child = try ChildProcess.herald(["simulate", "apns-binary", "--port", "0"] + tlsArguments()
                                            + ["--invalid-tokens", invalid, "--record", record])
        defer { child.terminate() }
        let port = try #require(await child.listeningPort(), "stderr: \(child.stderr)")
        #expect(child.stdout.split(separator: "\n").first == "listening on 127.0.0.1:\(port)")

        let client = try TLSTestClient(port: port)
        client.send(BinaryWire.frame(token: good, identifier: 1) + BinaryWire.frame(token: dead, identifier: 2))
        #expect(BinaryWire.decodeError(client.readToEnd().bytes) == .init(command: 8, status: 8, identifier: 2))

        child.signal(SIGTERM)
        #expect(await child.waitForExit() == 0)
        let events = try String(contentsOfFile: record, encoding: .utf8).split(separator: "\n").map { try JSONValue.parse(String($0)) }
        #expect(events.map { $0["event"]?.stringValue ?? "" } == ["connected", "notification", "error"])
        #expect(events[1]["client"]?["uid"]?.stringValue == "com.example.app")
        #expect(events[2]["status"]?.intValue == 8)
        #expect(events[2]["reason"]?.stringValue == "token dededede… is configured as invalid")
        #expect(child.stderr.contains("error response sent"))
    }

    @Test func shutdownAfterAndInjectedFault() async throws {
        let child = try ChildProcess.herald(["simulate", "apns-binary", "--port", "0"] + tlsArguments()
                                            + ["--shutdown-after", "2", "--fail-token", "\(BinaryWire.hex(dead))=255"])
        defer { child.terminate() }
        let port = try #require(await child.listeningPort(), "stderr: \(child.stderr)")
        let first = try TLSTestClient(port: port)
        first.send((1...3).flatMap { BinaryWire.frame(token: good, identifier: UInt32($0)) })
        #expect(BinaryWire.decodeError(first.readToEnd().bytes) == .init(command: 8, status: 10, identifier: 2))
        let second = try TLSTestClient(port: port)
        second.send(BinaryWire.enhanced(identifier: 9, token: dead))
        #expect(BinaryWire.decodeError(second.readToEnd().bytes) == .init(command: 8, status: 255, identifier: 9))
    }

    @Test func feedbackFromADeadTokensFile() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = try dir.write("dead.txt", "\(BinaryWire.hex(dead)) 1600000000\n# no time: now\n\(BinaryWire.hex(good))\n")
        let before = UInt32(Date().timeIntervalSince1970)
        let child = try ChildProcess.herald(["simulate", "feedback", "--port", "0", "--dead-tokens", file] + tlsArguments())
        defer { child.terminate() }
        let port = try #require(await child.listeningPort(), "stderr: \(child.stderr)")
        #expect(child.stdout.split(separator: "\n").first == "listening on 127.0.0.1:\(port)")
        let result = try await OpenSSLClient.run(port: port, input: [])
        let tuples = try #require(BinaryWire.decodeFeedback(result.stdout), "stderr: \(result.stderr)")
        #expect(tuples.map(\.token) == [dead, good])
        #expect(tuples[0].time == 1_600_000_000)
        #expect(tuples[1].time >= before && tuples[1].time < before + 60)
        #expect(try await OpenSSLClient.run(port: port, input: []).stdout.isEmpty)
        child.signal(SIGINT)
        #expect(await child.waitForExit() == 0)
    }

    @Test func gatewayWithFeedbackPortInOneProcess() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let uninstalled = try dir.write("gone.txt", BinaryWire.hex(dead) + "\n")
        let child = try ChildProcess.herald(["simulate", "apns-binary", "--port", "0", "--feedback-port", "0",
                                             "--uninstalled-tokens", uninstalled] + tlsArguments())
        defer { child.terminate() }
        let port = try #require(await child.listeningPort(), "stderr: \(child.stderr)")
        let line = try #require(await child.waitForLine(containing: "feedback listening on 127.0.0.1:"))
        let feedbackPort = try #require(Int(line.split(separator: ":").last!))
        let client = try TLSTestClient(port: port)
        client.send(BinaryWire.frame(token: dead, identifier: 1))
        // Accepted (no error), so the connection stays open; wait until the gateway logged it.
        try await Task.sleep(nanoseconds: 50_000_000)
        var tuples: [(time: UInt32, token: [UInt8])] = []
        for _ in 0..<100 where tuples.isEmpty {
            tuples = BinaryWire.decodeFeedback(try await OpenSSLClient.run(port: feedbackPort, input: []).stdout) ?? []
            if tuples.isEmpty { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        #expect(tuples.map(\.token) == [dead])
    }

    @Test func usageErrors() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad = try dir.write("bad.txt", "\(BinaryWire.hex(good))\nnot-hex\n")
        let cases: [([String], String)] = [
            (["simulate", "apns-binary", "--port", "0"], "--tls-cert is required"),
            (["simulate", "apns-binary", "--plaintext", "--tls-cert", certs.serverCertificate], "--plaintext cannot be combined with --tls-cert"),
            (["simulate", "apns-binary", "--plaintext", "--fail-token", "abc"], "expected HEX=STATUS"),
            (["simulate", "apns-binary", "--plaintext", "--invalid-tokens", bad], "bad.txt:2: \"not-hex\" is not a hex token"),
            (["simulate", "apns-binary", "--plaintext", "--dead-tokens", bad], "need --feedback-port"),
            (["simulate", "feedback", "--tls-cert", "/nonexistent.pem", "--tls-key", certs.serverKey, "--client-ca", certs.caFile],
             "--tls-cert: cannot read \"/nonexistent.pem\""),
            (["simulate", "feedback", "--plaintext", "--dead-tokens", bad], "bad.txt:2: \"not-hex\" is not a hex token"),
        ]
        for (arguments, message) in cases {
            let result = try await Run.herald(arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }

    @Test func helpDocumentsEveryStatus() async throws {
        let help = try await Run.herald(["simulate", "apns-binary", "--help"])
        #expect(help.status == 0)
        for status in ["1   processing error", "2   missing token", "3   missing topic", "4   missing payload",
                       "5   invalid token size", "6   invalid topic size", "7   invalid payload size", "8   invalid token",
                       "10  shutdown", "128 protocol error", "255 unknown"] {
            #expect(help.stdout.contains(status), "missing: \(status)")
        }
        for option in ["--invalid-tokens", "--fail-token", "--shutdown-after", "--payload-limit", "--legacy-payload-limit",
                       "--max-token-size", "--max-topic-size", "--allow-missing-topic", "--protocol-error-status", "--record",
                       "--drop-after"] {
            #expect(help.stdout.contains(option), "missing: \(option)")
        }
        let feedback = try await Run.herald(["simulate", "feedback", "--help"])
        #expect(feedback.status == 0)
        #expect(feedback.stdout.contains("--dead-tokens"))
    }
}
