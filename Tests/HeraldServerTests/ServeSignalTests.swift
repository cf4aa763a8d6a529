import Foundation
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// `herald serve` as a child process, driven by real signals: SIGHUP reloads, SIGINT and
/// SIGTERM stop it cleanly (exit 0) and answer what is in flight first.
@Suite(.serialized) struct ServeSignalTests {
    static let key = "signal-test-key-0123456789"
    static let secondKey = "second-signal-key-0123456789"

    /// A configuration with the `log` transport `dry` (or `transports` and `routes` given), one
    /// key from `$HERALD_API_KEY`, and `keys` more.
    static func config(transports: String = #"{"dry": {"type": "log", "path": "deliveries.jsonl"}}"#, routes: String = #"["dry"]"#,
                       keys: String = "") -> String {
        """
        {
          "storage": {"path": "herald.db", "busyTimeout": "60s"},
          "apps": {"com.example.app": {"routes": \(routes)}},
          "transports": \(transports),
          "api": {"listen": "127.0.0.1:0",
                  "keys": [{"id": "first", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}\(keys)]},
          "server": {"batchLinger": 0, "shutdownDeadline": "30s"},
          "log": {"level": "info"}
        }
        """
    }

    /// Starts `herald serve` in `dir` (config.json already written) without waiting for it.
    static func launch(_ dir: TemporaryDirectory) throws -> ChildProcess {
        try ChildProcess.herald(["serve", "--config", dir.file("config.json")], environment: ["HERALD_API_KEY": key],
                                directory: dir.path)
    }

    static func port(of child: ChildProcess) async throws -> Int {
        guard let port = await child.listeningPort(timeout: 60) else {
            throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
        }
        return port
    }

    /// Waits (real time) for a line of standard error containing `text`.
    static func stderr(of child: ChildProcess, contains text: String) async -> Bool {
        await eventually(timeout: 60) { child.stderr.contains(text) }
    }

    /// Another connection to the daemon's database holding its write lock until ``release()``:
    /// the daemon's writes wait (up to `storage.busyTimeout`) meanwhile.
    final class WriteLock {
        let db: SQLiteDatabase
        init(_ path: String) throws {
            db = try SQLiteDatabase(path: path)
            try db.execute("BEGIN IMMEDIATE", operation: "hold the write lock")
        }
        func release() throws { try db.execute("COMMIT", operation: "release the write lock") }
    }

