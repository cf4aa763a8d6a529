internal import COpenSSL

/// HKDF with SHA-256 (RFC 5869) through OpenSSL's `EVP_KDF` "HKDF".
public enum HKDFSHA256 {
    /// The length of a pseudorandom key (and of one SHA-256 output).
    public static let hashLength = 32
    /// The longest output HKDF-SHA256 can give: 255 × 32 bytes.
    public static let maxOutputLength = 255 * 32

    /// HKDF-Extract: `PRK = HMAC-SHA256(salt, IKM)`, 32 bytes.
    public static func extract(salt: some Collection<UInt8>, inputKeyingMaterial: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        try run(mode: EVP_KDF_HKDF_MODE_EXTRACT_ONLY, key: Array(inputKeyingMaterial), salt: Array(salt), info: [], length: hashLength)
    }

    /// HKDF-Expand: `outputLength` bytes from a pseudorandom key and `info`.
    /// - Parameter outputLength: 1 to ``maxOutputLength``.
    public static func expand(pseudorandomKey: some Collection<UInt8>, info: some Collection<UInt8>,
                              outputLength: Int) throws(CryptoError) -> [UInt8] {
        try run(mode: EVP_KDF_HKDF_MODE_EXPAND_ONLY, key: Array(pseudorandomKey), salt: [], info: Array(info), length: outputLength)
    }

    /// Extract then expand: `outputLength` bytes of key from `inputKeyingMaterial`, `salt` and `info`.
    /// - Parameter outputLength: 1 to ``maxOutputLength``.
    public static func deriveKey(inputKeyingMaterial: some Collection<UInt8>, salt: some Collection<UInt8>,
                                 info: some Collection<UInt8>, outputLength: Int) throws(CryptoError) -> [UInt8] {
        try run(mode: EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, key: Array(inputKeyingMaterial), salt: Array(salt),
                info: Array(info), length: outputLength)
    }

    private static func run(mode: Int32, key: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws(CryptoError) -> [UInt8] {
        guard length >= 1, length <= maxOutputLength else {
            throw CryptoError(.other("HKDF output length"), "HKDF-SHA256 gives 1 to \(maxOutputLength) bytes, not \(length)")
        }
        ensureOpenSSL()
        ERR_clear_error()
        guard let kdf = fetchedHKDF.raw else {
            throw CryptoError(.other("HKDF unavailable"), "HKDF is not available in this OpenSSL\(openSSLSuffix())")
        }
        var out = [UInt8](repeating: 0, count: length)
        let ok = key.withUnsafeBufferPointer { k in
            salt.withUnsafeBufferPointer { s in
                info.withUnsafeBufferPointer { i in
                    out.withUnsafeMutableBufferPointer { o in
                        herald_hkdf_sha256(kdf, mode, k.baseAddress, k.count, s.baseAddress, s.count,
                                           i.baseAddress, i.count, o.baseAddress, o.count)
                    }
                }
            }
        }
        guard ok == 1 else { throw CryptoError(.other("HKDF failed"), "HKDF-SHA256 failed\(openSSLSuffix())") }
        return out
    }
}

/// The HKDF `EVP_KDF`, fetched once (freed never: it lives as long as the process).
private final class FetchedKDF: @unchecked Sendable {
    let raw: OpaquePointer?
    init() {
        ensureOpenSSL()
        raw = EVP_KDF_fetch(nil, "HKDF", nil)
    }
}
private let fetchedHKDF = FetchedKDF()

/// AES-128-GCM fetched once from the default provider (saves an implicit fetch, under
/// OpenSSL's global lock, on every seal and open).
private final class FetchedCipher: @unchecked Sendable {
    let raw: OpaquePointer?
    init(_ name: String) {
        ensureOpenSSL()
        raw = EVP_CIPHER_fetch(nil, name, nil)
    }
}
private let fetchedAES128GCM = FetchedCipher("AES-128-GCM")

/// AES-128-GCM (`EVP_aes_128_gcm`) with a 12-byte nonce and a 16-byte tag.
public enum AES128GCM {
    /// Key length in bytes.
    public static let keyLength = 16
    /// Nonce length in bytes.
    public static let nonceLength = 12
    /// Tag length in bytes.
    public static let tagLength = 16

    /// Encrypts `plaintext`.
    /// - Parameters:
    ///   - key: 16 bytes.
    ///   - nonce: 12 bytes; never use one twice with the same key.
    ///   - authenticatedData: data the tag covers but that is not encrypted.
    /// - Returns: the ciphertext (as long as the plaintext) followed by the 16-byte tag.
    public static func seal(_ plaintext: some Collection<UInt8>, key: [UInt8], nonce: [UInt8],
                            authenticating authenticatedData: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        try checkSizes(key: key, nonce: nonce)
        let input = Array(plaintext)
        var output = [UInt8](repeating: 0, count: input.count + tagLength)
        let ok = run(encrypt: true, key: key, nonce: nonce, aad: authenticatedData, input: input, output: &output)
        guard ok else { throw CryptoError(.other("AES-128-GCM failed"), "AES-128-GCM encryption failed\(openSSLSuffix())") }
        return output
    }

