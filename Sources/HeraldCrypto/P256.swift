internal import COpenSSL
import HeraldCore

/// A P-256 (prime256v1, secp256r1) private key, for ECDH (Web Push message encryption) and
/// ES256 (VAPID).
///
/// Loads from PEM (SEC1 `-----BEGIN EC PRIVATE KEY-----` or PKCS#8 `-----BEGIN PRIVATE KEY-----`)
/// or from the raw 32-byte private scalar, the form VAPID keys are usually handed out in
/// (base64url, as `web-push generate-vapid-keys` prints them). Safe to share between threads.
public final class P256PrivateKey: Sendable {
    let key: PKey
    /// The public half.
    public let publicKey: P256PublicKey
    /// An ES256 signing key over the same key (for VAPID JWTs).
    public let signingKey: ES256SigningKey

    /// Loads the key from a PEM file.
    public convenience init(pemFile path: String) throws(CryptoError) {
        let bytes = try readFile(path, what: "P-256 private key")
        try self.init(pemBytes: bytes, source: path)
    }

    /// Loads the key from PEM text.
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(pemBytes: Array(pem.utf8), source: "the PEM key text")
    }

    private convenience init(pemBytes: [UInt8], source: String) throws(CryptoError) {
        let key: PKey
        do {
            key = try loadPrivateKey(pemBytes, source: source, passphrase: nil)
        } catch where error.kind == .wrongPassphrase {
            throw CryptoError(.invalidFormat("encrypted key"), "\(source) is an encrypted key; P-256 keys must be unencrypted PEM")
        }
        try ES256SigningKey.checkP256(key.raw, source: source, purpose: "a P-256 (prime256v1) key is needed",
                                      hint: "Make one")
        try self.init(key: key, source: source)
    }

    /// Loads the key from its raw 32-byte private scalar (big-endian).
    /// - Throws: ``CryptoError/Kind-swift.enum/invalidFormat(_:)`` when it is not 32 bytes, or
    ///   is zero or not below the curve's order (the message never shows the bytes).
    public convenience init(rawRepresentation: some Collection<UInt8>) throws(CryptoError) {
        try self.init(raw: Array(rawRepresentation), source: "the raw P-256 private key")
    }

    /// Loads the key from the base64url of its raw 32-byte private scalar (padding tolerated).
    /// - Parameter source: names the input in errors, e.g. `transports.webpush.vapid.privateKey`.
    public convenience init(base64URL text: String, source: String = "the base64url P-256 private key") throws(CryptoError) {
        let trimmed = text.trimmingWhitespace
        guard let bytes = Base64URL.decode(trimmed) else {
            throw CryptoError(.invalidFormat("not base64url"),
                              "\(source) is not base64url text; a raw P-256 private key is 43 base64url characters (32 bytes)")
        }
        try self.init(raw: bytes, source: source)
    }

    private convenience init(raw: [UInt8], source: String) throws(CryptoError) {
        guard raw.count == 32 else {
            throw CryptoError(.invalidFormat("raw private key of \(raw.count) bytes"),
                              "\(source) is \(raw.count) bytes; a raw P-256 private key is exactly 32 bytes")
        }
        ensureOpenSSL()
        ERR_clear_error()
        var status: Int32 = 0
        let made = raw.withUnsafeBufferPointer { herald_p256_from_private($0.baseAddress, $0.count, &status) }
        guard let made else {
            if status == -1 {
                ERR_clear_error()
                throw CryptoError(.invalidFormat("private scalar out of range"),
                                  "\(source) is not a valid P-256 private key (zero, or not below the curve's order)")
            }
            throw CryptoError(.other("P-256 key import failed"), "cannot import \(source)\(openSSLSuffix())")
        }
        try self.init(key: PKey(made), source: source)
    }

    private init(key: PKey, source: String) throws(CryptoError) {
        self.key = key
        publicKey = try P256PublicKey(publicHalfOf: key, source: source)
        signingKey = try ES256SigningKey(key: key, source: source)
    }

    /// Makes a new random key pair.
    public static func generate() throws(CryptoError) -> P256PrivateKey {
        ensureOpenSSL()
        ERR_clear_error()
        guard let raw = herald_p256_generate() else {
            throw CryptoError(.other("P-256 key generation failed"), "P-256 key generation failed\(openSSLSuffix())")
        }
        return try P256PrivateKey(key: PKey(raw), source: "the generated key")
    }

    /// The raw 32-byte private scalar (big-endian), the form VAPID private keys are shared in.
    /// - Important: this is the secret key; never log it.
    public var rawRepresentation: [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        // A loaded P-256 private key always has a scalar below 2^256.
        let ok = out.withUnsafeMutableBufferPointer { herald_ec_private_scalar(key.raw, $0.baseAddress, 32) }
        precondition(ok == 1, "P-256 private key without a private scalar")
        return out
    }

    /// The key as unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    /// - Important: this is the secret key; never log it.
    public var pemRepresentation: String {
        let bytes = memoryBIOOutput { PEM_write_bio_PrivateKey($0, key.raw, nil, nil, 0, nil, nil) == 1 } ?? []
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The ECDH shared secret with `peer` (`EVP_PKEY_derive`): the 32-byte x-coordinate of the
    /// shared point, as RFC 8291 uses it (`ecdh_secret`).
    public func sharedSecret(with peer: P256PublicKey) throws(CryptoError) -> [UInt8] {
        try ecdh(key, peer.key)
    }
}

