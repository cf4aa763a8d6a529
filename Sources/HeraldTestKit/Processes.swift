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
    public static func program(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                               directory: String? = nil, stdin: String? = nil) throws -> ProcessResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? input.fileHandleForWriting.close()
        // Read both pipes concurrently so a full pipe cannot block the child.
        let errData = Locked<Data>(Data())
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            let d = err.fileHandleForReading.readDataToEndOfFile()
            errData.withLock { $0 = d }
            group.leave()
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        return ProcessResult(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                             stderr: String(decoding: errData.withLock { $0 }, as: UTF8.self))
    }

    /// Runs the built `herald` binary.
    public static func herald(_ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
                              stdin: String? = nil) throws -> ProcessResult {
        try program(PackagePaths.heraldBinary, arguments, environment: environment, directory: directory, stdin: stdin)
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
