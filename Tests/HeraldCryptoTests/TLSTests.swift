import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct TLSTests {
    func mutualServer(_ certs: TestCertificates, requireALPN: Bool = true) throws -> TLSServerContext {
        try TLSServerContext(certificateFile: certs.serverCertificate, keyFile: certs.serverKey,
                             clientCAFile: certs.caFile, alpn: ["h2"], requireALPN: requireALPN)
    }

    func appleClient(_ certs: TestCertificates, alpn: [String] = ["h2", "http/1.1"]) throws -> TLSClientContext {
        let identity = try ClientIdentity.load(p12File: certs.clientP12, passphrase: certs.p12Passphrase)
        return try TLSClientContext(caFile: certs.caFile, identity: identity, alpn: alpn)
    }

    @Test func echoOverMutualTLSWithALPN() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let serverContext = try mutualServer(certs)
        let served = TestServer(listener, context: serverContext)
        let client = try TLSClient.connect(host: "127.0.0.1", port: listener.port, context: try appleClient(certs), timeout: 10)
        setTimeouts(client.fd)
        #expect(client.negotiatedALPN == "h2")
        #expect(client.peerCertificate?.subject == "CN=localhost, O=Herald Tests")
        #expect(client.protocolVersion == "TLSv1.3")
        var sent: [UInt8] = []
        var echoed: [UInt8] = []
        for round in 0..<40 {
            let chunk = (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ round) }
            #expect(writeAll(client, chunk))
            sent += chunk
            let (back, last) = readExactly(client, chunk.count)
            echoed += back
            guard back.count == chunk.count else { Issue.record("echo stopped: \(last)"); break }
        }
        #expect(echoed == sent)
        client.shutdown()
        let outcome = served.outcome()
        #expect(outcome.handshake == .bytes(0))
        #expect(outcome.alpn == "h2")
        #expect(outcome.peer?.uid == "com.example.app")
        #expect(outcome.peer?.topics.count == 3)
        #expect(outcome.received == sent)
    }

    @Test func connectsOverIPv6LoopbackCheckingTheIPAddress() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener(ipv6: true)
        let served = TestServer(listener, context: try mutualServer(certs))
        let client = try TLSClient.connect(host: "::1", port: listener.port, context: try appleClient(certs), timeout: 10)
        setTimeouts(client.fd)
        #expect(writeAll(client, Array("over v6".utf8)))
        #expect(readExactly(client, 7).bytes == Array("over v6".utf8))
        client.shutdown()
        #expect(served.outcome().received == Array("over v6".utf8))
    }

    @Test func clientWithCertificateFromAnotherCAIsRefused() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let serverContext = try mutualServer(certs)
        let served = TestServer(listener, context: serverContext)
        let stranger = try ClientIdentity.load(certificateFile: certs.otherClientCertificate, keyFile: certs.otherClientKey,
                                               passphrase: nil)
        let context = try TLSClientContext(caFile: certs.caFile, identity: stranger, alpn: ["h2"])
        try expectNoEcho(host: "127.0.0.1", port: listener.port, context: context)
        let outcome = served.outcome()
        guard case .failed(let reason) = outcome.handshake else {
            Issue.record("server accepted a client from another CA: \(outcome.handshake)")
            return
        }
        #expect(reason.contains("client certificate failed verification"), "\(reason)")
        #expect(outcome.received.isEmpty)
    }

    @Test func clientWithoutCertificateIsRefused() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let serverContext = try mutualServer(certs)
        let served = TestServer(listener, context: serverContext)
        try expectNoEcho(host: "127.0.0.1", port: listener.port, context: try TLSClientContext(caFile: certs.caFile, alpn: ["h2"]))
        let outcome = served.outcome()
        #expect(outcome.handshake != .bytes(0))
    }

    /// Connecting either fails, or (TLS 1.3 checks the client certificate after the client
    /// finished) the first read fails instead of echoing.
    func expectNoEcho(host: String, port: Int, context: TLSClientContext) throws {
        let connection: TLSConnection
        do {
            connection = try TLSClient.connect(host: host, port: port, context: context, timeout: 10)
            setTimeouts(connection.fd)
        } catch {
            #expect(error.kind != .connectionFailed("timed out"))
            return
        }
        defer { connection.shutdown() }
        _ = writeAll(connection, Array("hello".utf8))
        let (bytes, last) = readExactly(connection, 5)
        #expect(bytes.isEmpty)
        #expect(last != .bytes(0))
    }

    @Test func clientTrustingAnotherCARefusesTheServer() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        // No client certificate asked for: the client's verification is the only reason to fail.
        let serverContext = try TLSServerContext(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)
        let served = TestServer(listener, context: serverContext)
        let context = try TLSClientContext(caFile: certs.otherCA, identity: nil, alpn: ["h2"])
        let error = #expect(throws: CryptoError.self) {
            try TLSClient.connect(host: "127.0.0.1", port: listener.port, context: context, timeout: 10)
        }
        guard case .tls(let reason)? = error?.kind else {
            Issue.record("expected a TLS error, got \(String(describing: error))")
            return
        }
        #expect(reason.contains("server certificate failed verification"), "\(reason)")
        #expect(error?.message.contains("127.0.0.1:\(listener.port)") == true)
        let outcome = served.outcome()
        #expect(outcome.handshake != .bytes(0))
    }

    @Test func serverNameIsChecked() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let server = try TLSServerContext(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)
        let client = try TLSClientContext(caFile: certs.caFile)

        let first = TestServer(listener, context: server)
        let wrong = try TLSConnection.client(fd: try tcpConnect(port: listener.port), context: client, serverName: "wrong.example")
        guard case .failed(let reason) = wrong.handshake() else {
            Issue.record("a certificate for localhost was accepted for wrong.example")
            return
        }
        #expect(reason.contains("hostname mismatch"), "\(reason)")
        wrong.shutdown()
        _ = first.outcome()

        let second = TestServer(listener, context: server)
        let right = try TLSConnection.client(fd: try tcpConnect(port: listener.port), context: client, serverName: "localhost")
        #expect(right.handshake() == .bytes(0))
        #expect(right.negotiatedALPN == nil)
        #expect(right.peerCertificate?.commonName == "localhost")
        right.shutdown()
        let outcome = second.outcome()
        #expect(outcome.handshake == .bytes(0))
        #expect(outcome.peer == nil)  // no client certificate asked for
    }

    @Test func requiredALPNRefusesClientsWithoutH2() throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let identity = try ClientIdentity.load(certificateFile: certs.clientCombined, keyFile: nil, passphrase: nil)
        for offered in [[], ["http/1.1"]] as [[String]] {
            let serverContext = try mutualServer(certs)
            let served = TestServer(listener, context: serverContext)
            let context = try TLSClientContext(caFile: certs.caFile, identity: identity, alpn: offered)
            let error = #expect(throws: CryptoError.self, "offered \(offered)") {
                try TLSClient.connect(host: "127.0.0.1", port: listener.port, context: context, timeout: 10)
            }
            #expect(error?.message.contains("no application protocol") == true, "\(String(describing: error))")
            let outcome = served.outcome()
            #expect(outcome.handshake != .bytes(0))
        }
        // Not required: such a client proceeds without ALPN.
        let serverContext = try mutualServer(certs, requireALPN: false)
        let served = TestServer(listener, context: serverContext)
        let context = try TLSClientContext(caFile: certs.caFile, identity: identity, alpn: ["http/1.1"])
        let connection = try TLSClient.connect(host: "127.0.0.1", port: listener.port, context: context, timeout: 10)
        #expect(connection.negotiatedALPN == nil)
        connection.shutdown()
        #expect(served.outcome().handshake == .bytes(0))
    }

    @Test func nonBlockingSocketsOnOneThread() throws {
        let certs = try TestCertificates.shared()
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let server = try TLSConnection.server(fd: fds[0], context: try mutualServer(certs))
        let client = try TLSConnection.client(fd: fds[1], context: try appleClient(certs), serverName: "127.0.0.1")
        defer { server.shutdown(); client.shutdown() }

        var serverDone = false, clientDone = false, sawWant = false
        for _ in 0..<100 where !(serverDone && clientDone) {
            for (side, connection) in [(0, client), (1, server)] where !(side == 0 ? clientDone : serverDone) {
                switch connection.handshake() {
                case .bytes: if side == 0 { clientDone = true } else { serverDone = true }
                case .wantRead, .wantWrite: sawWant = true
                case let other: Issue.record("handshake: \(other)"); return
                }
            }
        }
        #expect(serverDone && clientDone && sawWant)
        #expect(server.negotiatedALPN == "h2" && client.negotiatedALPN == "h2")

        // 1 MB through socket buffers far smaller than that: partial writes and wantWrite.
        let payload = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 % 251) }
        var written = 0, received: [UInt8] = [], partial = false, blocked = false
        var buffer = [UInt8](repeating: 0, count: 16384)
        for _ in 0..<100_000 where received.count < payload.count {
            write: while written < payload.count {  // until the socket is full
                switch payload[written...].withUnsafeBytes({ client.write($0) }) {
                case .bytes(let n): written += n; partial = partial || n < payload.count
                case .wantWrite, .wantRead: blocked = true; break write
                case let other: Issue.record("write: \(other)"); return
                }
            }
            read: while true {
                switch buffer.withUnsafeMutableBytes({ server.read(into: $0) }) {
                case .bytes(let n): received += buffer[0..<n]
                case .wantRead: break read
                case let other: Issue.record("read: \(other)"); return
                }
            }
        }
        #expect(received == payload)
        #expect(partial && blocked)
        client.shutdown()
        var end = TLSConnection.IOResult.wantRead
        for _ in 0..<100 where end == .wantRead { end = buffer.withUnsafeMutableBytes { server.read(into: $0) } }
        #expect(end == .closed)
    }

    @Test func writingToAClosedPeerFailsInsteadOfRaisingSIGPIPE() throws {
        let certs = try TestCertificates.shared()
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        let server = try TLSConnection.server(fd: fds[0], context: try mutualServer(certs, requireALPN: false))
        let client = try TLSConnection.client(fd: fds[1], context: try appleClient(certs), serverName: "localhost")
        let handshake = TestServerThread { server.handshake() }
        #expect(client.handshake() == .bytes(0))
        #expect(handshake.wait() == .bytes(0))
        server.shutdown()
        var result = TLSConnection.IOResult.bytes(0)
        let chunk = [UInt8](repeating: 7, count: 1000)
        for _ in 0..<50 {
            result = chunk.withUnsafeBytes { client.write($0) }
            if case .bytes = result { continue }
            break
        }
        #expect(result == .closed || { if case .failed = result { true } else { false } }(), "\(result)")
        client.shutdown()
    }

    @Test func opensslSClientAsIndependentPeer() async throws {
        let certs = try TestCertificates.shared()
        let listener = try TestListener()
        let serverContext = try mutualServer(certs)
        let served = TestServer(listener, context: serverContext, reply: (5, Array("pong\n".utf8)))
        let result = try await openssl(["s_client", "-connect", "127.0.0.1:\(listener.port)", "-CAfile", certs.caFile,
                                  "-verify_return_error", "-verify_ip", "127.0.0.1", "-alpn", "h2",
                                  "-cert", certs.clientCertificate, "-key", certs.clientKey, "-ign_eof"],
                                 stdin: "ping\n")
        let outcome = served.outcome()
        #expect(outcome.handshake == .bytes(0))
        #expect(outcome.alpn == "h2")
        #expect(outcome.peer?.commonName == "Apple Push Services: com.example.app")
        #expect(outcome.received == Array("ping\n".utf8))
        #expect(result.stdout.contains("ALPN protocol: h2"), "\(result.stdout)")
        #expect(result.stdout.contains("Verify return code: 0 (ok)"))
        #expect(result.stdout.contains("pong"))
    }

    @Test func connectionFailuresAreReported() throws {
        let certs = try TestCertificates.shared()
        let context = try TLSClientContext(caFile: certs.caFile)
        var closedPort = 0
        do { closedPort = try TestListener().port }  // bound, then closed again
        let refused = #expect(throws: CryptoError.self) {
            try TLSClient.connect(host: "127.0.0.1", port: closedPort, context: context, timeout: 5)
        }
        #expect(refused?.kind == .connectionFailed("Connection refused"))

        // A listener that never accepts: TCP connects (backlog), the handshake times out.
        let silent = try TestListener()
        let timedOut = #expect(throws: CryptoError.self) {
            try TLSClient.connect(host: "127.0.0.1", port: silent.port, context: context, timeout: 0.3)
        }
        #expect(timedOut?.kind == .connectionFailed("timed out"))
        #expect(timedOut?.message.contains("timed out") == true)
    }

    @Test func contextErrorsNameTheFile() throws {
        let certs = try TestCertificates.shared()
        let mismatch = #expect(throws: CryptoError.self) {
            try TLSServerContext(certificateFile: certs.serverCertificate, keyFile: certs.clientKey)
        }
        #expect(mismatch?.kind == .certificateMismatch)
        let missingCA = #expect(throws: CryptoError.self) { try TLSClientContext(caFile: "/nonexistent/ca.pem") }
        #expect(missingCA?.kind == .unreadableFile("/nonexistent/ca.pem"))
        let badALPN = #expect(throws: CryptoError.self) { try TLSClientContext(caFile: certs.caFile, alpn: [""]) }
        #expect(badALPN != nil)
        #expect(throws: Never.self) { try TLSClientContext(caFile: nil) }  // system CAs
    }
}
