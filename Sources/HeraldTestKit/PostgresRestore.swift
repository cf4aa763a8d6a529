import Foundation
import HeraldCore

extension PostgresServer {
    /// Loads a plain SQL dump (`pg_dump` output, such as an upgrade fixture) into `database`
    /// (a name from ``createDatabase()``'s URI) with `psql -f`, in one transaction, stopping at
    /// the first error. Bounded: psql is killed after a minute.
    /// - Throws: ``TestSetupError`` with psql's output when a statement fails.
    public func restore(dump: String, into database: String) throws(TestSetupError) {
        guard let psql = Self.psqlBinary() else {
            throw TestSetupError("no /usr/lib/postgresql/*/bin/psql: run scripts/bootstrap.sh (apt package postgresql)")
        }
        guard FileManager.default.isReadableFile(atPath: dump) else { throw TestSetupError("cannot read the dump \(dump)") }
        // Through system() with the output in a file, as the server's own commands: no pipes and
        // no Dispatch threads, which a starved pool could not serve.
        let out = "/tmp/herald-pg-restore-\(getpid())-\(UUID().uuidString.prefix(8)).out"
        defer { unlink(out) }
        let arguments = ["/usr/bin/timeout", "-k", "5", "60", psql, "-h", "127.0.0.1", "-p", String(port), "-U", "herald",
                         "-d", database, "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f", dump]
        let quoted = arguments.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let status = system("cd /tmp && \(quoted) </dev/null >\(out) 2>&1")
        let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        guard status != -1 else { throw TestSetupError("cannot run psql: \(String(cString: strerror(errno)))") }
        guard (status >> 8) & 0xff == 0 else { throw TestSetupError("psql -f \(dump) failed: \(output.suffix(2000))") }
    }

    /// The newest installed PostgreSQL's `psql`.
    private static func psqlBinary() -> String? {
        let base = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []).compactMap(Int.init).sorted()
        return versions.reversed().map { "\(base)/\($0)/bin/psql" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}