/// A P-256 public key: a Web Push subscription's `p256dh`, or the `k` of a VAPID header.
public final class P256PublicKey: Sendable, Equatable {
    let key: PKey
    /// The 65-byte uncompressed point `0x04 || X || Y` (X9.62), the form Web Push uses.
    public let uncompressedRepresentation: [UInt8]

    /// Loads the key from the 65-byte uncompressed point.
    /// - Parameter source: names the input in errors, e.g. `the subscription's p256dh`.
    /// - Throws: ``CryptoError/Kind-swift.enum/invalidFormat(_:)`` unless it is 65 bytes starting
    ///   with 0x04 and the point is on the curve.
    public init(uncompressed bytes: some Collection<UInt8>, source: String = "the P-256 public key") throws(CryptoError) {
        let point = Array(bytes)
        guard point.count == 65, point[0] == 0x04 else {
            let found = point.isEmpty ? "0 bytes" : "\(point.count) bytes starting with 0x\(String(point[0], radix: 16))"
            throw CryptoError(.invalidFormat("not an uncompressed P-256 point"),
                              "\(source) is \(found); a P-256 public key is 65 bytes, 0x04 followed by X and Y")
        }
        ensureOpenSSL()
        ERR_clear_error()
        guard let raw = point.withUnsafeBufferPointer({ herald_p256_from_public($0.baseAddress, $0.count) }) else {
            ERR_clear_error()
            throw CryptoError(.invalidFormat("point not on P-256"), "\(source) is not a point on the P-256 curve")
        }
        key = PKey(raw)
        uncompressedRepresentation = point
    }

    /// Loads the key from the base64url of its 65-byte uncompressed point (padding tolerated).
    public convenience init(base64URL text: String, source: String = "the P-256 public key") throws(CryptoError) {
        guard let bytes = Base64URL.decode(text.trimmingWhitespace) else {
            throw CryptoError(.invalidFormat("not base64url"),
                              "\(source) is not base64url text; a P-256 public key is 87 base64url characters (65 bytes)")
        }
        try self.init(uncompressed: bytes, source: source)
    }

    /// The public half of a loaded private key.
    fileprivate init(publicHalfOf key: PKey, source: String) throws(CryptoError) {
        var point = [UInt8](repeating: 0, count: 65)
        let length = point.withUnsafeMutableBufferPointer { herald_ec_public_point(key.raw, $0.baseAddress, 65) }
        guard length == 65, point[0] == 0x04 else {
            throw CryptoError(.other("public point export failed"), "cannot export the public key of \(source)\(openSSLSuffix())")
        }
        self.key = key
        uncompressedRepresentation = point
    }

    /// Whether `bytes` is a 65-byte uncompressed point on P-256 (a usable `p256dh` or VAPID `k`).
    public static func isValidUncompressedPoint(_ bytes: some Collection<UInt8>) -> Bool {
        (try? P256PublicKey(uncompressed: bytes)) != nil
    }

