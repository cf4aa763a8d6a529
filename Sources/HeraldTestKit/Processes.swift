import Foundation
import HeraldAPNs
import HeraldCore

/// Runs a program to completion and captures its output.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    /// stdout split into lines (no empty last line).
    public var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
}

public enum Run {
    /// Runs `executable` with `arguments`, waits, and returns status and output.
    /// - Parameters:
    ///   - environment: added to (and overriding) the current environment.
    ///   - stdin: text written to the program's standard input.
    ///
    /// Waits on a thread of its own: a test waiting on a child must not hold one of the few
    /// threads of Swift's pool (two on a 2-core machine), which the daemons and servers under
    /// test in the same process need for their own tasks.
    public static func program(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                               directory: String? = nil, stdin: String? = nil) async throws -> ProcessResult {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ProcessResult, any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result {
                    try blocking(executable, arguments, environment: environment, directory: directory, stdin: stdin)
                })
            }
        }
    }

    /// ``program(_:_:environment:directory:stdin:)`` on the calling thread, for callers that are
    /// not async (fixtures' one-time set-up).
    public static func blocking(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                                directory: String? = nil, stdin: String? = nil) throws -> ProcessResult {
        // Files, not pipes: a program that starts a server (pg_ctl) leaves it holding its output,
        // and a pipe would never reach end-of-file.
        let base = "/tmp/herald-run-\(getpid())-\(UUID().uuidString.prefix(12))"
        let inFile = base + ".in", outFile = base + ".out", errFile = base + ".err"
        defer { for f in [inFile, outFile, errFile] { unlink(f) } }
        guard FileManager.default.createFile(atPath: inFile, contents: Data((stdin ?? "").utf8)) else {
            throw TestSetupError("cannot write \(inFile)")
        }
        let child = try SpawnedProcess(executable, arguments, environment: environment, directory: directory,
                                       stdin: .file(inFile), stdout: .file(outFile), stderr: .file(errFile))
        let code = child.wait().status
        let out = FileManager.default.contents(atPath: outFile) ?? Data()
        let err = FileManager.default.contents(atPath: errFile) ?? Data()
        return ProcessResult(status: code, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }

    /// Runs the built `herald` binary.
    public static func herald(_ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
                              stdin: String? = nil) async throws -> ProcessResult {
        try await program(PackagePaths.heraldBinary, arguments, environment: environment, directory: directory, stdin: stdin)
    }
}

/// A long-running child process (a simulator, the daemon) whose output is collected.
///
/// ``waitForLine(containing:timeout:)`` waits for a line such as `listening on 127.0.0.1:PORT`.
public final class ChildProcess: Sendable {
    private let process: SpawnedProcess

    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                directory: String? = nil) throws {
        process = try SpawnedProcess(executable, arguments, environment: environment, directory: directory,
                                     stdout: .pipe, stderr: .pipe)
    }

    /// Starts the built `herald` binary.
    public static func herald(_ arguments: [String], environment: [String: String] = [:], directory: String? = nil) throws -> ChildProcess {
        try ChildProcess(PackagePaths.heraldBinary, arguments, environment: environment, directory: directory)
    }

    public var stdout: String { String(decoding: process.output, as: UTF8.self) }
    public var stderr: String { String(decoding: process.errors, as: UTF8.self) }
    public var isRunning: Bool { process.isRunning }
    public var pid: Int32 { process.pid }

    /// Waits for a stdout line containing `text`; returns the line, or `nil` on timeout or exit.
    public func waitForLine(containing text: String, timeout: TimeInterval = 60) async -> String? {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let line = stdout.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            if !process.isRunning {
                return stdout.split(separator: "\n").first(where: { $0.contains(text) }).map(String.init)
            }
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
        return nil
    }

    /// The port in a `listening on HOST:PORT` line, waiting for it.
    public func listeningPort(timeout: TimeInterval = 60) async -> Int? {
        guard let line = await waitForLine(containing: "listening on", timeout: timeout),
              let colon = line.lastIndex(of: ":") else { return nil }
        return Int(line[line.index(after: colon)...].prefix { $0.isNumber })
    }

    /// Sends a signal (SIGTERM by default).
    public func signal(_ signal: Int32 = SIGTERM) { process.signal(signal) }

    /// Waits for the process to exit (up to `timeout`); returns its status, or `nil` if still running.
    public func waitForExit(timeout: TimeInterval = 60) async -> Int32? {
        await process.exit(timeout: timeout)?.status
    }

    /// Kills the process (SIGKILL) if it still runs, and waits up to 10 s for it to end.
    public func terminate() {
        process.signal(SIGKILL)
        let end = Date().addingTimeInterval(10)
        while process.isRunning && Date() < end { usleep(10_000) }
    }
}
