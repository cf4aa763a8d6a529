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
        // posix_spawn and files, not Foundation's Process and pipes: Process watches each child
        // and pipe with Dispatch sources, and many launched at once from several threads crashed
        // Dispatch's event loop (a source on a descriptor that was closed and reused).
        let base = "/tmp/herald-run-\(getpid())-\(UUID().uuidString.prefix(12))"
        let inFile = base + ".in", outFile = base + ".out", errFile = base + ".err"
        defer { for f in [inFile, outFile, errFile] { unlink(f) } }
        guard FileManager.default.createFile(atPath: inFile, contents: Data((stdin ?? "").utf8)) else {
            throw TestSetupError("cannot write \(inFile)")
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, inFile, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Nothing else of the test process's: an inherited socket keeps a peer another test
        // closed alive (Foundation's Process closes them too).
        guard let closeFrom = Self.closeFrom else { throw TestSetupError("posix_spawn_file_actions_addclosefrom_np is missing: glibc 2.34 or later is needed") }
        _ = closeFrom(&actions, 3)
        // The working directory through env(1) (coreutils' -C): glibc's addchdir is not in every header.
        let command = directory.map { ["/usr/bin/env", "-C", $0, executable] } ?? [executable]
        let argv: [UnsafeMutablePointer<CChar>?] = (command + arguments).map { strdup($0) } + [nil]
        let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, command[0], &actions, &attributes, argv, envp)
        guard rc == 0 else { throw TestSetupError("cannot start \(executable): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (the macros are not imported): the exit
        // code, or the signal's number as Foundation's `terminationStatus` gives it.
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : status & 0x7f
        let out = FileManager.default.contents(atPath: outFile) ?? Data()
        let err = FileManager.default.contents(atPath: errFile) ?? Data()
        return ProcessResult(status: code, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), which Swift's Glibc module leaves out (it is `__USE_GNU`).
    private static let closeFrom: CloseFrom? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }

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
    private let process: Process
    private let output = Locked<String>("")
    private let errors = Locked<String>("")

    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                directory: String? = nil) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let output = self.output, errors = self.errors
        out.fileHandleForReading.readabilityHandler = { h in
            let d = h.availableData
            if !d.isEmpty { output.withLock { $0 += String(decoding: d, as: UTF8.self) } }
        }
        err.fileHandleForReading.readabilityHandler = { h in
            let d = h.availableData
            if !d.isEmpty { errors.withLock { $0 += String(decoding: d, as: UTF8.self) } }
        }
        try process.run()
        self.process = process
    }

    /// Starts the built `herald` binary.
    public static func herald(_ arguments: [String], environment: [String: String] = [:], directory: String? = nil) throws -> ChildProcess {
        try ChildProcess(PackagePaths.heraldBinary, arguments, environment: environment, directory: directory)
    }

    public var stdout: String { output.withLock { $0 } }
    public var stderr: String { errors.withLock { $0 } }
    public var isRunning: Bool { process.isRunning }
    public var pid: Int32 { process.processIdentifier }

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
    public func signal(_ signal: Int32 = SIGTERM) { kill(process.processIdentifier, signal) }

    /// Waits for the process to exit (up to `timeout`); returns its status, or `nil` if still running.
    public func waitForExit(timeout: TimeInterval = 60) async -> Int32? {
        let end = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < end { try? await Task.sleep(nanoseconds: 10_000_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// Kills the process (SIGKILL) if it still runs, and waits up to 10 s for it to end. Bounded:
    /// a child that died but was never reaped (a zombie Foundation missed) must not hang the test.
    public func terminate() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let end = Date().addingTimeInterval(10)
        while process.isRunning && Date() < end && !isZombie { usleep(10_000) }
    }

    /// The child has died but is not reaped yet (state `Z` in `/proc/PID/stat`).
    private var isZombie: Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}
