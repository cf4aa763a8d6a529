internal import COpenSSL

/// Why a Web Push message could not be encrypted or decrypted. The ``description`` names the
/// input at fault and never contains key material or plaintext.
public enum WebPushEncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The subscription's `p256dh` is not a 65-byte uncompressed P-256 point; says why.
    case invalidUserAgentPublicKey(String)
    /// The subscription's `auth` secret is not 16 bytes; carries its length.
    case invalidAuthSecret(length: Int)
    /// The plaintext is longer than ``WebPushEncryption/maxPlaintextLength``.
    case plaintextTooLong(length: Int, maximum: Int)
    /// The body is not an `aes128gcm` body this code reads (header, record size, several records); says what.
    case malformedBody(String)
    /// The body's `keyid` (the sender's public key) is not a P-256 point.
    case invalidSenderPublicKey
    /// The record did not authenticate: the body was altered, or it was encrypted for another
    /// key or auth secret.
    case authenticationFailed
    /// The decrypted record does not end with the last-record delimiter 0x02 (and zero padding).
    case invalidPadding
    /// An OpenSSL failure (out of memory, a broken library); carries its message.
    case crypto(String)

    public var description: String {
        switch self {
        case .invalidUserAgentPublicKey(let why): return "invalid p256dh (the subscription's public key): \(why)"
        case .invalidAuthSecret(let length):
            return "invalid auth secret: \(length) bytes; a subscription's auth secret is \(WebPushEncryption.authSecretLength) bytes"
        case .plaintextTooLong(let length, let maximum):
            return "the payload is \(length) bytes; Web Push carries at most \(maximum) bytes of plaintext in a 4096-byte body"
        case .malformedBody(let why): return "malformed aes128gcm body: \(why)"
        case .invalidSenderPublicKey: return "the aes128gcm body's keyid is not a P-256 public key"
        case .authenticationFailed:
            return "the aes128gcm record did not authenticate: the body was altered, or encrypted for another key or auth secret"
        case .invalidPadding: return "the decrypted aes128gcm record does not end with the 0x02 delimiter and zero padding"
        case .crypto(let message): return message
        }
    }
}

/// Web Push message encryption (RFC 8291) in the `aes128gcm` content coding (RFC 8188).
///
/// A body is one record: the header `salt (16) || rs (4, big-endian) || idlen (1) = 65 ||
/// keyid (65, the sender's ephemeral public key)` followed by the AES-128-GCM encryption of
/// `plaintext || 0x02` and its 16-byte tag. Send it with `Content-Encoding: aes128gcm`.
public enum WebPushEncryption {
    /// The record size written in the header: 4096, what push services expect.
    public static let recordSize: UInt32 = 4096
    /// The header's length: 16 + 4 + 1 + 65 bytes.
    public static let headerLength = 86
    /// The largest body a push service must accept (RFC 8030 §7.2).
    public static let maxBodyLength = 4096
    /// The longest plaintext that fits a 4096-byte body: 4096 − 86 (header) − 16 (tag) − 1 (delimiter) = 3993 (RFC 8291 §4).
    public static let maxPlaintextLength = maxBodyLength - headerLength - AES128GCM.tagLength - 1
    /// The length of a subscription's `auth` secret.
    public static let authSecretLength = 16
    /// The length of the salt.
    public static let saltLength = 16

    /// Encrypts `plaintext` for a subscription, with a fresh ephemeral P-256 key and a fresh
    /// random salt.
    /// - Parameters:
    ///   - userAgentPublicKey: the subscription's `p256dh`.
    ///   - authSecret: the subscription's `auth`, 16 bytes.
    /// - Returns: the request body.
    public static func encrypt(plaintext: some Collection<UInt8>, userAgentPublicKey: P256PublicKey,
                               authSecret: some Collection<UInt8>) throws(WebPushEncryptionError) -> [UInt8] {
        let ephemeral: P256EphemeralKey
        let salt: [UInt8]
        do {
            ephemeral = try P256EphemeralKey.generate()
            salt = try SecureRandom.bytes(saltLength)
        } catch {
            throw .crypto(error.message)
        }
        return try encrypt(plaintext: plaintext, userAgentPublicKey: userAgentPublicKey, authSecret: authSecret,
                           ephemeralKey: ephemeral.key, ephemeralPoint: ephemeral.publicPoint, salt: salt)
    }

