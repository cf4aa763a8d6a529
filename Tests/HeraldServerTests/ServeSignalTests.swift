import Foundation
import HeraldCore
import HeraldStore
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
}
