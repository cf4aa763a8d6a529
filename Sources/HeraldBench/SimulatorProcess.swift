import FoundationEssentials
import Glibc

/// A `herald simulate …` started for a benchmark in a process of its own, so that its CPU
/// (TLS, HTTP/2, a Web Push simulator's decryption) is not counted in this process's getrusage.
struct SimulatorProcess {
    let process: Subprocess
    /// What it printed before it was ready: "listening on …" lines and the like.
    let lines: [String]

    /// Starts `herald` (the one beside this binary, or `$HERALD`) with `arguments`; its output
    /// goes to `log`. Returns once it has printed `readyLines` lines with "listening on".
    /// - Throws: when it cannot start, exits or prints nothing ready in `timeout` seconds.
    static func start(_ arguments: [String], log: String, readyLines: Int = 1, timeout: Double = 60) throws -> SimulatorProcess {
        let executable: String
        do { executable = try BenchExecutables.herald() } catch { throw APNsBenchmark.Failure(description: error.description) }
        let fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw APNsBenchmark.Failure(description: "cannot write \(log): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let process = try Subprocess(executable, arguments, output: fd)
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").map(String.init)
            if lines.filter({ $0.hasPrefix("listening on") }).count >= readyLines {
                return SimulatorProcess(process: process, lines: lines)
            }
            if process.hasEnded {
                throw APNsBenchmark.Failure(description: "herald \(arguments.prefix(2).joined(separator: " ")) exited: \(text.suffix(500))")
            }
            usleep(20_000)
        }
        process.stop()
        throw APNsBenchmark.Failure(description: "herald \(arguments.prefix(2).joined(separator: " ")) printed no \"listening on\" in \(Int(timeout)) s")
    }

    /// The port of the first "listening on …:PORT" line.
    var port: Int? {
        lines.first { $0.hasPrefix("listening on") }.flatMap { line in Int(line.split(separator: ":").last ?? "") }
    }

    func stop() { process.stop() }
}