    /// Encrypts `plaintext` for a subscription given as bytes (`p256dh`, 65 bytes; `auth`, 16 bytes).
    public static func encrypt(plaintext: some Collection<UInt8>, userAgentPublicKey: some Collection<UInt8>,
                               authSecret: some Collection<UInt8>) throws(WebPushEncryptionError) -> [UInt8] {
        let key: P256PublicKey
        do {
            key = try P256PublicKey(uncompressed: userAgentPublicKey, source: "p256dh")
        } catch {
            throw .invalidUserAgentPublicKey(error.message)
        }
        return try encrypt(plaintext: plaintext, userAgentPublicKey: key, authSecret: authSecret)
    }

    /// Encrypts with a given ephemeral key and salt: deterministic, for the RFC 8291 test vector.
    /// - Important: a key and salt must never be used twice; senders use the other `encrypt`.
    static func encrypt(plaintext: some Collection<UInt8>, userAgentPublicKey: P256PublicKey, authSecret: some Collection<UInt8>,
                        ephemeralKey: P256PrivateKey, salt: [UInt8]) throws(WebPushEncryptionError) -> [UInt8] {
        try encrypt(plaintext: plaintext, userAgentPublicKey: userAgentPublicKey, authSecret: authSecret,
                    ephemeralKey: ephemeralKey.key, ephemeralPoint: ephemeralKey.publicKey.uncompressedRepresentation, salt: salt)
    }

    /// The body in one buffer: the header, then `plaintext || 0x02` sealed in place after it.
    private static func encrypt(plaintext: some Collection<UInt8>, userAgentPublicKey: P256PublicKey, authSecret: some Collection<UInt8>,
                                ephemeralKey: PKey, ephemeralPoint: [UInt8], salt: [UInt8]) throws(WebPushEncryptionError) -> [UInt8] {
        let auth = Array(authSecret)
        guard auth.count == authSecretLength else { throw .invalidAuthSecret(length: auth.count) }
        precondition(salt.count == saltLength, "the salt is 16 bytes")
        let length = plaintext.count
        guard length <= maxPlaintextLength else {
            throw .plaintextTooLong(length: length, maximum: maxPlaintextLength)
        }
        let keys = try deriveKeys(ownKey: ephemeralKey, peerKey: userAgentPublicKey.key,
                                  userAgentPoint: userAgentPublicKey.uncompressedRepresentation, senderPoint: ephemeralPoint,
                                  authSecret: auth, salt: salt)
        var body = header(salt: salt, senderPoint: ephemeralPoint, extra: length + 1 + AES128GCM.tagLength)
        body += plaintext
        body.append(0x02)  // the last (and only) record's delimiter, no padding
        do {
            try AES128GCM.sealInPlace(&body, from: headerLength, key: keys.contentEncryptionKey, nonce: keys.nonce)
        } catch {
            throw .crypto(error.message)
        }
        return body
    }

    /// The parsed `aes128gcm` header of a body.
    public struct Header: Sendable, Equatable {
        /// The 16-byte salt.
        public var salt: [UInt8]
        /// The record size (`rs`).
        public var recordSize: UInt32
        /// The `keyid`: for Web Push, the sender's 65-byte ephemeral public key.
        public var keyID: [UInt8]
        /// The length of the header (86 for Web Push).
        public var length: Int { 21 + keyID.count }
    }

