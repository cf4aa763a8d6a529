internal import COpenSSL

/// An RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signing key, e.g. the `private_key` of a Google
/// service account, which signs the JWT of the OAuth 2.0 JWT-bearer flow that FCM HTTP v1 needs.
///
/// Accepts PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, what Google's service-account JSON holds)
/// and PKCS#1 PEM (`-----BEGIN RSA PRIVATE KEY-----`, what `openssl genrsa` wrote before 3.0).
/// Keys of other types, and RSA keys shorter than ``minimumBits``, are refused with
/// ``CryptoError/Kind-swift.enum/unsupportedKey(_:)`` naming what the key is. Safe to share
/// between threads.
public final class RS256SigningKey: Sendable {
    /// The shortest RSA key accepted, in bits (Google's service-account keys have 2048).
    public static let minimumBits = 2048

    let key: PKey
    /// The public half as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    public let publicKeyPEM: String
    /// The key's size in bits (the signature is this many bits long).
    public let bits: Int

    /// Loads the key from a PEM file.
    public convenience init(pemFile path: String) throws(CryptoError) {
        let bytes = try readFile(path, what: "RSA private key")
        try self.init(bytes: bytes, source: path)
    }

    /// Loads the key from PEM text (a service account's `private_key`, with real newlines).
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(bytes: Array(pem.utf8), source: "the PEM private key text")
    }

    private convenience init(bytes: [UInt8], source: String) throws(CryptoError) {
        let key = try loadUnencryptedPrivateKey(bytes, source: source, why: "RS256 keys must be unencrypted PEM, as a service account's private_key is")
        try self.init(key: key, source: source)
    }

    init(key: PKey, source: String) throws(CryptoError) {
        bits = try RS256SigningKey.checkRSA(key.raw, source: source)
        self.key = key
        publicKeyPEM = try HeraldCrypto.publicKeyPEM(of: key, source: source)
    }

    /// Makes a new random RSA key (public exponent 65537), e.g. for a simulator's service account.
    /// - Parameter bits: at least ``minimumBits``.
    public static func generate(bits: Int = 2048) throws(CryptoError) -> RS256SigningKey {
        guard bits >= minimumBits, bits <= 16384 else {
            throw CryptoError(.unsupportedKey("RSA key of \(bits) bits"),
                              "cannot make an RSA key of \(bits) bits; RS256 keys have \(minimumBits) to 16384 bits")
        }
        ensureOpenSSL()
        ERR_clear_error()
        guard let raw = herald_rsa_generate(UInt32(bits)) else {
            throw CryptoError(.other("RSA key generation failed"), "RSA key generation failed\(openSSLSuffix())")
        }
        return try RS256SigningKey(key: PKey(raw), source: "the generated key")
    }

    /// Checks that `key` is an RSA key of at least ``minimumBits``; returns its size in bits.
    static func checkRSA(_ key: OpaquePointer, source: String) throws(CryptoError) -> Int {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA else {
            let what = "\(describeKey(key).text); RS256 needs an RSA key"
            throw CryptoError(.unsupportedKey(what),
                              "\(source) holds an \(what). Use the private_key of a Google service account, "
                              + "or make one with `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048`")
        }
        let bits = Int(EVP_PKEY_get_bits(key))
        guard bits >= minimumBits else {
            let what = "RSA key of \(bits) bits; RS256 needs at least \(minimumBits)"
            throw CryptoError(.unsupportedKey(what), "\(source) holds an \(what)")
        }
        return bits
    }

    /// The key as unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as a service-account
    /// JSON file carries it.
    /// - Important: this is the secret key; never log it.
    public var pemRepresentation: String {
        // Writing a loaded key into memory cannot fail short of running out of memory.
        let bytes = memoryBIOOutput { PEM_write_bio_PrivateKey($0, key.raw, nil, nil, 0, nil, nil) == 1 } ?? []
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The matching verifying (public) key.
    public var verifyingKey: RS256VerifyingKey { RS256VerifyingKey(checked: key, bits: bits) }

    /// Signs `message` (hashed with SHA-256 here, PKCS#1 v1.5 padding).
    /// - Returns: the signature, `bits / 8` bytes.
    public func sign(_ message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        ensureOpenSSL()
        ERR_clear_error()
        let result: [UInt8]? = withBytes(message) { input -> [UInt8]? in
            guard let context = EVP_MD_CTX_new() else { return nil }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestSignInit(context, nil, sha256Digest, nil, key.raw) == 1 else { return nil }
            var signature = [UInt8](repeating: 0, count: Int(EVP_PKEY_get_size(key.raw)))
            var length = signature.count
            let data = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard EVP_DigestSign(context, &signature, &length, data, input.count) == 1 else { return nil }
            return Array(signature[0..<length])
        }
        guard let result else {
            throw CryptoError(.other("RS256 signing failed"), "RS256 signing failed\(openSSLSuffix())")
        }
        return result
    }
}

/// An RS256 public key, for checking JWT signatures (the FCM simulator checks the OAuth
/// assertion with it).
public final class RS256VerifyingKey: Sendable {
    private let key: PKey
    /// The key's size in bits.
    public let bits: Int

    /// Loads a SubjectPublicKeyInfo PEM file (`-----BEGIN PUBLIC KEY-----`); RSA only.
    public convenience init(pemFile path: String) throws(CryptoError) {
        let bytes = try readFile(path, what: "RSA public key")
        try self.init(bytes: bytes, source: path)
    }

    /// Loads SubjectPublicKeyInfo PEM text (`-----BEGIN PUBLIC KEY-----`); RSA only.
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
        bits = try RS256SigningKey.checkRSA(raw, source: source)
    }

    /// The public half of an already-checked private key (OpenSSL verifies with either).
    fileprivate init(checked key: PKey, bits: Int) {
        self.key = key
        self.bits = bits
    }

    /// Whether `signature` is a valid RS256 signature of `message`. Anything malformed is simply `false`.
    public func verify(signature: some Collection<UInt8>, message: some Collection<UInt8>) -> Bool {
        ensureOpenSSL()
        ERR_clear_error()
        defer { ERR_clear_error() }
        let signatureBytes = Array(signature)
        guard !signatureBytes.isEmpty else { return false }
        return withBytes(message) { input -> Bool in
            guard let context = EVP_MD_CTX_new() else { return false }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestVerifyInit(context, nil, sha256Digest, nil, key.raw) == 1 else { return false }
            let data = input.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return signatureBytes.withUnsafeBufferPointer { sig in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, data, input.count) == 1
            }
        }
    }
}
