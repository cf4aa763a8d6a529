import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

/// Throughput figures, printed only; run with `HERALD_BENCH=1 swift test -c release --filter CryptoBenchmarks`.
/// No assertions on speed.
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["HERALD_BENCH"] != nil))
struct CryptoBenchmarks {
    func rate(_ label: String, _ count: Int, _ body: () throws -> Void) rethrows {
        let start = ContinuousClock.now
        try body()
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("BENCH \(label): \(Int(Double(count) / seconds)) /s (\(String(format: "%.2f", seconds * 1e6 / Double(count))) µs each)")
    }

    @Test func es256AndTokens() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let verifier = key.verifyingKey
        let message = Array(String(repeating: "x", count: 120).utf8)
        let n = 5000
        var signature: [UInt8] = []
        try rate("ES256 sign", n) { for _ in 0..<n { signature = try key.sign(message) } }
        var ok = true
        rate("ES256 verify", n) { for _ in 0..<n { ok = ok && verifier.verify(signature: signature, message: message) } }
        #expect(ok)
        var jwt = ""
        try rate("ProviderToken.make", n) {
            for i in 0..<n { jwt = try ProviderToken.make(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: Date(timeIntervalSince1970: Double(i)), key: key) }
        }
        var parsed = 0
        rate("ProviderToken.parse", n * 10) { for _ in 0..<(n * 10) { if ProviderToken.parse(jwt) != nil { parsed += 1 } } }
        #expect(parsed == n * 10)
    }

    /// One thread drives both ends over a non-blocking socketpair: the client sends requests of
    /// 200 bytes (one TLS record each, `inFlight` at a time), the server answers each with a
    /// 40-byte record. Figures include both ends' work, so a server alone does roughly twice as many.
    func exchange(inFlight: Int, total: Int, batched: Bool = false) throws {
        let certs = try TestCertificates.shared()
        var fds: [Int32] = [0, 0]
        _ = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds)
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let identity = try ClientIdentity.load(certificateFile: certs.clientCombined, keyFile: nil, passphrase: nil)
        let server = try TLSConnection.server(fd: fds[0], context: try TLSServerContext(
            certificateFile: certs.serverCertificate, keyFile: certs.serverKey, clientCAFile: certs.caFile, alpn: ["h2"]))
        let client = try TLSConnection.client(fd: fds[1], context: try TLSClientContext(caFile: certs.caFile, identity: identity, alpn: ["h2"]),
                                              serverName: "127.0.0.1")
        defer { client.shutdown(); server.shutdown() }
        var done = (false, false)
        while !(done.0 && done.1) {
            if !done.0 { done.0 = client.handshake() == .bytes(0) }
            if !done.1 { done.1 = server.handshake() == .bytes(0) }
        }
        // Batched: `inFlight` messages per write, as an HTTP/2 peer sends its queued frames.
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
                case let other: throw TestSetupError("write: \(other)")
                }
            }
            return true
        }
        try buffer.withUnsafeMutableBytes { buffer in
            try request.withUnsafeBytes { request in
                try response.withUnsafeBytes { response in
                    try rate("TLS \(inFlight) in flight\(batched ? ", \(per) per write" : ""), 200 B request / 40 B response", total) {
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
                                case let other: throw TestSetupError("server read: \(other)")
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
                                case let other: throw TestSetupError("client read: \(other)")
                                }
                            }
                            answered = responseBytes / 40
                        }
                    }
                }
            }
        }
    }

    @Test func tlsPipelined() throws { try exchange(inFlight: 100, total: 300_000) }
    @Test func tlsBatched() throws { try exchange(inFlight: 100, total: 1_000_000, batched: true) }
    @Test func tlsPingPong() throws { try exchange(inFlight: 1, total: 50_000) }
}