    @Test(.timeLimit(.minutes(2))) func signalsDuringStartAreHandledNotFatal() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-signal-start")
        defer { dir.remove() }
        try dir.write("config.json", Self.config())
        // The daemon waits for this lock while it opens its store, inside Daemon.start().
        let lock = try WriteLock(dir.file("herald.db"))
        let child = try Self.launch(dir)
        defer { child.terminate() }
        let pidFile = dir.file("herald.db.daemon.lock")
        #expect(await eventually(timeout: 60) { ((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").contains("\(child.pid)") })
        child.signal(SIGHUP)
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(child.isRunning, "SIGHUP while starting killed the daemon: \(child.stderr)")
        try lock.release()
        let port = try await Self.port(of: child)
        #expect(await Self.stderr(of: child, contains: "msg=\"SIGHUP: reloading the configuration\""))
        #expect(await Self.stderr(of: child, contains: "msg=\"configuration reloaded\""))
        #expect(try await HTTPTestClient(port: port).get("/healthz").status == 200)
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
    }

    /// Runs with each apns-http2 engine.
    @Test(.timeLimit(.minutes(2)), arguments: ["curl", "nghttp2"]) func sighupAddsAKeyAndKeepsTheAPNsConnection(engine: String) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let dir = try TemporaryDirectory(prefix: "herald-sighup")
        defer { dir.remove() }
        let transports = """
            {"apns": {"type": "apns-http2", "engine": "\(engine)", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                      "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"}}
            """
        try dir.write("config.json", Self.config(transports: transports, routes: #"["apns"]"#))
        let child = try Self.launch(dir)
        defer { child.terminate() }
        let port = try await Self.port(of: child)
        let first = HTTPTestClient(port: port, key: Self.key), second = HTTPTestClient(port: port, key: Self.secondKey)
        let token = String(repeating: "ab", count: 32)
        #expect(try await first.post("/v1/devices", #"{"app":"com.example.app","user":"alice","token":"\#(token)"}"#).status == 201)
        let send = #"{"app":"com.example.app","users":["alice"],"alert":"hi"}"#
        #expect(try await first.post("/v1/notifications", send).status == 202)
        #expect(await apns.simulator.waitForNotifications(count: 1) != nil)
        #expect(apns.simulator.counters.connections == 1)
        #expect(try await second.get("/metrics").status == 401)

        // Add a second key to the file and reload it.
        try dir.write("config.json", Self.config(transports: transports, routes: #"["apns"]"#,
                                                 keys: #", {"id": "second", "secret": "\#(Self.secondKey)", "scopes": ["admin"]}"#))
        child.signal(SIGHUP)
        #expect(await Self.stderr(of: child, contains: "msg=\"configuration reloaded\""))
        let reloaded = child.stderr.split(separator: "\n").first { $0.contains("msg=\"configuration reloaded\"") } ?? ""
        #expect(reloaded.contains(#"changed="""#) && reloaded.contains("keys=2"), "\(reloaded)")
        let metrics = try await second.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.text.contains(#"herald_apns_connections{transport="apns"} 1"#), "\(metrics.text)")
        #expect(try await second.post("/v1/notifications", send).status == 202)
        #expect(await apns.simulator.waitForNotifications(count: 2) != nil)
        // The unchanged transport kept its connection: the simulator saw no second one.
        #expect(apns.simulator.counters.connections == 1, "\(apns.simulator.counters.summary)")
        #expect(!child.stderr.contains("transport retired after reload"))
        #expect(try await first.get("/metrics").text.contains(#"herald_apns_connections{transport="apns"} 1"#))
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func sigintStopsCleanlyWithExitZero() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-sigint")
        defer { dir.remove() }
        try dir.write("config.json", Self.config())
        let child = try Self.launch(dir)
        defer { child.terminate() }
        let port = try await Self.port(of: child)
        #expect(try await HTTPTestClient(port: port, key: Self.key).get("/metrics").status == 200)
        child.signal(SIGINT)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
        #expect(child.stderr.contains("msg=\"SIGINT: stopping\""))
        #expect(child.stderr.contains("msg=stopped clean=true"), "\(child.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func sigtermAnswersTheRequestInFlightBeforeExiting() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-sigterm")
        defer { dir.remove() }
        try dir.write("config.json", Self.config())
        let child = try Self.launch(dir)
        defer { child.terminate() }
        let client = HTTPTestClient(port: try await Self.port(of: child), key: Self.key)

        // The accept waits for the group commit, which waits for this lock.
        let lock = try WriteLock(dir.file("herald.db"))
        let body = #"{"app":"com.example.app","tokens":["\#(String(repeating: "cd", count: 32))"],"alert":"in flight"}"#
        let inFlight = Task { try await client.post("/v1/notifications", body) }
        #expect(await eventually { (try? await client.get("/metrics").text.contains("herald_http_requests_in_flight 1")) == true })
        child.signal(SIGTERM)
        #expect(await Self.stderr(of: child, contains: "msg=\"shutting down\""))
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(child.isRunning, "the daemon must wait for the request in flight: \(child.stderr)")
        try lock.release()

        let answer = try await inFlight.value
        #expect(answer.status == 202, "\(answer)")
        let id = try #require(answer.json?["id"]?.stringValue)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
        #expect(child.stderr.contains("msg=stopped clean=true"), "\(child.stderr)")
        // Accepted means committed: the notification and its delivery are in the file.
        let stored = try lock.db.withStatement("""
            SELECT count(*) FROM deliveries JOIN notifications ON deliveries.notification = notifications.seq WHERE notifications.id = ?
            """) { s in
            s.bind(1, id)
            return try s.step() ? s.int64(0) : 0
        }
        #expect(stored == 1)
    }
}
