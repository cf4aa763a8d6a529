import Foundation
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
#if canImport(Glibc)
import Glibc
#endif

/// A client over HeraldCrypto's blocking TLS (a Swift program's view of the gateway).
final class TLSTestClient {
    let connection: TLSConnection

    /// Connects with the test client certificate (or `certificate`/`key`), trusting the test CA.
    init(port: Int, certificate: String? = nil, key: String? = nil) throws {
        let certs = try TestCertificates.shared()
        let identity = try ClientIdentity.load(certificateFile: certificate ?? certs.clientCertificate,
                                               keyFile: key ?? certs.clientKey, passphrase: nil)
        let context = try TLSClientContext(caFile: certs.caFile, identity: identity)
        connection = try TLSClient.connect(host: "127.0.0.1", port: port, context: context, timeout: 5)
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes all bytes as one TLS write (one or more records).
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let result = bytes.withUnsafeBytes { connection.write(UnsafeRawBufferPointer(rebasing: $0[sent...])) }
            guard case .bytes(let n) = result else { return false }
            sent += n
        }
        return true
    }

    /// Reads until the server closes (or 10 s pass); returns the bytes and how it ended.
    func readToEnd() -> (bytes: [UInt8], end: TLSConnection.IOResult) {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let result = buffer.withUnsafeMutableBytes { connection.read(into: $0) }
            guard case .bytes(let n) = result else { return (out, result) }
            out += buffer[0..<n]
        }
    }

    deinit { connection.shutdown() }
}

/// `openssl s_client` as an independent client: bytes in on stdin, bytes out on stdout.
struct OpenSSLClient {
    struct Result {
        var stdout: [UInt8]
        var stderr: String
        var status: Int32
    }

    /// Connects, writes `input`, and reads until the server closes. With `closeInputAfter`, the
    /// client's input is closed once that condition holds (or 10 s pass), making s_client end
    /// the connection itself — for exchanges where the server never answers.
    static func run(port: Int, input: [UInt8], certificate: String?, key: String?,
                    closeInputAfter: (@Sendable () async -> Void)? = nil) async throws -> Result {
        let certs = try TestCertificates.shared()
        var arguments = ["s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", certs.caFile,
                         "-verify_return_error", "-quiet", "-no_ign_eof", "-nocommands"]
        if let certificate { arguments += ["-cert", certificate] }
        if let key { arguments += ["-key", key] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        let collected = Collected()
        let reader = Thread {
            let out = stdout.fileHandleForReading.readDataToEndOfFile()
            let err = stderr.fileHandleForReading.readDataToEndOfFile()
            collected.finish(out: [UInt8](out), err: String(decoding: err, as: UTF8.self))
        }
        reader.start()
        // On a thread of its own: a large input blocks until s_client reads it, and fails
        // (EPIPE, ignored) if s_client exits first, e.g. once the server closed.
        let writer = stdin.fileHandleForWriting
        let data = Data(input)
        let written = Collected()
        Thread {
            try? writer.write(contentsOf: data)
            written.finish(out: [], err: "")
        }.start()
        if let closeInputAfter {
            while !written.isDone { try await Task.sleep(nanoseconds: 5_000_000) }
            await closeInputAfter()
            try? stdin.fileHandleForWriting.close()
        }
        let end = Date().addingTimeInterval(15)
        while !collected.isDone, Date() < end { try await Task.sleep(nanoseconds: 5_000_000) }
        try? stdin.fileHandleForWriting.close()
        // SIGKILL, not SIGTERM: a child spawned from a pool thread inherits its blocked signals.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let status = try await Self.exitStatus(of: process)
        while !collected.isDone { try await Task.sleep(nanoseconds: 5_000_000) }
        let (out, err) = collected.value
        return Result(stdout: out, stderr: err, status: status)
    }

    /// The child's exit status, without `waitUntilExit()`: that spins a run loop, and once (with
    /// Swift Testing's exit-test monitor waiting on every child of the process) Foundation never
    /// saw the exit, so both spun for good. Waits for Foundation to notice; if it has not after a
    /// few seconds, reaps the child itself.
    private static func exitStatus(of process: Process) async throws -> Int32 {
        let end = Date().addingTimeInterval(5)
        while process.isRunning, Date() < end { try await Task.sleep(nanoseconds: 5_000_000) }
        if !process.isRunning { return process.terminationStatus }
        var status: Int32 = 0
        let pid = process.processIdentifier
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid {
                // WIFEXITED: the exit code; else the signal that ended it, as Foundation reports it.
                return (status & 0x7f) == 0 ? (status >> 8) & 0xff : status & 0x7f
            }
            if r < 0 && errno == ECHILD {
                // Foundation reaped it meanwhile: it records the status a moment later.
                let end = Date().addingTimeInterval(5)
                while process.isRunning, Date() < end { try await Task.sleep(nanoseconds: 5_000_000) }
                return process.isRunning ? -1 : process.terminationStatus
            }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        throw CancellationError()
    }

    /// With the test client certificate.
    static func run(port: Int, input: [UInt8], closeInputAfter: (@Sendable () async -> Void)? = nil) async throws -> Result {
        let certs = try TestCertificates.shared()
        return try await run(port: port, input: input, certificate: certs.clientCertificate, key: certs.clientKey,
                             closeInputAfter: closeInputAfter)
    }

    private final class Collected: @unchecked Sendable {
        private let lock = NSLock()
        private var out: [UInt8] = []
        private var err = ""
        private var done = false
        func finish(out: [UInt8], err: String) {
            lock.lock(); defer { lock.unlock() }
            self.out = out; self.err = err; done = true
        }
        var isDone: Bool { lock.lock(); defer { lock.unlock() }; return done }
        var value: ([UInt8], String) { lock.lock(); defer { lock.unlock() }; return (out, err) }
    }
}

/// Makes a client certificate signed by the test CA whose subject has no UID and which has no
/// topics extension (a "certificate without a topic").
func makeCertificateWithoutTopic(in directory: TemporaryDirectory) async throws -> (certificate: String, key: String) {
    let certs = try TestCertificates.shared()
    let key = directory.file("notopic.key"), csr = directory.file("notopic.csr"), pem = directory.file("notopic.pem")
    let steps: [[String]] = [
        ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
        ["req", "-new", "-key", key, "-subj", "/CN=No Topic Client/O=Herald Tests", "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", certs.caFile, "-CAkey", "\(certs.directory)/ca.key", "-set_serial", "4242",
         "-days", "30", "-sha256", "-out", pem],
    ]
    for step in steps {
        let result = try await Run.program("/usr/bin/env", ["openssl"] + step)
        guard result.status == 0 else { throw TestSetupError("openssl \(step[0]) failed: \(result.stderr)") }
    }
    return (pem, key)
}
