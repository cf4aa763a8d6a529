import Foundation
import HeraldAPNs
import HeraldCore

/// A PostgreSQL server for tests (Debian's `postgresql` package): one per test process, started
/// on first use on a free port on 127.0.0.1 in a `mktemp`'d folder under /tmp, shared by every
/// suite, stopped (`pg_ctl -m fast stop`) when the process exits. Each test takes a fresh
/// database from ``createDatabase()``.
///
/// PostgreSQL refuses to run as root: as root, `initdb` and `pg_ctl` run as the `postgres` user
/// (`runuser`), with the folder chowned to it.
public final class PostgresServer: Sendable {
    /// The server's port on 127.0.0.1.
    public let port: Int
    /// The folder holding the data directory, the socket and the server log.
    public let folder: String
    private let bin: String
    private let data: String

    /// The shared server, started on the first call.
    public static func shared() async throws -> PostgresServer { try await offPool { try started.get() } }

    /// A server of its own (for a test that stops it), stopped when the process exits.
    public static func startPrivate() async throws -> PostgresServer { try await offPool { try PostgresServer() } }

    /// Runs `body` on a thread of its own: the server's commands wait on child processes, which
    /// must not hold one of the few threads of Swift's pool that the daemons under test need.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }

    private static let started: Result<PostgresServer, TestSetupError> = {
        do throws(TestSetupError) { return .success(try PostgresServer()) } catch { return .failure(error) }
    }()

