internal import COpenSSL

/// An ES256 (ECDSA P-256 + SHA-256) signing key, e.g. an APNs `.p8` token-auth key.
///
/// Accepts PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, what Apple hands out) and SEC1 PEM
/// (`-----BEGIN EC PRIVATE KEY-----`). Keys on other curves, or of other types, are refused with
/// ``CryptoError/Kind-swift.enum/unsupportedKey(_:)`` naming what the key is. Safe to share
/// between threads.
public final class ES256SigningKey: Sendable {
    private let key: PKey
    /// The public half as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    public let publicKeyPEM: String

    /// Loads the key from a PEM file.
    public convenience init(pemFile path: String) throws(CryptoError) {
        let bytes = try readFile(path, what: "signing key")
        try self.init(bytes: bytes, source: path)
    }

    /// Loads the key from PEM text.
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(bytes: Array(pem.utf8), source: "the PEM key text")
    }

    private convenience init(bytes: [UInt8], source: String) throws(CryptoError) {
        let key = try loadUnencryptedPrivateKey(bytes, source: source, why: "ES256 keys must be unencrypted PEM, as Apple's .p8 files are")
        try self.init(key: key, source: source)
    }

    /// Wraps an already-loaded key (checked here to be P-256).
    init(key: PKey, source: String) throws(CryptoError) {
        try ES256SigningKey.checkP256(key.raw, source: source)
        self.key = key
        publicKeyPEM = try HeraldCrypto.publicKeyPEM(of: key, source: source)
    }

    /// Refuses a key that is not on P-256. `purpose` ends the description (default: for APNs);
    /// `hint` says where a right key comes from.
    static func checkP256(_ key: OpaquePointer, source: String,
                          purpose: String = "APNs needs P-256 (prime256v1)",
                          hint: String = "Create an APNs key in the Apple Developer portal or") throws(CryptoError) {
        let described = describeKey(key)
        guard described.isEC, described.curve == "prime256v1" else {
            let what = "\(described.text); \(purpose)"
            throw CryptoError(.unsupportedKey(what),
                              "\(source) holds an \(what). \(hint) "
                              + "with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`")
        }
    }

    /// The matching verifying (public) key.
    public var verifyingKey: ES256VerifyingKey {
        // Re-parsing our own PEM cannot fail.
        try! ES256VerifyingKey(pem: publicKeyPEM)
    }

    /// Signs `message` (hashed with SHA-256 here).
    /// - Returns: the 64-byte raw `R || S` signature, as JWS (JWT) uses, not DER.
    public func sign(_ message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        ensureOpenSSL()
        ERR_clear_error()
        let result: [UInt8]? = withBytes(message) { input -> [UInt8]? in
            guard let context = EVP_MD_CTX_new() else { return nil }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestSignInit(context, nil, sha256Digest, nil, key.raw) == 1 else { return nil }
            var der = [UInt8](repeating: 0, count: 80)
            var length = der.count
            let data = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard EVP_DigestSign(context, &der, &length, data, input.count) == 1 else { return nil }
            return DER.rawSignature(fromDER: der[0..<length])
        }
        guard let result else {
            throw CryptoError(.other("ES256 signing failed"), "ES256 signing failed\(openSSLSuffix())")
        }
        return result
    }
}

/// An ES256 public key, for checking JWT signatures (the APNs simulator uses it).
public final class ES256VerifyingKey: Sendable {
    private let key: PKey

    /// Loads a SubjectPublicKeyInfo PEM file (`-----BEGIN PUBLIC KEY-----`); P-256 only.
    public convenience init(pemFile path: String) throws(CryptoError) {
        let bytes = try readFile(path, what: "public key")
        try self.init(bytes: bytes, source: path)
    }

    /// Loads SubjectPublicKeyInfo PEM text; P-256 only.
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(bytes: Array(pem.utf8), source: "the PEM public key text")
    }

    private init(bytes: [UInt8], source: String) throws(CryptoError) {
        ERR_clear_error()
        let raw = try withMemoryBIO(bytes) { bio in herald_pem_read_pubkey(bio) }
        guard let raw else {
            throw CryptoError(.invalidFormat("no PEM public key"),
                              "\(source) holds no PEM public key (expected -----BEGIN PUBLIC KEY-----)\(openSSLSuffix())")
        }
        key = PKey(raw)
        try ES256SigningKey.checkP256(raw, source: source)
    }

    /// Wraps a key already known to be P-256 (a ``P256PublicKey``'s).
    init(key: PKey) {
        self.key = key
    }

    /// Whether `signature` (64-byte raw `R || S`) is a valid ES256 signature of `message`.
    /// Anything malformed is simply `false`.
    public func verify(signature: some Collection<UInt8>, message: some Collection<UInt8>) -> Bool {
        guard let der = DER.derSignature(fromRaw: signature) else { return false }
        ensureOpenSSL()
        ERR_clear_error()
        defer { ERR_clear_error() }
        return withBytes(message) { input -> Bool in
            guard let context = EVP_MD_CTX_new() else { return false }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestVerifyInit(context, nil, sha256Digest, nil, key.raw) == 1 else { return false }
            let data = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return der.withUnsafeBufferPointer { sig in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, data, input.count) == 1
            }
        }
    }
}
