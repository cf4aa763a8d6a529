import FoundationEssentials
import Glibc
import HeraldTestKit

/// A child process of the benchmarks (their servers, h2load, openssl): HeraldTestKit's
/// ``SpawnedProcess``, with exit statuses as a shell gives them.
struct Subprocess {
    private let process: SpawnedProcess
    var pid: pid_t { process.pid }

    /// Starts `executable` with `arguments`; its standard output and error go to `output`
    /// (a descriptor, duplicated into the child) or /dev/null.
    init(_ executable: String, _ arguments: [String], output: Int32? = nil) throws {
        do {
            process = try SpawnedProcess(executable, arguments, stdout: output.map { .descriptor($0) } ?? .null, stderr: .sameAsOutput)
        } catch {
            throw APNsBenchmark.Failure(description: "\(error)")
        }
    }

    /// Whether the process has ended (reaping it if so).
    var hasEnded: Bool { !process.isRunning }

    /// Waits for the process to end. - Returns: its exit status (128 + signal when killed).
    @discardableResult
    func wait() -> Int32 {
        switch process.wait() {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }

    /// Kills the process and waits for it.
    func stop() {
        process.signal(SIGKILL)
        wait()
    }

    /// Runs `executable` to the end. - Returns: its exit status and what it wrote (stdout and stderr).
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let child: SpawnedProcess
        do {
            child = try SpawnedProcess(executable, arguments, stdout: .pipe, stderr: .sameAsOutput)
        } catch {
            throw APNsBenchmark.Failure(description: "\(error)")
        }
        let status = Subprocess(child).wait()
        while !child.outputEnded { usleep(1_000) }
        return (status, String(decoding: child.output, as: UTF8.self))
    }

    private init(_ process: SpawnedProcess) { self.process = process }
}
