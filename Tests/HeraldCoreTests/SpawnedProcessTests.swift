import Foundation
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The one way tests start programs: what the child gets (descriptors 0–2 only, a working
/// directory), what comes back (output, errors, how it ended), and standard input as a pipe.
@Suite struct SpawnedProcessTests {
    @Test func outputErrorsAndTheExitCodeComeBack() async throws {
        let child = try SpawnedProcess("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"], stdout: .pipe, stderr: .pipe)
        #expect(await child.exit(timeout: 30) == .exited(3))
        #expect(await eventually(timeout: 10) { child.outputEnded })
        #expect(String(decoding: child.output, as: UTF8.self) == "out\n")
        #expect(String(decoding: child.errors, as: UTF8.self) == "err\n")
    }

    @Test func standardInputIsAPipeTheChildReadsToTheEnd() async throws {
        let child = try SpawnedProcess("/bin/cat", [], stdin: .pipe, stdout: .pipe)
        // More than a pipe holds (64 KiB): the write blocks until cat has read, on its own thread.
        let input = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let wrote = Flag()
        Thread.detachNewThread {
            if child.writeInput(input) { wrote.set() }
            child.closeInput()
        }
        #expect(await child.exit(timeout: 30) == .exited(0))
        #expect(await eventually(timeout: 10) { child.outputEnded })
        #expect(wrote.isSet)
        #expect(child.output == input)
    }

    @Test func theChildHasOnlyItsThreeStandardDescriptors() async throws {
        // A descriptor of the test process without close-on-exec, as libraries leave them.
        let held = open("/dev/null", O_RDONLY)
        #expect(held > 2)
        defer { close(held) }
        let child = try SpawnedProcess("/bin/sh", ["-c", "ls /proc/$$/fd"], stdout: .pipe)
        #expect(await child.exit(timeout: 30) == .exited(0))
        #expect(await eventually(timeout: 10) { child.outputEnded })
        let fds = String(decoding: child.output, as: UTF8.self).split(separator: "\n").compactMap { Int($0) }.sorted()
        #expect(fds == [0, 1, 2])
    }

    @Test func aSignalEndsItAndIsReportedAsTheSignal() async throws {
        let child = try SpawnedProcess("/bin/sleep", ["30"])
        #expect(child.isRunning)
        child.signal(SIGTERM)
        #expect(await child.exit(timeout: 30) == .signaled(SIGTERM))
        #expect(child.termination?.status == SIGTERM)
    }

    @Test func itRunsInTheDirectoryAndEnvironmentItIsGiven() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let child = try SpawnedProcess("/bin/sh", ["-c", "pwd; echo \"$HERALD_SPAWN_TEST\""], environment: ["HERALD_SPAWN_TEST": "given"],
                                       directory: dir.path, stdout: .pipe)
        #expect(await child.exit(timeout: 30) == .exited(0))
        #expect(await eventually(timeout: 10) { child.outputEnded })
        let lines = String(decoding: child.output, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines == [URL(fileURLWithPath: dir.path).resolvingSymlinksInPath().path, "given"])
    }

    private final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.lock(); value = true; lock.unlock() }
        var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    }
}
