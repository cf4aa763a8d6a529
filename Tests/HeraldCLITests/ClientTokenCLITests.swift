import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing

/// `herald client-token`, run as a real process.
@Suite struct ClientTokenCLITests {
    static let secret = "cli-client-secret-0123456789abcdef-xyz"
    static let device = "0123456789abcdef0123456789abcdef"

    struct Fixture {
        let dir: TemporaryDirectory
        let config: String
        init() throws {
            dir = try TemporaryDirectory(prefix: "herald-cli-token")
            config = try dir.write("config.json", """
            {
              "storage": {"path": "var/herald.db"},
              "apps": {"com.example.app": {"routes": ["dry"], "clientSecret": "${CLIENT_SECRET}"},
                       "com.example.other": {"routes": ["dry"]}},
              "transports": {"dry": {"type": "log", "path": "var/deliveries.jsonl"}}
            }
            """)
        }
        func run(_ arguments: [String]) async throws -> ProcessResult {
            try await Run.herald(["client-token"] + arguments + ["--config", config], environment: ["CLIENT_SECRET": ClientTokenCLITests.secret],
                           directory: dir.path)
        }
    }

    @Test func printsATokenThatVerifiesWithTheAppSecret() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        let before = Date()
        let result = try await f.run(["--app", "com.example.app", "--user", "alice", "--device", "<" + Self.device.uppercased() + ">", "--ttl", "15m"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.lines.count == 1)
        #expect(result.stdout.hasSuffix("\n"))
        let token = try #require(result.lines.first)
        let claims = try ClientToken.verify(token, secret: Secret(Self.secret), app: "com.example.app", now: Date())
        #expect(claims.user == "alice")
        #expect(claims.device == Self.device)
        #expect(claims.expiresAt.timeIntervalSince(claims.issuedAt) == 900)
        #expect(claims.issuedAt.timeIntervalSince1970 >= before.timeIntervalSince1970.rounded(.down))
        // Not valid for another app, nor under another secret.
        #expect(throws: ClientTokenError.self) { try ClientToken.verify(token, secret: Secret(Self.secret), app: "com.example.other", now: Date()) }
        #expect(throws: ClientTokenError.badSignature) {
            try ClientToken.verify(token, secret: Secret(Self.secret + "!"), app: "com.example.app", now: Date())
        }
    }

    @Test func ttlUnitsAndDefault() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        for (ttl, seconds) in [("90s", 90.0), ("1h", 3600), ("7d", 604_800), ("120", 120), (nil, 3600)] as [(String?, Double)] {
            var arguments = ["--app", "com.example.app", "--user", "u", "--device", Self.device]
            if let ttl { arguments += ["--ttl", ttl] }
            let result = try await f.run(arguments)
            #expect(result.status == 0, "\(ttl ?? "default"): \(result.stderr)")
            let claims = try ClientToken.verify(result.lines.first ?? "", secret: Secret(Self.secret), app: "com.example.app", now: Date())
            #expect(claims.expiresAt.timeIntervalSince(claims.issuedAt) == seconds, "\(ttl ?? "default")")
        }
    }

    @Test func clearErrors() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        let unknown = try await f.run(["--app", "com.example.ap", "--user", "u", "--device", Self.device])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("herald client-token: --app: unknown app \"com.example.ap\"; configured: com.example.app, com.example.other"))
        #expect(unknown.stdout.isEmpty)

        let noSecret = try await f.run(["--app", "com.example.other", "--user", "u", "--device", Self.device])
        #expect(noSecret.status == 3)
        #expect(noSecret.stderr.contains("app com.example.other has no clientSecret, so it cannot have client tokens"))

        let badDevice = try await f.run(["--app", "com.example.app", "--user", "u", "--device", "xyz"])
        #expect(badDevice.status == 2)
        #expect(badDevice.stderr.contains("herald client-token: --device: device token has a character that is not hexadecimal: \"x\""))

        let badTTL = try await f.run(["--app", "com.example.app", "--user", "u", "--device", Self.device, "--ttl", "soon"])
        #expect(badTTL.status == 2)
        #expect(badTTL.stderr.contains("--ttl: expected a duration such as 90s, 15m, 1h or 7d, found \"soon\""))
        let tooLong = try await f.run(["--app", "com.example.app", "--user", "u", "--device", Self.device, "--ttl", "31d"])
        #expect(tooLong.status == 2)
        #expect(tooLong.stderr.contains("--ttl: must be between 1 second and 30 days"))

        let missing = try await f.run(["--app", "com.example.app", "--device", Self.device])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("--user is required"))
        for result in [unknown, noSecret, badDevice, badTTL, tooLong, missing] {
            #expect(!result.stderr.contains(Self.secret))
        }
    }

    @Test func checkRedactsTheClientSecret() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        let check = try await Run.herald(["check", "--config", f.config], environment: ["CLIENT_SECRET": Self.secret], directory: f.dir.path)
        #expect(check.status == 0, "\(check.stderr)")
        #expect(check.stdout.contains("com.example.app: topic=com.example.app routes=dry foreground=push-only maxDevicesPerUser=100 maxRegisteredDevicesPerUser=100 clientSecret=<redacted>"))
        #expect(check.stdout.contains("streams: heartbeat=15.0s maxStreams=10000 bufferBytes=65536 demo=false"))
        #expect(!check.stdout.contains(Self.secret) && !check.stderr.contains(Self.secret))
    }

    @Test func helpAndMainHelpListIt() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        let help = try await Run.herald(["client-token", "--help"], directory: f.dir.path)
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: herald client-token --app APP --user USER --device ID [--ttl 1h] [--config PATH]"))
        #expect(help.stdout.contains("--ttl DURATION"))
        let main = try await Run.herald(["--help"], directory: f.dir.path)
        #expect(main.stdout.contains("  client-token "))
    }

    /// Issue 24, item 13: the CLI mints under the rule the API and the stream apply.
    @Test func aDeviceOfAnotherUserIsRefused() async throws {
        let f = try Fixture()
        defer { f.dir.remove() }
        let add = try await Run.herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", Self.device, "--config", f.config],
                                 environment: ["CLIENT_SECRET": Self.secret], directory: f.dir.path)
        #expect(add.status == 0, "\(add.stderr)")
        let mallory = try await f.run(["--app", "com.example.app", "--user", "mallory", "--device", Self.device])
        #expect(mallory.status == 2)
        #expect(mallory.stdout.isEmpty)
        #expect(mallory.stderr.contains("herald client-token: --device: device 01234567…cdef belongs to another user")
                || mallory.stderr.contains("belongs to another user"), "\(mallory.stderr)")
        #expect(try await f.run(["--app", "com.example.app", "--user", "alice", "--device", Self.device]).status == 0)
    }
}
