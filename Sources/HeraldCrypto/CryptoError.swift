/// A key, certificate or TLS operation failed.
///
/// ``message`` says what went wrong and what to do about it, naming the file involved.
/// - Important: messages never contain key material or passphrases, so they are safe to log.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is, for callers that react differently to each.
    public enum Kind: Sendable, Equatable {
        /// A file could not be opened or read (missing, permissions); carries the path.
        case unreadableFile(String)
        /// The bytes are not what was expected (not PEM, not PKCS#12, corrupt ASN.1…).
        case invalidFormat(String)
        /// An encrypted key or PKCS#12 file could not be opened: the passphrase was wrong, or
        /// none was given for an encrypted file.
        case wrongPassphrase
        /// The key is of the wrong type or curve, e.g. "EC key on secp384r1; APNs needs P-256 (prime256v1)".
        case unsupportedKey(String)
        /// The private key does not belong to the certificate.
        case certificateMismatch
        /// A TLS handshake or TLS configuration failure (certificate verification, ALPN…).
        case tls(String)
        /// The TCP connection could not be made (refused, unreachable, name not found, timed out).
        case connectionFailed(String)
        /// Authenticated decryption failed: the ciphertext or its tag was altered, or another
        /// key or nonce was used.
        case authenticationFailed
        /// Anything else (an OpenSSL internal failure).
        case other(String)
    }

    /// What kind of failure this is.
    public var kind: Kind
    /// A complete, human-readable message: what failed and what to do next.
    public var message: String

    /// Creates an error; `message` must not include secrets.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The ``message``.
    public var description: String { message }
}
