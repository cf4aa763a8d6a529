import Foundation
import HeraldCore
import HeraldMatrix
import HeraldTestKit
import Testing

/// The secrets the shipped config.json reads from the environment, as `make run` sets them.
func shippedEnvironment(apiKey: String = "a-long-enough-test-key") -> [String: String] {
    ["HERALD_API_KEY": apiKey, "HERALD_CLIENT_SECRET": "a-client-secret-of-32-bytes-or-more", "HMS_APP_SECRET": "hms-test-secret",
     "XIAOMI_APP_SECRET": "xiaomi-test-secret", "OPPO_MASTER_SECRET": "oppo-test-secret", "VIVO_APP_SECRET": "vivo-test-secret"]
}

/// The shipped `config.json`, as `make run` uses it: credentials from make-test-certs.sh in
/// var/certs, the apns transport pointed at a simulator.
@Suite(.serialized) struct ShippedConfigTests {
    /// A copy of config.json in a temporary folder with var/certs made, and the APNs endpoint
    /// moved to `port` and its engine set to `engine` (the only changes).
    func shippedCopy(apnsPort: Int? = nil, engine: String? = nil) async throws -> (TemporaryDirectory, String) {
        let dir = try TemporaryDirectory(prefix: "herald-shipped")
        do {
            return await (dir, try write(to: dir, apnsPort: apnsPort, engine: engine))
        } catch {
            dir.remove()
            throw error
        }
    }

    private func write(to dir: TemporaryDirectory, apnsPort: Int?, engine: String?) async throws -> String {
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
        let made = try await Run.program("/bin/bash", [PackagePaths.root + "/scripts/make-test-certs.sh", dir.file("var/certs")])
        #expect(made.status == 0, "\(made.stderr)")
        return config
    }

