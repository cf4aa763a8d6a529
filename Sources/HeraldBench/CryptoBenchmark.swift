import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCLI
import HeraldCore
import HeraldCrypto

/// `herald-bench crypto`: ES256, provider tokens and TLS records, each next to `openssl speed`
/// measured in the same run (the same OpenSSL underneath, so the ratio is Herald's overhead).
enum CryptoBenchCommand {
    static let spec = CommandSpec(
        path: "crypto",
        summary: "Benchmark ES256 signing, provider tokens and TLS record exchange, next to openssl speed.",
        usage: "crypto [--n N] [--messages M] [--seconds S] [--work DIR]",
        options: [
            .value("n", "N", "ES256 signatures, verifications and provider tokens per figure (default 5000)"),
            .value("messages", "M", "TLS request/response pairs for the pipelined run (default 300000; batched 3×M, ping-pong M/6)"),
            .value("seconds", "S", "seconds for each openssl speed reference (default 3)"),
            .value("work", "DIR", "folder for the test certificates (default var/bench)"),
        ],
        discussion: """
        ES256 sign and verify and ProviderToken.make are printed next to `openssl speed ecdsap256`
        (sign/s, verify/s). The TLS figures: one thread drives both ends of a TLS 1.3 connection over
        a socketpair (client requests of 200 bytes, server answers of 40 bytes), so each pair costs
        four record encryptions or decryptions plus system calls; they are printed next to
        `openssl speed -evp aes-256-gcm -bytes 200` (the record cipher alone). Needs openssl.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 100...10_000_000) ?? 5000
        let messages = try arguments.int("messages", command: spec.path, in: 600...100_000_000) ?? 300_000
        let seconds = try arguments.int("seconds", command: spec.path, in: 1...60) ?? 3
        let work = arguments.value("work") ?? "var/bench"
        do {
            try CryptoBenchmark(console: context.console, work: work).run(n: n, messages: messages, seconds: seconds)
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

/// The measurements behind `herald-bench crypto`.
struct CryptoBenchmark {
    let console: Console
    let work: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    func run(n: Int, messages: Int, seconds: Int) throws {
        guard let openssl = which("openssl") else { throw Failure(description: "openssl is missing; run scripts/bootstrap.sh") }
        let certs = work + "/certs"
        _ = try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])

        // Reference first, on an idle machine, then Herald.
        let ecdsa = try Self.opensslFields(try shell(openssl, ["speed", "-mr", "-seconds", String(seconds), "ecdsap256"]), prefix: "+F4:")
        let gcm = try Self.opensslFields(try shell(openssl, ["speed", "-mr", "-seconds", String(seconds), "-evp", "aes-256-gcm", "-bytes", "200"]),
                                         prefix: "+F:")
        guard ecdsa.count >= 5, let signRef = Double(ecdsa[3]), let verifyRef = Double(ecdsa[4]),
              gcm.count >= 4, let gcmBytes = Double(gcm[3]) else {
            throw Failure(description: "cannot read the output of openssl speed: \(ecdsa) \(gcm)")
        }
        let gcmRef = gcmBytes / 200

        let key = try ES256SigningKey(pemFile: certs + "/AuthKey_ABC123DEFG.p8")
        let verifier = key.verifyingKey
        let message = Array(String(repeating: "x", count: 120).utf8)
        var signature: [UInt8] = []
        let sign = try rate(n) { for _ in 0..<n { signature = try key.sign(message) } }
        var verified = 0
        let verify = rate(n) { for _ in 0..<n where verifier.verify(signature: signature, message: message) { verified += 1 } }
        guard verified == n else { throw Failure(description: "ES256: \(n - verified) of \(n) signatures did not verify") }
        var jwt = ""
        let make = try rate(n) {
            for i in 0..<n {
                jwt = try ProviderToken.make(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: Date(timeIntervalSince1970: Double(i)), key: key)
            }
        }
        var parsed = 0
        let parse = rate(n * 10) { for _ in 0..<(n * 10) where ProviderToken.parse(jwt) != nil { parsed += 1 } }
        guard parsed == n * 10 else { throw Failure(description: "ProviderToken.parse refused its own token") }

        let exchange = TLSExchange(certs: certs)
        let pipelined = try exchange.measure(inFlight: 100, total: messages)
        let batched = try exchange.measure(inFlight: 100, total: messages * 3, batched: true)
        let pingPong = try exchange.measure(inFlight: 1, total: messages / 6)

        console.out("== bench crypto (\(ProcessInfo.processInfo.activeProcessorCount) cores, one thread; reference: openssl speed -seconds \(seconds), same run)")
        line("ES256 sign", sign, reference: signRef, "openssl speed ecdsap256 sign")
        line("ES256 verify", verify, reference: verifyRef, "openssl speed ecdsap256 verify")
        line("ProviderToken.make (sign + encode)", make, reference: signRef, "openssl speed ecdsap256 sign")
        line("ProviderToken.parse", parse, reference: nil, "")
        line("TLS 100 in flight, 200 B request / 40 B response", pipelined, reference: gcmRef, "AES-256-GCM 200 B blocks")
        line("TLS 100 in flight, 100 per write", batched, reference: gcmRef, "AES-256-GCM 200 B blocks")
        line("TLS ping-pong (1 in flight)", pingPong, reference: gcmRef, "AES-256-GCM 200 B blocks")
    }

    /// Operations per second of `body`, which performs `count` of them.
    func rate(_ count: Int, _ body: () throws -> Void) rethrows -> Double {
        let start = ContinuousClock.now
        try body()
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(count) / max(seconds, 1e-9)
    }

    func line(_ label: String, _ rate: Double, reference: Double?, _ referenceLabel: String) {
        var text = "  " + label.padded(50, left: false) + String(Int(rate)).padded(10, left: true) + " /s"
        if let reference {
            text += "   \(referenceLabel): \(Int(reference)) /s, ratio \((rate / reference).fixed(2))"
        }
        console.out(text)
    }

    /// The `:`-separated fields of the first `openssl speed -mr` line starting with `prefix`.
    static func opensslFields(_ output: String, prefix: String) throws -> [String] {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else {
            throw Failure(description: "openssl speed printed no \(prefix) line: \(output.suffix(300))")
        }
        return line.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
    }
}

/// One thread drives both ends of a TLS connection over a non-blocking socketpair: the client
/// sends requests of 200 bytes (one record each, or `inFlight` per write when batched, as an
/// HTTP/2 peer sends its queued frames), the server answers each with 40 bytes.
struct TLSExchange {
    let certs: String

    func measure(inFlight: Int, total: Int, batched: Bool = false) throws -> Double {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else {
            throw CryptoBenchmark.Failure(description: "socketpair: \(String(cString: strerror(errno)))")
        }
        var unowned = Set(fds)  // closed here unless a connection took it (its shutdown closes it)
        defer { for fd in unowned { close(fd) } }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let identity = try ClientIdentity.load(certificateFile: certs + "/client-combined.pem", keyFile: nil, passphrase: nil)
        let server = try TLSConnection.server(fd: fds[0], context: try TLSServerContext(
            certificateFile: certs + "/server.pem", keyFile: certs + "/server.key", clientCAFile: certs + "/ca.pem", alpn: ["h2"]))
        unowned.remove(fds[0])
        defer { server.shutdown() }
        let client = try TLSConnection.client(fd: fds[1], context: try TLSClientContext(caFile: certs + "/ca.pem", identity: identity, alpn: ["h2"]),
                                              serverName: "127.0.0.1")
        unowned.remove(fds[1])
        defer { client.shutdown() }
        var done = (false, false)
        while !(done.0 && done.1) {
            if !done.0 { done.0 = client.handshake() == .bytes(0) }
            if !done.1 { done.1 = server.handshake() == .bytes(0) }
        }
        let per = batched ? inFlight : 1
        let request = [UInt8](repeating: 0x41, count: 200 * per)
        let response = [UInt8](repeating: 0x42, count: 40 * per)
        var buffer = [UInt8](repeating: 0, count: 16384)
        var sent = 0, answered = 0, responseBytes = 0, serverPending = 0
        var clientUnsent = 0, serverUnsent = 0  // bytes of the current batch still to write
        /// Writes the tail of `message`; false when the socket is full.
        func push(_ connection: TLSConnection, _ message: UnsafeRawBufferPointer, _ unsent: inout Int) throws -> Bool {
            while unsent > 0 {
                switch connection.write(UnsafeRawBufferPointer(rebasing: message[(message.count - unsent)...])) {
                case .bytes(let n): unsent -= n
                case .wantWrite, .wantRead: return false
                case let other: throw CryptoBenchmark.Failure(description: "TLS write: \(other)")
                }
            }
            return true
        }
        let start = ContinuousClock.now
        try buffer.withUnsafeMutableBytes { buffer in
            try request.withUnsafeBytes { request in
                try response.withUnsafeBytes { response in
                    while answered < total {
                        while try push(client, request, &clientUnsent), sent < total, sent - answered + per <= inFlight {
                            clientUnsent = request.count
                            sent += per
                        }
                        // Server: read what arrived, answer every complete batch.
                        reading: while true {
                            switch server.read(into: buffer) {
                            case .bytes(let n): serverPending += n
                            case .wantRead: break reading
                            case let other: throw CryptoBenchmark.Failure(description: "TLS server read: \(other)")
                            }
                        }
                        while try push(server, response, &serverUnsent), serverPending >= request.count {
                            serverUnsent = response.count
                            serverPending -= request.count
                        }
                        reading: while true {
                            switch client.read(into: buffer) {
                            case .bytes(let n): responseBytes += n
                            case .wantRead: break reading
                            case let other: throw CryptoBenchmark.Failure(description: "TLS client read: \(other)")
                            }
                        }
                        answered = responseBytes / 40
                    }
                }
            }
        }
        let elapsed = ContinuousClock.now - start
        return Double(total) / max(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18, 1e-9)
    }
}

private extension String {
    /// Padded with spaces to `width` characters, on the left or the right.
    func padded(_ width: Int, left: Bool) -> String {
        let pad = String(repeating: " ", count: max(0, width - count))
        return left ? pad + self : self + pad
    }
}