    /// Reads the header of an `aes128gcm` body (RFC 8188 §2.1).
    /// - Throws: ``WebPushEncryptionError/malformedBody(_:)`` when it is too short or `rs` is below 18.
    public static func parseHeader(_ body: [UInt8]) throws(WebPushEncryptionError) -> Header {
        guard body.count >= 21 else { throw .malformedBody("\(body.count) bytes is shorter than the 21-byte header start") }
        let rs = body[16..<20].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard rs >= 18 else { throw .malformedBody("record size \(rs) is below the minimum of 18") }
        let idLength = Int(body[20])
        guard body.count >= 21 + idLength else {
            throw .malformedBody("\(body.count) bytes is shorter than the header with its \(idLength)-byte keyid")
        }
        return Header(salt: Array(body[0..<16]), recordSize: rs, keyID: Array(body[21..<(21 + idLength)]))
    }

    /// Decrypts a body, as a user agent (or a simulator standing for one) does.
    /// - Parameters:
    ///   - userAgentPrivateKey: the private key of the subscription's `p256dh`.
    ///   - authSecret: the subscription's `auth`, 16 bytes.
    /// - Returns: the plaintext.
    /// - Throws: ``WebPushEncryptionError`` saying what was wrong: the header, a `keyid` that is
    ///   not a 65-byte point, more than one record, a failed tag, or a missing 0x02 delimiter.
    public static func decrypt(body: [UInt8], userAgentPrivateKey: P256PrivateKey,
                               authSecret: some Collection<UInt8>) throws(WebPushEncryptionError) -> [UInt8] {
        let auth = Array(authSecret)
        guard auth.count == authSecretLength else { throw .invalidAuthSecret(length: auth.count) }
        let header = try parseHeader(body)
        guard header.keyID.count == 65 else {
            throw .malformedBody("keyid is \(header.keyID.count) bytes; Web Push puts the sender's 65-byte public key there")
        }
        let sender: P256PublicKey
        do { sender = try P256PublicKey(uncompressed: header.keyID) } catch { throw .invalidSenderPublicKey }
        let record = body[header.length...]
        guard record.count >= AES128GCM.tagLength + 1 else {
            throw .malformedBody("the record is \(record.count) bytes, shorter than a tag and a delimiter (17)")
        }
        guard record.count <= Int(header.recordSize) else {
            throw .malformedBody("the body holds more than one record (\(record.count) bytes after the header, record size \(header.recordSize)); Web Push uses one")
        }
        let keys = try deriveKeys(ownKey: userAgentPrivateKey.key, peerKey: sender.key,
                                  userAgentPoint: userAgentPrivateKey.publicKey.uncompressedRepresentation,
                                  senderPoint: header.keyID, authSecret: auth, salt: header.salt)
        var plaintext: [UInt8]
        do {
            plaintext = try AES128GCM.open(record, key: keys.contentEncryptionKey, nonce: keys.nonce)
        } catch where error.kind == .authenticationFailed {
            throw .authenticationFailed
        } catch {
            throw .crypto(error.message)
        }
        while plaintext.last == 0 { plaintext.removeLast() }
        guard plaintext.last == 0x02 else { throw .invalidPadding }
        plaintext.removeLast()
        return plaintext
    }

    // MARK: Key derivation (RFC 8291 §3.3, §3.4; RFC 8188 §2.2, §2.3)

    /// The values RFC 8291 Appendix A lists, for tests.
    struct DerivedKeys {
        var ecdhSecret: [UInt8]
        var keyInfo: [UInt8]
        var inputKeyingMaterial: [UInt8]
        var pseudorandomKey: [UInt8]
        var contentEncryptionKey: [UInt8]
        var nonce: [UInt8]
    }

    static let keyInfoPrefix = Array("WebPush: info".utf8) + [0]
    static let contentEncryptionKeyInfo = Array("Content-Encoding: aes128gcm".utf8) + [0]
    static let nonceInfo = Array("Content-Encoding: nonce".utf8) + [0]