    /// Encrypts `buffer[start...]` in place and appends the 16-byte tag: one buffer for a
    /// header and its sealed record, no copies.
    public static func sealInPlace(_ buffer: inout [UInt8], from start: Int, key: [UInt8], nonce: [UInt8]) throws(CryptoError) {
        try checkSizes(key: key, nonce: nonce)
        precondition(start >= 0 && start <= buffer.count, "the sealed part starts inside the buffer")
        ensureOpenSSL()
        ERR_clear_error()
        let textLength = buffer.count - start
        buffer.append(contentsOf: repeatElement(0, count: tagLength))
        let ok = key.withUnsafeBufferPointer { k in
            nonce.withUnsafeBufferPointer { n in
                buffer.withUnsafeMutableBufferPointer { b in
                    let text = b.baseAddress! + start
                    return herald_aes128gcm(fetchedAES128GCM.raw, 1, k.baseAddress, n.baseAddress, nil, 0,
                                            text, textLength, text, text + textLength)
                }
            }
        }
        guard ok == 1 else { throw CryptoError(.other("AES-128-GCM failed"), "AES-128-GCM encryption failed\(openSSLSuffix())") }
    }

    /// Decrypts and authenticates `sealed` (ciphertext followed by the 16-byte tag).
    /// - Throws: ``CryptoError/Kind-swift.enum/authenticationFailed`` when the tag does not match.
    public static func open(_ sealed: some Collection<UInt8>, key: [UInt8], nonce: [UInt8],
                            authenticating authenticatedData: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        try checkSizes(key: key, nonce: nonce)
        let input = Array(sealed)
        guard input.count >= tagLength else {
            throw CryptoError(.authenticationFailed, "AES-128-GCM input of \(input.count) bytes is shorter than its \(tagLength)-byte tag")
        }
        var output = [UInt8](repeating: 0, count: input.count)
        guard run(encrypt: false, key: key, nonce: nonce, aad: authenticatedData, input: input, output: &output) else {
            ERR_clear_error()
            throw CryptoError(.authenticationFailed,
                              "AES-128-GCM authentication failed: the data or its tag was altered, or another key or nonce was used")
        }
        return Array(output[0..<(input.count - tagLength)])
    }

    private static func checkSizes(key: [UInt8], nonce: [UInt8]) throws(CryptoError) {
        guard key.count == keyLength else {
            throw CryptoError(.invalidFormat("AES-128 key of \(key.count) bytes"), "an AES-128-GCM key is \(keyLength) bytes, not \(key.count)")
        }
        guard nonce.count == nonceLength else {
            throw CryptoError(.invalidFormat("nonce of \(nonce.count) bytes"), "an AES-128-GCM nonce is \(nonceLength) bytes, not \(nonce.count)")
        }
    }

    /// Seals `input` into `output` (ciphertext || tag), or opens `input` (ciphertext || tag) into
    /// the front of `output`.
    private static func run(encrypt: Bool, key: [UInt8], nonce: [UInt8], aad: [UInt8], input: [UInt8], output: inout [UInt8]) -> Bool {
        ensureOpenSSL()
        ERR_clear_error()
        let textLength = encrypt ? input.count : input.count - tagLength
        var tag = encrypt ? [UInt8](repeating: 0, count: tagLength) : Array(input[textLength...])
        let ok = key.withUnsafeBufferPointer { k in
            nonce.withUnsafeBufferPointer { n in
                aad.withUnsafeBufferPointer { a in
                    input.withUnsafeBufferPointer { i in
                        output.withUnsafeMutableBufferPointer { o in
                            tag.withUnsafeMutableBufferPointer { t in
                                herald_aes128gcm(fetchedAES128GCM.raw, encrypt ? 1 : 0, k.baseAddress, n.baseAddress, a.baseAddress, a.count,
                                                 i.baseAddress, textLength, o.baseAddress, t.baseAddress)
                            }
                        }
                    }
                }
            }
        }
        guard ok == 1 else { return false }
        if encrypt { output.replaceSubrange(textLength..<output.count, with: tag) }
        return true
    }
}

/// Cryptographically secure random bytes (`RAND_bytes`).
public enum SecureRandom {
    /// `count` random bytes.
    public static func bytes(_ count: Int) throws(CryptoError) -> [UInt8] {
        guard count > 0 else { return [] }
        ensureOpenSSL()
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        guard ok == 1 else { throw CryptoError(.other("RAND_bytes failed"), "the random number generator failed\(openSSLSuffix())") }
        return out
    }
}
