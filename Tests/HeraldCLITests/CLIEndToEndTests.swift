import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// The built `herald` binary, run as a real process in a temporary folder.
struct CLIFixture {
    let dir: TemporaryDirectory
    let config: String
    let env = ["HERALD_API_KEY": "cli-test-key-0123456789"]

    init(extraTransports: String = "", routes: String = #"["dry"]"#) throws {
        dir = try TemporaryDirectory(prefix: "herald-cli")
        config = try dir.write("config.json", """
        {
          "storage": {"path": "var/herald.db"},
          "apps": {"com.example.app": {"routes": \(routes), "maxDevicesPerUser": 2},
                   "com.example.other": {"routes": ["dry"]}},
          "transports": {"dry": {"type": "log", "path": "var/deliveries.jsonl"}\(extraTransports)},
          "api": {"keys": [{"id": "backend", "secret": "${HERALD_API_KEY}", "scopes": ["send"]}]},
          "log": {"level": "info"}
        }
        """)
    }

    func run(_ arguments: [String], stdin: String? = nil) async throws -> ProcessResult {
        try await Run.herald(arguments + ["--config", config], environment: env, directory: dir.path, stdin: stdin)
    }

    func token(_ n: Int) -> String { String(format: "%064x", n) }

    var deliveries: [JSONValue] {
        get throws {
            let text = (try? String(contentsOfFile: dir.file("var/deliveries.jsonl"), encoding: .utf8)) ?? ""
            return try text.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        }
    }
}