    /// ECDH of `ownKey` with `peerKey`, then `IKM = HKDF(auth_secret, ecdh_secret, key_info, 32)`,
    /// `PRK = HKDF-Extract(salt, IKM)`, `CEK = HKDF-Expand(PRK, cek_info, 16)` and
    /// `NONCE = HKDF-Expand(PRK, nonce_info, 12)` (one record: its sequence number 0 leaves the nonce as is).
    static func deriveKeys(ownKey: P256PrivateKey, peerKey: P256PublicKey, userAgentPublicKey: P256PublicKey,
                           senderPublicKey: P256PublicKey, authSecret: [UInt8], salt: [UInt8]) throws(WebPushEncryptionError) -> DerivedKeys {
        try deriveKeys(ownKey: ownKey.key, peerKey: peerKey.key, userAgentPoint: userAgentPublicKey.uncompressedRepresentation,
                       senderPoint: senderPublicKey.uncompressedRepresentation, authSecret: authSecret, salt: salt)
    }

    /// The same over the bare keys. Every output here is at most one SHA-256 long, so each HKDF
    /// step is one HMAC-SHA256 (RFC 5869: `Extract(salt, IKM) = HMAC(salt, IKM)`,
    /// `Expand(PRK, info, L ≤ 32) = HMAC(PRK, info || 0x01)[0..<L]`): five HMACs over a SHA-256
    /// fetched once, where EVP_KDF would fetch HKDF's digest by name on each of its four calls.
    static func deriveKeys(ownKey: PKey, peerKey: PKey, userAgentPoint: [UInt8], senderPoint: [UInt8],
                           authSecret: [UInt8], salt: [UInt8]) throws(WebPushEncryptionError) -> DerivedKeys {
        do {
            let ecdhSecret = try ecdh(ownKey, peerKey)
            var keyInfo = keyInfoPrefix
            keyInfo.reserveCapacity(keyInfoPrefix.count + userAgentPoint.count + senderPoint.count)
            keyInfo += userAgentPoint
            keyInfo += senderPoint
            let prkKey = try hmac(key: authSecret, ecdhSecret)
            let ikm = try hmac(key: prkKey, keyInfo, [1])
            let prk = try hmac(key: salt, ikm)
            let cek = Array(try hmac(key: prk, contentEncryptionKeyInfo, [1]).prefix(AES128GCM.keyLength))
            let nonce = Array(try hmac(key: prk, nonceInfo, [1]).prefix(AES128GCM.nonceLength))
            return DerivedKeys(ecdhSecret: ecdhSecret, keyInfo: keyInfo, inputKeyingMaterial: ikm, pseudorandomKey: prk,
                               contentEncryptionKey: cek, nonce: nonce)
        } catch {
            throw .crypto(error.message)
        }
    }

    /// HMAC-SHA256 of `a || b` under `key` (at most 64 bytes).
    private static func hmac(key: [UInt8], _ a: [UInt8], _ b: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        ensureOpenSSL()
        ERR_clear_error()
        var out = [UInt8](repeating: 0, count: 32)
        let ok = key.withUnsafeBufferPointer { k in
            a.withUnsafeBufferPointer { a in
                b.withUnsafeBufferPointer { b in
                    out.withUnsafeMutableBufferPointer { o in
                        herald_hmac_sha256(sha256Digest, k.baseAddress, k.count, a.baseAddress, a.count, b.baseAddress, b.count, o.baseAddress)
                    }
                }
            }
        }
        guard ok == 1 else { throw CryptoError(.other("HMAC-SHA256 failed"), "HMAC-SHA256 failed\(openSSLSuffix())") }
        return out
    }

    /// The header, with room reserved for `extra` bytes after it.
    private static func header(salt: [UInt8], senderPoint: [UInt8], extra: Int) -> [UInt8] {
        var header = [UInt8]()
        header.reserveCapacity(headerLength + extra)
        header += salt
        header += [UInt8(recordSize >> 24), UInt8(recordSize >> 16 & 0xFF), UInt8(recordSize >> 8 & 0xFF), UInt8(recordSize & 0xFF)]
        header.append(UInt8(senderPoint.count))
        header += senderPoint
        return header
    }
}
