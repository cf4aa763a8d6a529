import FoundationEssentials
import Glibc
import HeraldCore
import Testing

@Suite struct PlatformTests {
    @Test func fixedFormatsLikePrintf() {
        #expect(1.005.fixed(1) == "1.0")
        #expect(2.5.fixed(0) == "3")
        #expect(0.125.fixed(2) == "0.13")
        #expect((-3.14159).fixed(2) == "-3.14")
        #expect((-0.001).fixed(2) == "0.00")
        #expect(12.0.fixed(3) == "12.000")
        #expect(81234.56.fixed(0, width: 9) == "    81235")
        #expect(0.07.fixed(2) == "0.07")
    }

    @Test func trimmingWhitespace() {
        #expect("  a b \t\n".trimmingWhitespace() == "a b")
        #expect(" \n ".trimmingWhitespace() == "")
        #expect("x"[...].trimmingWhitespace() == "x")
    }

    @Test func threadsRunAndConditionsWake() {
        let condition = ConditionLock()
        let box = Locked(false)
        OSThread.start(name: "herald-test") {
            condition.withLock { box.withLock { $0 = true }; condition.signal() }
        }
        let woke = condition.withLock { () -> Bool in
            let deadline = Date().addingTimeInterval(30)
            while !box.withLock({ $0 }) && Date() < deadline { condition.wait(seconds: 1) }
            return box.withLock { $0 }
        }
        #expect(woke)
    }

    @Test func timedWaitsTimeOut() {
        let condition = ConditionLock()
        let start = Date()
        let signalled = condition.withLock { condition.wait(seconds: 0.05) }
        #expect(!signalled)
        #expect(Date().timeIntervalSince(start) >= 0.04)
    }

    @Test func systemErrorsReadWell() {
        do {
            _ = try String(contentsOfFile: "/nonexistent/herald", encoding: .utf8)
            Issue.record("read a file that does not exist")
        } catch {
            #expect(SystemError.describe(error) == "No such file or directory")
        }
    }

    @Test func writesReachTheDescriptor() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        #expect(FileDescriptorOutput.write(Array("hello".utf8), to: fds[1]))
        close(fds[1])
        var buffer = [UInt8](repeating: 0, count: 16)
        let n = read(fds[0], &buffer, 16)
        #expect(String(decoding: buffer[0..<max(n, 0)], as: UTF8.self) == "hello")
    }
}