@Suite(.serialized) struct CLIEndToEndTests {
    @Test func devicesAddThenSendThroughTheLogTransport() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        #expect(try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", "<\(f.token(1).uppercased())>"]).status == 0)
        let second = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(2), "--json"])
        #expect(second.status == 0)
        #expect(try JSONValue.parse(second.stdout)["change"]?.stringValue == "created")
        #expect(try await f.run(["devices", "add", "--app", "com.example.app", "--user", "bob", "--token", f.token(3)]).status == 0)

        let send = try await f.run(["send", "--app", "com.example.app", "--user", "alice", "--user", "bob", "--token", f.token(9),
                              "--title", "Hi", "--body", "There", "--badge", "1", "--data", #"{"order":42}"#, "--json"])
        #expect(send.status == 0, "\(send.stderr)")
        let lines = try send.lines.map { try JSONValue.parse($0) }
        #expect(lines.count == 4)
        for line in lines {
            #expect(line["outcome"]?.stringValue == "delivered")
            #expect(line["transport"]?.stringValue == "dry")
            #expect(line["reason"]?.stringValue?.hasPrefix("written to ") == true)
        }
        #expect(Set(lines.compactMap { $0["token"]?.stringValue }) == Set([1, 2, 3, 9].map(f.token)))
        #expect(lines.first { $0["token"]?.stringValue == f.token(9) }?["user"] == .null)
        #expect(lines.first { $0["token"]?.stringValue == f.token(3) }?["user"]?.stringValue == "bob")

        let written = try f.deliveries
        #expect(written.count == 4)
        #expect(Set(written.compactMap { $0["token"]?.stringValue }) == Set([1, 2, 3, 9].map(f.token)))
        // One notification: every payload carries its id as herald_id beside aps.
        let ids = Set(written.compactMap { $0["payload"]?["herald_id"]?.stringValue })
        #expect(ids.count == 1 && ids.allSatisfy { UUID(uuidString: $0) != nil && $0 == $0.lowercased() }, "\(ids)")
        for record in written {
            #expect(record["payload"] == ["aps": ["alert": ["title": "Hi", "body": "There"], "badge": 1], "herald_id": .string(ids.first ?? ""), "order": 42])
            #expect(record["headers"]?["apns-topic"]?.stringValue == "com.example.app")
            // The message id reported (and its deprecated apns_id spelling) is the one written.
            let reported = lines.first { $0["token"] == record["token"] }
            #expect(record["headers"]?["apns-id"] == reported?["message_id"] && reported?["apns_id"] == reported?["message_id"])
        }
    }

    @Test func tokensFileIsTheBulkPath() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let file = try f.dir.write("tokens.txt", "# campaign\n" + (1...300).map { f.token($0) }.joined(separator: "\n") + "\n\nnot-hex\n")
        let result = try await f.run(["send", "--app", "com.example.app", "--tokens-file", file, "--alert", "Sale!"])
        #expect(result.status == 1)  // one line was not a token: reported, and the exit code says not everything was delivered
        #expect(result.stdout.contains("301 devices: 300 delivered, 1 rejected"))
        #expect(try f.deliveries.count == 300)
    }

    @Test func devicesListAndRemove() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        _ = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(1)])
        _ = try await f.run(["devices", "add", "--app", "com.example.other", "--user", "alice", "--token", f.token(2), "--environment", "sandbox"])
        let list = try await f.run(["devices", "list", "--user", "alice", "--json"])
        let devices = try list.lines.map { try JSONValue.parse($0) }
        #expect(devices.count == 2)
        #expect(devices.first { $0["app"]?.stringValue == "com.example.other" }?["environment"]?.stringValue == "sandbox")
        #expect(devices.allSatisfy { $0["invalidated_at"] == .null })
        let table = try await f.run(["devices", "list", "--app", "com.example.app"])
        #expect(table.stdout.contains(f.token(1)) && !table.stdout.contains(f.token(2)))
        #expect(table.stdout.hasPrefix("APP"))
        #expect(try await f.run(["devices", "remove", "--app", "com.example.app", "--token", f.token(1)]).status == 0)
        let again = try await f.run(["devices", "remove", "--app", "com.example.app", "--token", f.token(1)])
        #expect(again.status == 1)
        #expect(again.stderr.contains("no device 00000000… in app com.example.app"))
    }

    @Test func checkPrintsASummaryAndExitsZero() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let result = try await f.run(["check"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("com.example.app: topic=com.example.app routes=dry"))
        #expect(result.stdout.contains("dry: log \(f.dir.path)/var/deliveries.jsonl"))
        #expect(result.stdout.contains("configuration OK"))
        #expect(!result.stdout.contains("cli-test-key"))
    }

    @Test func brokenConfigListsEveryErrorAndExitsThree() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-cli")
        defer { dir.remove() }
        let config = try dir.write("broken.json", """
        {"apps": {"a": {"routes": ["apnz"], "foreground": "never"}},
         "transports": {"apns": {"type": "apns-h3"}, "dry": {"type": "log", "paht": "x"}},
         "api": {"keys": [{"id": "k", "secret": "${HERALD_TEST_UNSET_VARIABLE}", "scopes": ["send"]}]}}
        """)
        let result = try await Run.herald(["check", "--config", config], directory: dir.path)
        #expect(result.status == 3)
        let expected = [
            "\(config): transports.apns.type: unknown transport type \"apns-h3\"; known: ",
            "\(config): apps.a.routes[0]: unknown transport \"apnz\"; defined: apns, dry",
            "\(config): apps.a.foreground: unknown value \"never\"; expected one of: push-only, local-first, local-and-push, local-only",
            "\(config): api.keys[0].secret: environment variable HERALD_TEST_UNSET_VARIABLE is not set",
            "\(config): warning: transports.dry.paht: unknown key, ignored; did you mean \"path\"?",
            "herald: the configuration has 4 errors",
        ]
        for line in expected { #expect(result.stderr.contains(line), "missing \(line) in:\n\(result.stderr)") }
        #expect(result.stdout.isEmpty)
    }

    @Test func usageErrorsExitTwoAndPointToHelp() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let unknown = try await f.run(["send", "--app", "com.example.app", "--usr", "alice", "--alert", "x"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("herald send: unknown option --usr; did you mean --user?"))
        #expect(unknown.stderr.contains("See 'herald send --help'."))
        let app = try await f.run(["send", "--app", "com.example.ap", "--user", "a", "--alert", "x"])
        #expect(app.status == 2)
        #expect(app.stderr.contains("--app: unknown app \"com.example.ap\"; configured: com.example.app, com.example.other"))
        _ = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "a", "--token", String(repeating: "ab", count: 32)])
        let priority = try await f.run(["send", "--app", "com.example.app", "--user", "a", "--alert", "x", "--priority", "7"])
        #expect(priority.status == 2)
        #expect(priority.stderr.contains("--priority: route dry (log): apns.priority: must be 10, 5 or 1, found 7"), "\(priority.stderr)")
        let token = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "a", "--token", "xyz"])
        #expect(token.status == 2)
        #expect(token.stderr.contains("--token: device token has a character that is not hexadecimal: \"x\""))
        let command = try await Run.herald(["sned"])
        #expect(command.status == 2 && command.stderr.contains("did you mean \"send\"?"))
        let nothing = try await f.run(["send", "--app", "com.example.app", "--user", "a"])
        #expect(nothing.status == 2 && nothing.stderr.contains("nothing to send"))
        let bare = try await Run.herald([])
        #expect(bare.status == 2 && bare.stdout.isEmpty && bare.stderr.contains("Usage: herald <command>"))
        let group = try await Run.herald(["devices", "--help"])
        #expect(group.status == 0 && group.stderr.isEmpty && group.stdout.contains("herald devices add"))
    }

    /// Issue 24: an exit code means one thing for every command (0 done, 1 some work failed,
    /// 2 usage or input, 3 configuration or set-up).
    @Test func exitCodesMeanOneThingAcrossCommands() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        // 0: everything delivered.
        #expect(try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(1)]).status == 0)
        #expect(try await f.run(["send", "--app", "com.example.app", "--user", "alice", "--alert", "x"]).status == 0)
        // 1: the send ran, and every delivery was rejected (tokens from a file are data, reported per device).
        let file = try f.dir.write("bad.txt", "xyz\nnot-a-token\n")
        let rejected = try await f.run(["send", "--app", "com.example.app", "--tokens-file", file, "--alert", "x", "--json"])
        #expect(rejected.status == 1, "\(rejected.stdout)\(rejected.stderr)")
        #expect(rejected.lines.count == 2 && rejected.lines.allSatisfy { $0.contains(#""outcome":"rejected""#) }, "\(rejected.stdout)")
        #expect(rejected.stderr.contains("herald: 2 of 2 devices not delivered (2 rejected)"), "\(rejected.stderr)")
        let some = try await f.run(["send", "--app", "com.example.app", "--user", "alice", "--tokens-file", file, "--alert", "x"])
        #expect(some.status == 1)
        #expect(some.stderr.contains("herald: 2 of 3 devices not delivered (2 rejected)"), "\(some.stderr)")
        // 2: the same bad token on the command line is an input error, for send as for devices add.
        let sendToken = try await f.run(["send", "--app", "com.example.app", "--token", "xyz", "--alert", "x"])
        let addToken = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "a", "--token", "xyz"])
        #expect(sendToken.status == 2 && addToken.status == 2)
        #expect(sendToken.stderr.contains("herald send: --token: device token has a character that is not hexadecimal: \"x\""), "\(sendToken.stderr)")
        let longUser = try await f.run(["devices", "add", "--app", "com.example.app", "--user", String(repeating: "u", count: 257), "--token", f.token(2)])
        #expect(longUser.status == 2 && longUser.stderr.contains("--user: must be at most 256 bytes, found 257"), "\(longUser.stderr)")
        // 1: a device that is not there.
        #expect(try await f.run(["devices", "remove", "--app", "com.example.app", "--token", f.token(7)]).status == 1)
        // 3: a configuration that cannot be used, for every command that reads it.
        try "{\"storge\": {}}".write(toFile: f.config, atomically: true, encoding: .utf8)
        for command in [["check"], ["devices", "list"], ["send", "--app", "com.example.app", "--user", "a", "--alert", "x"],
                        ["client-token", "--app", "com.example.app", "--user", "a", "--device", f.token(1)], ["serve"]] {
            let r = try await f.run(command)
            #expect(r.status == 3, "\(command): \(r.stderr)")
            #expect(r.stderr.contains("storge: unknown top-level key; did you mean \"storage\"?"), "\(command): \(r.stderr)")
        }
        // The codes are in --help.
        let help = try await Run.herald(["--help"])
        #expect(help.stdout.contains("Exit codes (the same for every command):"))
        #expect(help.stdout.contains("3  configuration or set-up error"))
    }

    @Test func helpForEveryCommand() async throws {
        let top = try await Run.herald(["--help"])
        #expect(top.status == 0)
        for command in ["check", "devices add", "devices list", "devices remove", "send", "prune"] {
            #expect(top.stdout.contains("  \(command)"))
            let help = try await Run.herald(command.split(separator: " ").map(String.init) + ["--help"])
            #expect(help.status == 0, "\(command)")
            #expect(help.stdout.contains("Usage: herald \(command)"))
            #expect(help.stdout.contains("--config PATH"))
        }
        let send = try await Run.herald(["send", "--help"])
        #expect(send.stdout.contains("--tokens-file FILE"))
        #expect(send.stdout.contains("--user USER") && send.stdout.contains("(repeatable)"))
    }

    @Test func configFromTheEnvironmentVariable() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let result = try await Run.herald(["check", "--quiet"], environment: f.env.merging(["HERALD_CONFIG": f.config]) { $1 },
                                    directory: "/")
        #expect(result.status == 0)
        #expect(result.stdout.isEmpty)
        let empty = try TemporaryDirectory(prefix: "herald-empty")
        defer { empty.remove() }
        let missing = try await Run.herald(["check"], environment: ["HERALD_CONFIG": ""], directory: empty.path)
        #expect(missing.status == 3)
        #expect(missing.stderr.contains("config.json: no such file"), "\(missing.stderr)")
        // Where Herald looked and the two ways to name another file.
        #expect(missing.stderr.contains("herald: no configuration file at config.json; give its path with --config PATH, or set HERALD_CONFIG"),
                "\(missing.stderr)")
    }

    @Test func pruneDeletesOldInvalidDevices() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        _ = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(3)])
        // Registered a week ago; Apple reported token 1 dead three days ago and token 2 just now; token 3 is alive.
        do {
            let store = try SQLiteTokenStore(path: f.dir.file("var/herald.db"))
            for n in 1...2 {
                let registration = DeviceRegistration(app: "com.example.app", token: f.token(n), user: "alice", transport: "dry", environment: .production)
                _ = try await store.register(registration, at: Date().addingTimeInterval(-7 * 86_400))
            }
            _ = try await store.invalidate(app: "com.example.app", token: f.token(1), at: Date().addingTimeInterval(-3 * 86_400), reason: "Unregistered")
            _ = try await store.invalidate(app: "com.example.app", token: f.token(2), at: Date(), reason: "Unregistered")
        }

        let result = try await f.run(["prune", "--older-than", "1"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("pruned 1 device"), "\(result.stdout)")
        let list = try await f.run(["devices", "list", "--app", "com.example.app", "--user", "alice"])
        #expect(!list.stdout.contains(f.token(1)))
        #expect(list.stdout.contains(f.token(2)) && list.stdout.contains(f.token(3)), "\(list.stdout)")
    }

    @Test func dryRunPlansWithoutSending() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        for n in 1...3 { _ = try await f.run(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", f.token(n)]) }
        let result = try await f.run(["send", "--app", "com.example.app", "--user", "alice", "--alert", "x", "--dry-run"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("2 deliveries planned, 0 refused, 1 over the per-user limit, 0 duplicates"))
        #expect(try f.deliveries.isEmpty)
    }
}

@Suite struct ProgressBarTests {
    /// On a terminal (a pseudo-terminal made by `script`), the bulk send draws a progress bar
    /// on stderr; piped, it does not.
    @Test func progressBarOnATerminalOnly() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let file = try f.dir.write("tokens.txt", (1...200).map { f.token($0) }.joined(separator: "\n"))
        let command = "\(PackagePaths.heraldBinary) send --config \(f.config) --app com.example.app --tokens-file \(file) --alert hi"
        let onTerminal = try await Run.program("/usr/bin/script", ["-qec", command, "/dev/null"], environment: f.env)
        #expect(onTerminal.status == 0, "\(onTerminal.stdout)")
        #expect(onTerminal.stdout.contains("] 200/200"), "\(onTerminal.stdout)")
        #expect(onTerminal.stdout.contains("delivered 200"))
        let piped = try await f.run(["send", "--app", "com.example.app", "--tokens-file", file, "--alert", "hi"])
        #expect(!piped.stderr.contains("200/200"))
        #expect(piped.stdout.contains("200 devices: 200 delivered"))
    }
}
