import Foundation
import HeraldCore
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
        let process = try SpawnedProcess("/usr/bin/env", ["openssl"] + arguments, stdin: .pipe, stdout: .pipe, stderr: .pipe)
        // On a thread of its own: a large input blocks until s_client reads it, and fails
        // (EPIPE, ignored) if s_client exits first, e.g. once the server closed.
        let written = Written()
        Thread {
            process.writeInput(input)
            written.finish()
        }.start()
        if let closeInputAfter {
            while !written.isDone { try await Task.sleep(nanoseconds: 5_000_000) }
            await closeInputAfter()
            process.closeInput()
        }
        let end = Date().addingTimeInterval(15)
        while !process.outputEnded, Date() < end { try await Task.sleep(nanoseconds: 5_000_000) }
        process.closeInput()
        // s_client ends once its output has; what still runs after 2 more seconds is cut short.
        if await process.exit(timeout: 2) == nil { process.signal(SIGKILL) }
        guard let ended = await process.exit(timeout: 10) else { throw CancellationError() }
        while !process.outputEnded { try await Task.sleep(nanoseconds: 5_000_000) }
        return Result(stdout: process.output, stderr: String(decoding: process.errors, as: UTF8.self), status: ended.status)
    }

    /// With the test client certificate.
    static func run(port: Int, input: [UInt8], closeInputAfter: (@Sendable () async -> Void)? = nil) async throws -> Result {
        let certs = try TestCertificates.shared()
        return try await run(port: port, input: input, certificate: certs.clientCertificate, key: certs.clientKey,
                             closeInputAfter: closeInputAfter)
    }

    private final class Written: Sendable {
        private let done = Locked(false)
        func finish() { done.withLock { $0 = true } }
        var isDone: Bool { done.withLock { $0 } }
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
