import HeraldCrypto

/// The PEM files a binary simulator serves TLS with: mutual TLS, as Apple's gateway required.
public struct APNsBinaryTLSFiles: Sendable, Hashable {
    /// The server certificate chain (PEM).
    public var certificateFile: String
    /// The server's private key (PEM, unencrypted).
    public var keyFile: String
    /// CA certificates (PEM) that client certificates must chain to; clients without a valid
    /// certificate are refused at the handshake.
    public var clientCAFile: String

    public init(certificateFile: String, keyFile: String, clientCAFile: String) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.clientCAFile = clientCAFile
    }
}

enum BinaryTLS {
    /// A stream opener for server-side TLS that requires a client certificate from `clientCAFile`.
    /// - Throws: when a file is missing or unusable, naming it.
    static func makeOpener(_ files: APNsBinaryTLSFiles) throws(BinarySimulatorError) -> BinaryStreamOpener {
        let context: TLSServerContext
        do {
            context = try TLSServerContext(certificateFile: files.certificateFile, keyFile: files.keyFile,
                                           clientCAFile: files.clientCAFile)
        } catch {
            throw BinarySimulatorError("cannot set up TLS: \(error.description)")
        }
        return { fd in
            do {
                return .success(BinaryTLSStream(try TLSConnection.server(fd: fd, context: context)))
            } catch {
                return .failure(BinarySimulatorError("cannot start TLS: \(error)"))
            }
        }
    }
}

/// TLS over an accepted socket (HeraldCrypto); the connection owns and closes the socket.
final class BinaryTLSStream: BinaryByteStream {
    private let connection: TLSConnection
    private(set) var client: APNsBinaryClientIdentity?
    var fd: Int32 { connection.fd }

    init(_ connection: TLSConnection) { self.connection = connection }

    func handshake() -> String? {
        switch connection.handshake() {
        case .bytes:
            if let info = connection.peerCertificate {
                client = APNsBinaryClientIdentity(subject: info.subject, uid: info.uid, topics: info.topics)
            }
            return nil
        case .wantRead, .wantWrite:
            return "the TLS handshake timed out"
        case .closed:
            return "the client closed the connection during the TLS handshake"
        case .failed(let reason):
            return "TLS handshake failed: \(reason)"
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> BinaryReadResult {
        switch connection.read(into: buffer) {
        case .bytes(let n): return .bytes(n)
        case .wantRead, .wantWrite: return .timedOut
        case .closed: return .closed
        case .failed(let reason): return .failed(reason)
        }
    }

    func write(_ bytes: [UInt8]) -> String? {
        var sent = 0
        while sent < bytes.count {
            let result = bytes.withUnsafeBytes { connection.write(UnsafeRawBufferPointer(rebasing: $0[sent...])) }
            switch result {
            case .bytes(let n): sent += n
            case .wantRead, .wantWrite: return "write timed out"
            case .closed: return "the client closed the connection"
            case .failed(let reason): return reason
            }
        }
        return nil
    }

    func close() { connection.shutdown() }
}
