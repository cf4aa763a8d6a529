/// The PEM files a binary simulator serves TLS with: mutual TLS, as Apple's gateway required.
public struct APNsBinaryTLSFiles: Sendable, Hashable {
    /// The server certificate chain (PEM).
    public var certificateFile: String
    /// The server's private key (PEM).
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
    /// A stream opener that runs a server-side TLS handshake requiring a client certificate.
    static func makeOpener(_ files: APNsBinaryTLSFiles) throws(BinarySimulatorError) -> BinaryStreamOpener {
        throw BinarySimulatorError("TLS is not available yet in this build (waiting for HeraldCrypto)")
    }
}