    @Test func checkAcceptsTheShippedConfig() async throws {
        let (dir, config) = try await shippedCopy()
        defer { dir.remove() }
        let result = try await Run.herald(["check", "--config", config], environment: shippedEnvironment())
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "warnings: \(result.stderr)")
        #expect(result.stdout.contains("apns: apns-http2 sandbox https://127.0.0.1:2197, token auth key ABC123DEFG team DEF123GHIJ, engine curl"))
        #expect(result.stdout.contains("ok: a provider token was signed"))
        #expect(result.stdout.contains("com.example.app: topic=com.example.app routes=apns,android,huawei,xiaomi,oppo,vivo,dry,live"))
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
        let (dir, config) = try await shippedCopy(apnsPort: port, engine: engine)
        defer { dir.remove() }
        // The shipped config trusts var/certs/ca.pem: use the CA that signed the simulator's certificate.
        try FileManager.default.removeItem(atPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.copyItem(atPath: certsDir.caFile, toPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.removeItem(atPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        try FileManager.default.copyItem(atPath: certsDir.authKey, toPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        let env = shippedEnvironment()
        let token = String(repeating: "7e", count: 32)
        let add = try await Run.herald(["devices", "add", "--config", config, "--app", "com.example.app", "--user", "alice", "--token", token],
                                 environment: env)
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout.contains("transport apns, sandbox"))
        let send = try await Run.herald(["send", "--config", config, "--app", "com.example.app", "--user", "alice",
                                   "--title", "Hello", "--body", "from the shipped config", "--json"], environment: env)
        #expect(send.status == 0, "\(send.stderr)")
        let line = try JSONValue.parse(try #require(send.lines.first))
        #expect(line["outcome"]?.stringValue == "delivered", "\(send.stdout)\(send.stderr)")
        #expect(line["transport"]?.stringValue == "apns")
        simulator.signal(SIGTERM)
        _ = await simulator.waitForExit(timeout: 30)
        #expect(simulator.stdout.contains("accepted 1") || simulator.stdout.contains("1 accepted"), "\(simulator.stdout)")
    }

    /// `herald serve` on a copy of the shipped config.json in `dir`, beside `herald simulate
    /// apns-http2` recording what it receives to `record`. Only the ports move (to free ones) and
    /// the certificates are the test ones; the rest is as shipped. The caller terminates both.
    func serveShipped(in dir: TemporaryDirectory, key: String) async throws -> (daemon: ChildProcess, simulator: ChildProcess, record: String) {
        let certs = try TestCertificates.shared()
        let record = dir.file("apns-received.jsonl")
        let simulator = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey,
            "--auth-key-pub", "ABC123DEFG=\(certs.authKeyPublic)", "--team", "DEF123GHIJ", "--record", record,
        ])
        do {
            let apnsPort = try #require(await simulator.listeningPort())
            var text = try String(contentsOfFile: PackagePaths.root + "/config.json", encoding: .utf8)
            for (shipped, free) in [("https://127.0.0.1:2197", "https://127.0.0.1:\(apnsPort)"), ("127.0.0.1:8080", "127.0.0.1:0"),
                                    ("127.0.0.1:8090", "127.0.0.1:0"), ("127.0.0.1:8088", "127.0.0.1:0")] {
                text = text.replacingOccurrences(of: shipped, with: free)
            }
            let config = try dir.write("config.json", text)
            try FileManager.default.createDirectory(atPath: dir.file("var/certs"), withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: certs.caFile, toPath: dir.file("var/certs/ca.pem"))
            try FileManager.default.copyItem(atPath: certs.authKey, toPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
            try FileManager.default.copyItem(atPath: certs.vapidKey, toPath: dir.file("var/certs/vapid.key"))
            try FileManager.default.copyItem(atPath: certs.fcmServiceAccount, toPath: dir.file("var/certs/fcm-service-account.json"))
            let daemon = try ChildProcess.herald(["serve", "--config", config],
                                                 environment: shippedEnvironment(apiKey: key),
                                                 directory: dir.path)
            return (daemon, simulator, record)
        } catch {
            simulator.terminate()
            throw error
        }
    }

    /// The README's "gorush clients" example, run as written against the shipped config (its
    /// `gorush` section, through the `apns` route to the simulator), but for the port.
    @Test func theREADMEsGorushExampleWorksAgainstTheShippedConfig() async throws {
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "## gorush clients").dropFirst().first?.components(separatedBy: "\n## ").first)
        let block = try #require(section.components(separatedBy: "```sh\n").dropFirst().first?.components(separatedBy: "\n```").first)
        let lines = block.components(separatedBy: "\n")
        #expect(lines.count == 3 && lines[1] == "  http://127.0.0.1:8088/api/push" && lines[2] == #"# {"success":"ok","counts":1,"logs":[]}"#, "\(lines)")
        let prefix = "curl -s -d '", suffix = "' \\"
        #expect(lines[0].hasPrefix(prefix) && lines[0].hasSuffix(suffix))
        let body = String(lines[0].dropFirst(prefix.count).dropLast(suffix.count))
        let token = try #require(try JSONValue.parse(body)["notifications"]?.arrayValue?.first?["tokens"]?.arrayValue?.first?.stringValue)
        let shipped = try String(contentsOfFile: PackagePaths.root + "/config.json", encoding: .utf8)
        #expect(shipped.contains(#""gorush": {"listen": "127.0.0.1:8088", "app": "com.example.app"}"#))

        let dir = try TemporaryDirectory(prefix: "herald-shipped")
        defer { dir.remove() }
        let (daemon, simulator, record) = try await serveShipped(in: dir, key: "a-long-enough-test-key")
        defer { simulator.terminate() }
        defer { daemon.terminate() }
        let line = await daemon.waitForLine(containing: "gorush API listening on")
        let gorushPort = try #require(line.flatMap { $0.split(separator: ":").last.flatMap { Int($0) } }, "\(daemon.stderr)")
        let push = try await Run.program("/usr/bin/curl", ["-s", "-d", body, "http://127.0.0.1:\(gorushPort)/api/push"])
        #expect(push.stdout == #"{"success":"ok","counts":1,"logs":[]}"#, "\(push.stdout)\(push.stderr)\(daemon.stderr)")
        let delivered = await eventually(timeout: 30) {
            ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").contains(#""token":"\#(token)""#)
        }
        #expect(delivered, "\(daemon.stderr)")
        let received = (try? String(contentsOfFile: record, encoding: .utf8)) ?? ""
        #expect(received.contains(#""title":"Hello iOS""#) && received.contains(#""body":"Hello World iOS!""#), "\(received)")
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit(timeout: 30) == 0)
    }

    /// Issue 24, "README to the letter": the README's Matrix example works against the shipped
    /// config as written (its `matrix` section, through the `apns` route to the simulator), and
    /// its pushkey is a fresh device, not the demo user's that the README registers first.
    @Test func theREADMEsMatrixExampleWorksAgainstTheShippedConfig() async throws {
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "curl -s -d '{\"notification\""))
        let end = try #require(readme[start.upperBound...].range(of: "' \\\n  http://127.0.0.1:8090/_matrix/push/v1/notify\n# {\"rejected\":[]}"))
        let body = String(readme[readme.index(start.lowerBound, offsetBy: "curl -s -d '".count)..<end.lowerBound])
        let pushkey = try #require(try JSONValue.parse(body)["notification"]?["devices"]?.arrayValue?.first?["pushkey"]?.stringValue)
        let device = try #require(Data(base64Encoded: pushkey)).map { String(format: "%02x", $0) }.joined()
        let demoDevice = String(repeating: "0", count: 63) + "1"
        #expect(readme.contains(#""user":"demo-user","token":"\#(demoDevice)""#))
        #expect(device != demoDevice, "the README's pushkey is the demo user's device")

        let shipped = try String(contentsOfFile: PackagePaths.root + "/config.json", encoding: .utf8)
        #expect(shipped.contains(#""matrix": {"listen": "127.0.0.1:8090""#))
        let dir = try TemporaryDirectory(prefix: "herald-shipped")
        defer { dir.remove() }
        let key = "a-long-enough-test-key"
        let (daemon, simulator, record) = try await serveShipped(in: dir, key: key)
        defer { simulator.terminate() }
        defer { daemon.terminate() }
        func port(_ line: String?) -> Int? { line.flatMap { $0.split(separator: ":").last.flatMap { Int($0) } } }
        let matrixPort = try #require(port(await daemon.waitForLine(containing: "matrix gateway listening on")), "\(daemon.stderr)")
        let apiPort = try #require(port(await daemon.waitForLine(containing: "herald: listening on")), "\(daemon.stderr)")

        // As the README does first: the demo user's device, through the API.
        let registered = try await Run.program("/usr/bin/curl", ["-s", "-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json", "-d",
                                                          #"{"app":"com.example.app","user":"demo-user","token":"\#(demoDevice)"}"#,
                                                          "http://127.0.0.1:\(apiPort)/v1/devices"])
        #expect(registered.stdout.contains(#""change":"created""#), "\(registered.stdout)\(registered.stderr)")
        // The Matrix example, verbatim but for the port.
        let notify = try await Run.program("/usr/bin/curl", ["-s", "-d", body, "http://127.0.0.1:\(matrixPort)/_matrix/push/v1/notify"])
        #expect(notify.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"{"rejected":[]}"#, "\(notify.stdout)\(notify.stderr)")
        let received = await eventually(timeout: 20) {
            ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").contains(#""token":"\#(device)""#)
        }
        #expect(received, "\(daemon.stderr)")
        let lines = ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(lines.count == 1 && !lines.contains { $0.contains(demoDevice) }, "\(lines)")
        #expect(lines.first?.contains(#""mutable-content":1"#) == true)
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit(timeout: 30) == 0)
    }

    /// Issue 24, "README to the letter": the README's "Using the CLI" section, run line by line
    /// as a new user would after `make run` (its two set-up lines first, then every command as
    /// written), against a copy of the shipped config and the simulator.
    @Test func theREADMEsCLISectionRunsAsWritten() async throws {
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "## Using the CLI").dropFirst().first?
            .components(separatedBy: "\n## ").first)
        let blocks = section.components(separatedBy: "```sh\n").dropFirst().map { $0.components(separatedBy: "\n```").first ?? "" }
        #expect(blocks.count == 2)
        let setup = blocks.first ?? "", commands = (blocks.last ?? "").split(separator: "\n").map(String.init)
        #expect(setup.contains("HERALD_API_KEY=$(cat var/api-key)") && setup.contains("HERALD_CLIENT_SECRET=$(cat var/client-secret)"))
        #expect(setup.contains(#"export PATH="$PWD/.build/release:$PATH""#))

        let certs = try TestCertificates.shared()
        let simulator = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey,
            "--auth-key-pub", "ABC123DEFG=\(certs.authKeyPublic)", "--team", "DEF123GHIJ", "--topic", "com.example.app",
        ])
        defer { simulator.terminate() }
        let port = try #require(await simulator.listeningPort())
        let (dir, _) = try await shippedCopy(apnsPort: port)
        defer { dir.remove() }
        try FileManager.default.removeItem(atPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.copyItem(atPath: certs.caFile, toPath: dir.file("var/certs/ca.pem"))
        try FileManager.default.removeItem(atPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        try FileManager.default.copyItem(atPath: certs.authKey, toPath: dir.file("var/certs/AuthKey_ABC123DEFG.p8"))
        // What `make run` leaves behind: the secrets in var/, herald in .build/release.
        _ = try dir.write("var/api-key", "a-long-enough-test-key-0123456789")
        _ = try dir.write("var/client-secret", "a-client-secret-of-32-bytes-or-more-0123")
        for name in ["hms-app-secret", "xiaomi-app-secret", "oppo-master-secret", "vivo-app-secret"] { _ = try dir.write("var/\(name)", "\(name)-0123") }
        try FileManager.default.createDirectory(atPath: dir.file(".build"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: dir.file(".build/release"),
                                                   withDestinationPath: URL(fileURLWithPath: PackagePaths.heraldBinary).deletingLastPathComponent().path)
        var script = "unset HERALD_API_KEY HERALD_CLIENT_SECRET HMS_APP_SECRET XIAOMI_APP_SECRET OPPO_MASTER_SECRET VIVO_APP_SECRET HERALD_CONFIG\n" + setup + "\n"
        for line in commands { script += line + "\necho \"EXIT $?\" >&2\n" }
        let run = try await Run.program("/bin/bash", ["-c", script], directory: dir.path)
        let codes = run.stderr.split(separator: "\n").filter { $0.hasPrefix("EXIT ") }.compactMap { Int32($0.dropFirst(5)) }
        #expect(codes.count == commands.count, "\(run.stderr)")
        for (line, code) in zip(commands, codes) {
            // `herald feedback` needs an apns-binary transport: the sample has none, a configuration error (as the README says).
            let expected: Int32 = line.hasPrefix("herald feedback") ? 3 : 0
            #expect(code == expected, "\(line)\n\(run.stdout)\n\(run.stderr)")
        }
        #expect(run.stdout.contains("configuration OK"))
        #expect(run.stdout.contains("1000 devices: 1000 delivered"), "\(run.stdout)")
        #expect(run.stdout.contains(#""user":"alice","transport":"apns","outcome":"delivered""#), "\(run.stdout)")
    }
}
