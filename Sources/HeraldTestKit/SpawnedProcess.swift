import Foundation
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`: the one way tests, fixtures and benchmarks start
/// programs.
///
/// Not Foundation's `Process`: it watches each child and each pipe with Dispatch sources, and
/// with many children started at once from several threads Dispatch's event loop crashed (a bad
/// pointer in `_dispatch_event_loop_drain`: a source whose descriptor was closed while a child
/// still held it, the class of swift-subprocess issue 47). Here nothing is registered with
/// Dispatch: output is read by a thread of its own per captured stream, blocking until
/// end-of-file, and the child is reaped with `waitpid` by whoever asks first.
///
/// The child gets descriptors 0–2 only (everything else of the test process is closed in it, so
/// an inherited socket or pipe cannot keep a peer alive), an empty signal mask and default
/// signal actions (a child spawned from a thread that blocks signals would otherwise inherit the
/// mask).
public final class SpawnedProcess: Sendable {
    /// How one of the child's standard descriptors is set up.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// A file: read for standard input; created (or truncated) for output.
        case file(String)
        /// A pipe to this process: standard input is written with ``writeInput(_:)``; output is
        /// captured (``output``, ``errors``).
        case pipe
        /// A descriptor of this process, duplicated into the child.
        case descriptor(Int32)
        /// Standard error only: wherever standard output goes.
        case sameAsOutput
    }

    /// How the child ended.
    public enum Termination: Equatable, Sendable {
        case exited(Int32)
        case signaled(Int32)

        /// The exit code, or the number of the signal that ended it (as Foundation's
        /// `terminationStatus` reports it).
        public var status: Int32 {
            switch self {
            case .exited(let code): code
            case .signaled(let signal): signal
            }
        }
    }

    /// The child's process id.
    public let pid: pid_t
    private let ended = Locked<Termination?>(nil)
    private let input: Locked<Int32>
    private let captured: (output: Capture?, errors: Capture?)

    /// Starts `executable` (a path) with `arguments`.
    /// - Parameters:
    ///   - environment: added to (and overriding) this process's environment.
    ///   - directory: the child's working directory (through coreutils' `env -C`).
    ///   - newProcessGroup: the child leads a process group of its own (`kill(-pid, …)` reaches
    ///     what it starts).
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
                stdin: Stream = .null, stdout: Stream = .null, stderr: Stream = .null, newProcessGroup: Bool = false) throws {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | (newProcessGroup ? POSIX_SPAWN_SETPGROUP : 0)))
        if newProcessGroup { posix_spawnattr_setpgroup(&attributes, 0) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }

        // The pipes' own ends are close-on-exec; in the child, dup2 gives the other end as 0, 1 or 2.
        var opened: [Int32] = []
        func pipeEnds() throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { throw TestSetupError("pipe: \(String(cString: strerror(errno)))") }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            opened += fds
            return (fds[0], fds[1])
        }
        var childEnds: [Int32] = []
        var inputEnd: Int32 = -1
        var readEnds: (output: Int32?, errors: Int32?) = (nil, nil)
        do {
            for (target, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
                switch stream {
                case .null:
                    posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
                case .file(let path):
                    posix_spawn_file_actions_addopen(&actions, target, path, target == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC, 0o600)
                case .descriptor(let fd):
                    posix_spawn_file_actions_adddup2(&actions, fd, target)
                case .sameAsOutput:
                    posix_spawn_file_actions_adddup2(&actions, 1, target)
                case .pipe:
                    let ends = try pipeEnds()
                    if target == 0 {
                        Self.ignoreBrokenPipes
                        inputEnd = ends.write
                        childEnds.append(ends.read)
                        posix_spawn_file_actions_adddup2(&actions, ends.read, 0)
                    } else {
                        childEnds.append(ends.write)
                        posix_spawn_file_actions_adddup2(&actions, ends.write, target)
                        if target == 1 { readEnds.output = ends.read } else { readEnds.errors = ends.read }
                    }
                }
            }
            guard let closeFrom = Self.closeFrom else {
                throw TestSetupError("posix_spawn_file_actions_addclosefrom_np is missing: glibc 2.34 or later is needed")
            }
            _ = closeFrom(&actions, 3)
            let command = directory.map { ["/usr/bin/env", "-C", $0, executable] } ?? [executable]
            let argv: [UnsafeMutablePointer<CChar>?] = (command + arguments).map { strdup($0) } + [nil]
            let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
            let envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { (argv + envp).forEach { free($0) } }
            var pid: pid_t = 0
            let rc = posix_spawn(&pid, command[0], &actions, &attributes, argv, envp)
            guard rc == 0 else { throw TestSetupError("cannot start \(executable): \(String(cString: strerror(rc)))") }
            self.pid = pid
        } catch {
            for fd in opened { close(fd) }
            throw error
        }
        for fd in childEnds { close(fd) }
        input = Locked(inputEnd)
        captured = (readEnds.output.map { Capture(reading: $0) }, readEnds.errors.map { Capture(reading: $0) })
    }

    // MARK: The child's state

    /// How the child ended, or `nil` while it runs (reaps it the first time it has ended).
    public var termination: Termination? {
        ended.withLock { ended in
            if ended == nil {
                var status: Int32 = 0
                var r: pid_t
                repeat { r = waitpid(pid, &status, WNOHANG) } while r < 0 && errno == EINTR
                // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (the macros are not imported).
                if r == pid { ended = (status & 0x7f) == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f) }
            }
            return ended
        }
    }

    public var isRunning: Bool { termination == nil }

    /// Waits (blocking the calling thread) for the child to end.
    @discardableResult
    public func wait() -> Termination {
        while true {
            if let t = termination { return t }
            usleep(2_000)
        }
    }

    /// Waits up to `timeout` for the child to end; `nil` if it still runs.
    public func exit(timeout: TimeInterval) async -> Termination? {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let t = termination { return t }
            try? await Task.sleep(nanoseconds: 5_000_000)
        }
        return termination
    }

    /// Sends `signal` to the child (while it has not been reaped: its pid cannot be someone else's yet).
    public func signal(_ signal: Int32) {
        ended.withLock { if $0 == nil { _ = kill(pid, signal) } }
    }

    // MARK: Standard input and output

    /// Writes `bytes` to the child's standard input (a ``Stream/pipe``), blocking until the child
    /// has read them. - Returns: `false` when the pipe is closed (or the child is gone).
    @discardableResult
    public func writeInput(_ bytes: [UInt8]) -> Bool {
        let fd = input.withLock { $0 }
        guard fd >= 0 else { return false }
        var sent = 0
        while sent < bytes.count {
            // SIGPIPE is ignored (``ignoreBrokenPipes``): a gone reader is EPIPE.
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + sent, bytes.count - sent) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    /// Closes the child's standard input (it reads end-of-file).
    public func closeInput() {
        let fd = input.withLock { fd in defer { fd = -1 }; return fd }
        if fd >= 0 { close(fd) }
    }

    /// What the child wrote to a captured standard output so far.
    public var output: [UInt8] { captured.output?.bytes ?? [] }
    /// What the child wrote to a captured standard error so far.
    public var errors: [UInt8] { captured.errors?.bytes ?? [] }
    /// Every captured stream has reached end-of-file (the child and all it started closed them).
    public var outputEnded: Bool { (captured.output?.ended ?? true) && (captured.errors?.ended ?? true) }

    deinit {
        closeInput()
        guard ended.withLock({ $0 == nil }) else { return }
        let pid = self.pid
        kill(pid, SIGKILL)
        // Reaped off the caller's thread: a child that is still dying must not block a deinit.
        Thread.detachNewThread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
    }

    /// A child's standard input that is a pipe: writing after the child is gone must fail with
    /// EPIPE, not end the test process.
    private static let ignoreBrokenPipes: Void = { _ = Glibc.signal(SIGPIPE, SIG_IGN) }()

    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), which Swift's Glibc module leaves out (it is `__USE_GNU`).
    private static let closeFrom: CloseFrom? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }
}

/// One captured output stream: a thread of its own reads it to end-of-file.
private final class Capture: Sendable {
    private let state = Locked<(bytes: [UInt8], ended: Bool)>(([], false))

    init(reading fd: Int32) {
        let state = self.state
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                state.withLock { $0.bytes += buffer[0..<n] }
            }
            close(fd)
            state.withLock { $0.ended = true }
        }
    }

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var ended: Bool { state.withLock { $0.ended } }
}