    /// The point as unpadded base64url (87 characters), as `p256dh` and VAPID `k` are written.
    public var base64URL: String { Base64URL.encode(uncompressedRepresentation) }

    /// An ES256 verifying key over the same key (to check VAPID JWTs).
    public var verifyingKey: ES256VerifyingKey { ES256VerifyingKey(key: key) }

    /// Two keys are equal when their points are.
    public static func == (lhs: P256PublicKey, rhs: P256PublicKey) -> Bool {
        lhs.uncompressedRepresentation == rhs.uncompressedRepresentation
    }
}

extension String {
    /// The text without leading and trailing spaces, tabs and line breaks (keys pasted from files).
    var trimmingWhitespace: Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }) else { return self[endIndex...] }
        let last = lastIndex(where: { !isSpace($0) })!
        return self[first...last]
    }
}

/// A one-use P-256 key pair for ECDH, as a Web Push message's ephemeral key: the bare
/// `EVP_PKEY` and its public point, without the signing key and PEM a ``P256PrivateKey`` makes.
/// Made by ``P256EphemeralKey/generate()`` from a prepared key-generation context.
public struct P256EphemeralKey: Sendable {
    let key: PKey
    /// The 65-byte uncompressed public point `0x04 || X || Y`.
    public let publicPoint: [UInt8]

    /// Makes a new random key pair.
    public static func generate() throws(CryptoError) -> P256EphemeralKey {
        try P256KeyGenerator.shared.generate()
    }

    /// The ECDH shared secret with `peer`: the 32-byte x-coordinate of the shared point.
    public func sharedSecret(with peer: P256PublicKey) throws(CryptoError) -> [UInt8] {
        try ecdh(key, peer.key)
    }
}

/// P-256 key generation from prepared `EVP_PKEY_CTX`s (EC, `keygen_init` and the group set
/// once), so a key costs `EVP_PKEY_generate` and no algorithm fetch. A context serves one thread
/// at a time: each call takes one from the pool (or makes one) and puts it back.
final class P256KeyGenerator: Sendable {
    static let shared = P256KeyGenerator()

    /// An owned, prepared context; used by one thread at a time (taken out of the pool).
    private final class Context: @unchecked Sendable {
        let raw: OpaquePointer
        init(_ raw: OpaquePointer) { self.raw = raw }
        deinit { EVP_PKEY_CTX_free(raw) }
    }

    /// Contexts kept for reuse: as many as threads generate at once, at most this many.
    private static let poolLimit = 16
    private let pool = Locked<[Context]>([])

    func generate() throws(CryptoError) -> P256EphemeralKey {
        ensureOpenSSL()
        ERR_clear_error()
        let context: Context
        if let c = pool.withLock({ $0.popLast() }) {
            context = c
        } else if let raw = herald_p256_keygen_ctx() {
            context = Context(raw)
        } else {
            throw CryptoError(.other("P-256 key generation failed"), "P-256 key generation set-up failed\(openSSLSuffix())")
        }
        var point = [UInt8](repeating: 0, count: 65)
        let made = point.withUnsafeMutableBufferPointer { herald_p256_generate_with(context.raw, $0.baseAddress, 65) }
        pool.withLock { if $0.count < Self.poolLimit { $0.append(context) } }
        guard let made else {
            throw CryptoError(.other("P-256 key generation failed"), "P-256 key generation failed\(openSSLSuffix())")
        }
        return P256EphemeralKey(key: PKey(made), publicPoint: point)
    }
}

/// ECDH (`EVP_PKEY_derive`) of `own` with `peer`: the 32-byte shared x-coordinate.
func ecdh(_ own: PKey, _ peer: PKey) throws(CryptoError) -> [UInt8] {
    ensureOpenSSL()
    ERR_clear_error()
    var out = [UInt8](repeating: 0, count: 32)
    let length = out.withUnsafeMutableBufferPointer { herald_ecdh(own.raw, peer.raw, $0.baseAddress, 32) }
    guard length == 32 else {
        throw CryptoError(.other("ECDH failed"), "P-256 key agreement failed\(openSSLSuffix())")
    }
    return out
}
