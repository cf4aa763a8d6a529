import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The shipped `config.json`, as `make run` uses it: credentials from make-test-certs.sh in
/// var/certs, the apns transport pointed at a simulator.
@Suite(.serialized) struct ShippedConfigTests {
    /// A copy of config.json in a temporary folder with var/certs made, and the APNs endpoint
    /// moved to `port` and its engine set to `engine` (the only changes).
    func shippedCopy(apnsPort: Int? = nil, engine: String? = nil) throws -> (TemporaryDirectory, String) {
        let dir = try TemporaryDirectory(prefix: "herald-shipped")
        do {
            return (dir, try write(to: dir, apnsPort: apnsPort, engine: engine))
        } catch {
            dir.remove()
            throw error
        }
    }

    private func write(to dir: TemporaryDirectory, apnsPort: Int?, engine: String?) throws -> String {
        var text = try String(contentsOfFile: PackagePaths.root + "/config.json", encoding: .utf8)
        if let apnsPort {
            #expect(text.contains("\"https://127.0.0.1:2197\""))
            text = text.replacingOccurrences(of: "\"https://127.0.0.1:2197\"", with: "\"https://127.0.0.1:\(apnsPort)\"")
        }
        if let engine {
            #expect(text.contains("\"type\": \"apns-http2\", "))
            text = text.replacingOccurrences(of: "\"type\": \"apns-http2\", ", with: "\"type\": \"apns-http2\", \"engine\": \"\(engine)\", ")
        }
        let config = try dir.write("config.json", text)
        let made = try Run.program("/bin/bash", [PackagePaths.root + "/scripts/make-test-certs.sh", dir.file("var/certs")])
        #expect(made.status == 0, "\(made.stderr)")
        return config
    }

    @Test func checkAcceptsTheShippedConfig() throws {
        let (dir, config) = try shippedCopy()
        defer { dir.remove() }
        let result = try Run.herald(["check", "--config", config], environment: ["HERALD_API_KEY": "a-long-enough-test-key", "HERALD_CLIENT_SECRET": "a-client-secret-of-32-bytes-or-more"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "warnings: \(result.stderr)")
        #expect(result.stdout.contains("apns: apns-http2 sandbox https://127.0.0.1:2197, token auth key ABC123DEFG team DEF123GHIJ, engine curl"))
        #expect(result.stdout.contains("ok: a provider token was signed"))
        #expect(result.stdout.contains("com.example.app: topic=com.example.app routes=apns,dry,live"))
    }

    /// Runs with each apns-http2 engine.
    @Test(arguments: ["curl", "nghttp2"]) func sendReachesTheSimulatorThroughTheShippedConfig(engine: String) async throws {
        let certsDir = try TestCertificates.shared()
        let simulator = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--tls-cert", certsDir.serverCertificate, "--tls-key", certsDir.serverKey,
            "--auth-key-pub", "ABC123DEFG=\(certsDir.authKeyPublic)", "--team", "DEF123GHIJ", "--topic", "com.example.app",
        ])
        defer { simulator.terminate() }
        let port = try #require(await simulator.listeningPort())
        let (dir, config) = try shippedCopy(apnsPort: port, engine: engine)
        defer { dir.remove() }
        // The shipped config trusts var/certs/ca.pem: use the CA that signed the simulator's certificate.
        try FileManager.default.removeItem(atPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.copyItem(atPath: certsDir.caFile, toPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.removeItem(atPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        try FileManager.default.copyItem(atPath: certsDir.authKey, toPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        let env = ["HERALD_API_KEY": "a-long-enough-test-key", "HERALD_CLIENT_SECRET": "a-client-secret-of-32-bytes-or-more"]
        let token = String(repeating: "7e", count: 32)
        let add = try Run.herald(["devices", "add", "--config", config, "--app", "com.example.app", "--user", "alice", "--token", token],
                                 environment: env)
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout.contains("transport apns, sandbox"))
        let send = try Run.herald(["send", "--config", config, "--app", "com.example.app", "--user", "alice",
                                   "--title", "Hello", "--body", "from the shipped config", "--json"], environment: env)
        #expect(send.status == 0, "\(send.stderr)")
        let line = try JSONValue.parse(try #require(send.lines.first))
        #expect(line["outcome"]?.stringValue == "delivered", "\(send.stdout)\(send.stderr)")
        #expect(line["transport"]?.stringValue == "apns")
        simulator.signal(SIGTERM)
        _ = await simulator.waitForExit(timeout: 30)
        #expect(simulator.stdout.contains("accepted 1") || simulator.stdout.contains("1 accepted"), "\(simulator.stdout)")
    }
}