    private init() throws(TestSetupError) {
        guard let bin = Self.binaries() else {
            throw TestSetupError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl): run scripts/bootstrap.sh (apt package postgresql)")
        }
        self.bin = bin
        var template = Array("/tmp/herald-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestSetupError("mkdtemp under /tmp failed: \(String(cString: strerror(errno)))") }
        folder = String(cString: made)
        data = folder + "/data"
        if getuid() == 0 {
            guard let pw = getpwnam("postgres") else { throw TestSetupError("no user \"postgres\": install the postgresql package (scripts/bootstrap.sh)") }
            chown(folder, pw.pointee.pw_uid, pw.pointee.pw_gid)
        }
        let initdb = try Self.asOwner(["\(bin)/initdb", "-D", data, "-A", "trust", "-U", "herald", "--no-sync"])
        guard initdb.status == 0 else { throw TestSetupError("initdb failed: \(initdb.stderr)") }
        var port = 0
        for _ in 0..<5 {
            port = try Self.freePort()
            let start = try Self.asOwner(["\(bin)/pg_ctl", "-D", data, "-l", folder + "/server.log", "-w", "-t", "60", "-o",
                                          "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", "start"])
            if start.status == 0 { break }
            port = 0
        }
        guard port != 0 else {
            let log = (try? String(contentsOfFile: folder + "/server.log", encoding: .utf8)) ?? ""
            throw TestSetupError("pg_ctl start failed: \(log.suffix(2000))")
        }
        self.port = port
        PostgresServerShutdown.register(stop: Self.command(["\(bin)/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]), folder: folder)
    }

    /// A new empty database; returns its connection URI (user `herald`, no password).
    public func createDatabase() async throws -> String {
        try await Self.offPool { try self.createDatabaseBlocking() }
    }

    private func createDatabaseBlocking() throws -> String {
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let r = try Self.shell(["\(bin)/psql", "-h", "127.0.0.1", "-p", String(port), "-U", "herald", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
                                "-c", "CREATE DATABASE \(name)"])
        guard r.status == 0 else { throw TestSetupError("CREATE DATABASE failed: \(r.stderr)") }
        return url(database: String(name))
    }

    /// The URI of `database` on this server.
    public func url(database: String) -> String { "postgresql://herald@127.0.0.1:\(port)/\(database)" }

    /// Runs SQL with psql against `database`; returns stdout (unaligned, tuples only). Bounded:
    /// psql is killed after a minute (a test then fails rather than hangs).
    public func query(_ database: String, _ sql: String) async throws -> String {
        try await Self.offPool { try self.queryBlocking(database, sql) }
    }

    private func queryBlocking(_ database: String, _ sql: String) throws -> String {
        let r = try Self.shell(["/usr/bin/timeout", "-k", "5", "60", "\(bin)/psql", "-h", "127.0.0.1", "-p", String(port), "-U", "herald", "-d", database, "-At",
                                "-v", "ON_ERROR_STOP=1", "-c", sql])
        guard r.status == 0 else { throw TestSetupError("psql failed: \(r.stdout)") }
        return r.stdout
    }

    /// Stops the server (fast shutdown: connections are cut), for tests of the database going away.
    public func stop() async throws {
        try await Self.offPool { try self.stopBlocking() }
    }

    private func stopBlocking() throws {
        let r = try Self.asOwner(["\(bin)/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"])
        guard r.status == 0 else { throw TestSetupError("pg_ctl stop failed: \(r.stderr)") }
    }

    /// Starts the server again on the same port after ``stop()``.
    public func restart() async throws {
        try await Self.offPool { try self.restartBlocking() }
    }

    private func restartBlocking() throws {
        let r = try Self.asOwner(["\(bin)/pg_ctl", "-D", data, "-l", folder + "/server.log", "-w", "-t", "60", "-o",
                                  "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", "start"])
        guard r.status == 0 else { throw TestSetupError("pg_ctl start failed: \(r.stderr)") }
    }

    private static func binaries() -> String? {
        let base = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []).compactMap(Int.init).sorted()
        for v in versions.reversed() where FileManager.default.isExecutableFile(atPath: "\(base)/\(v)/bin/pg_ctl") {
            return "\(base)/\(v)/bin"
        }
        return nil
    }

    /// `arguments` as the data directory's owner: `runuser -u postgres --` when root.
    private static func command(_ arguments: [String]) -> [String] {
        getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + arguments : arguments
    }

    /// Runs `arguments` as the data directory's owner through `system()`, output to a file: a
    /// pipe would never reach end-of-file, since the server `pg_ctl` starts inherits it.
    private static func asOwner(_ arguments: [String]) throws(TestSetupError) -> ProcessResult {
        try shell(command(arguments))
    }

    /// Runs `c` through `system()` with its output (stdout and stderr together) in a file: no
    /// pipes and no Dispatch threads, which a starved pool could not serve.
    private static func shell(_ c: [String]) throws(TestSetupError) -> ProcessResult {
        let out = "/tmp/herald-pg-cmd-\(getpid())-\(UUID().uuidString.prefix(8)).out"
        defer { unlink(out) }
        let quoted = c.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let status = system("cd /tmp && \(quoted) </dev/null >\(out) 2>&1")
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        guard status != -1 else { throw TestSetupError("cannot run \(c[0]): \(String(cString: strerror(errno)))") }
        return ProcessResult(status: (status >> 8) & 0xff, stdout: text, stderr: text)
    }

    private static func freePort() throws(TestSetupError) -> Int {
        do { return try Loopback.freePort() } catch { throw TestSetupError(error.description) }
    }
}

/// Stops the shared server when the test process exits (`atexit`), whatever the tests did.
private enum PostgresServerShutdown {
    static let servers = Locked<[(stop: [String], folder: String)]>([])

    static func register(stop: [String], folder: String) {
        let first = servers.withLock { s in
            s.append((stop, folder))
            return s.count == 1
        }
        guard first else { return }
        atexit {
            for s in PostgresServerShutdown.servers.withLock({ $0 }) {
                let quoted = s.stop.map { "'\($0)'" }.joined(separator: " ")
                _ = system("cd /tmp && \(quoted) </dev/null >/dev/null 2>&1")
                try? FileManager.default.removeItem(atPath: s.folder)
            }
        }
    }
}
