import Foundation
import HeraldTestKit
import Testing
@testable import HeraldCrypto

/// RFC 8291 Appendix A: inputs, intermediate values and the 144-byte body (Section 5), with the
/// RFC's line breaks kept as spaces (``b64(_:)`` removes them).
private enum Vector {
    static let plaintext = "V2hlbiBJIGdyb3cgdXAsIEkgd2FudCB0byBiZSBhIHdhdGVybWVsb24"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
    static let prkKey = "Snr3JMxaHVDXHWJn5wdC52WjpCtd2EIEGBykDcZW32k"
    static let keyInfo = """
        V2ViUHVzaDogaW5mbwAEJXGyvs3942BVGq8e0PTNNmwR zr5VX4m8t7GGpTM5FzFo7OLr4BhZe9MEebhuPI-OztV3
        ylkYfpJGmQ22ggCLDgT-M_SrDepxkU21WCP3O1SUj0Ew bZIHMtu5pZpTKGSCIA5Zent7wmC6HCJ5mFgJkuk5cwAv
        MBKiiujwa7t45ewP
        """
    static let ikm = "S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg"
    static let prk = "09_eUZGrsvxChDCGRCdkLiDXrReGOEVeSCdCcPBSJSc"
    static let cekInfo = "Q29udGVudC1FbmNvZGluZzogYWVzMTI4Z2NtAA"
    static let cek = "oIhVW04MRdy2XN9CiKLxTg"
    static let nonceInfo = "Q29udGVudC1FbmNvZGluZzogbm9uY2UA"
    static let nonce = "4h_95klXJ5E_qnoN"
    static let header = """
        DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml
        mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8
        """
    static let ciphertext = "8pfeW0KbunFT06SuDKoJH9Ql87S1QUrdirN6GcG7sFz1y1sqLgVi1VhjVkHsUoEs bI_0LpXMuGvnzQ"
    static let body = """
        DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml
        mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT
        pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN
        """
}

@Suite struct WebPushEncryptionTests {
    private let userAgent = try! P256PrivateKey(base64URL: RFC8291Keys.uaPrivate)

    @Test func reproducesRFC8291AppendixAByteForByte() throws {
        let plaintext = b64(Vector.plaintext)
        #expect(String(decoding: plaintext, as: UTF8.self) == "When I grow up, I want to be a watermelon")
        let body = try WebPushEncryption.encrypt(
            plaintext: plaintext, userAgentPublicKey: try P256PublicKey(base64URL: RFC8291Keys.uaPublic),
            authSecret: b64(Vector.authSecret), ephemeralKey: try P256PrivateKey(base64URL: RFC8291Keys.asPrivate),
            salt: b64(Vector.salt))
        #expect(body.count == 144)
        #expect(body == b64(Vector.body))
        #expect(Array(body.prefix(86)) == b64(Vector.header))
        #expect(Array(body.dropFirst(86)) == b64(Vector.ciphertext))
    }

    @Test func derivesEveryIntermediateValueOfAppendixA() throws {
        let sender = try P256PrivateKey(base64URL: RFC8291Keys.asPrivate)
        let agentPublic = try P256PublicKey(base64URL: RFC8291Keys.uaPublic)
        let keys = try WebPushEncryption.deriveKeys(ownKey: sender, peerKey: agentPublic, userAgentPublicKey: agentPublic,
                                                    senderPublicKey: sender.publicKey, authSecret: b64(Vector.authSecret),
                                                    salt: b64(Vector.salt))
        #expect(keys.ecdhSecret == b64(RFC8291Keys.ecdhSecret))
        #expect(try HKDFSHA256.extract(salt: b64(Vector.authSecret), inputKeyingMaterial: keys.ecdhSecret) == b64(Vector.prkKey))
        #expect(keys.keyInfo == b64(Vector.keyInfo))
        #expect(keys.inputKeyingMaterial == b64(Vector.ikm))
        #expect(keys.pseudorandomKey == b64(Vector.prk))
        #expect(WebPushEncryption.contentEncryptionKeyInfo == b64(Vector.cekInfo))
        #expect(keys.contentEncryptionKey == b64(Vector.cek))
        #expect(WebPushEncryption.nonceInfo == b64(Vector.nonceInfo))
        #expect(keys.nonce == b64(Vector.nonce))
    }

    @Test func decryptsTheRFCBody() throws {
        let header = try WebPushEncryption.parseHeader(b64(Vector.body))
        #expect(header.salt == b64(Vector.salt))
        #expect(header.recordSize == 4096)
        #expect(header.keyID == b64(RFC8291Keys.asPublic))
        #expect(header.length == 86)
        let plaintext = try WebPushEncryption.decrypt(body: b64(Vector.body), userAgentPrivateKey: userAgent,
                                                      authSecret: b64(Vector.authSecret))
        #expect(String(decoding: plaintext, as: UTF8.self) == "When I grow up, I want to be a watermelon")
    }

    @Test func roundTripsWithFreshKeysAndSalt() throws {
        let agent = try P256PrivateKey.generate()
        let auth = try SecureRandom.bytes(16)
        let message = Array(#"{"title":"Hello","body":"from Herald"}"#.utf8)
        let first = try WebPushEncryption.encrypt(plaintext: message, userAgentPublicKey: agent.publicKey, authSecret: auth)
        let second = try WebPushEncryption.encrypt(plaintext: message, userAgentPublicKey: agent.publicKey.uncompressedRepresentation,
                                                   authSecret: auth)
        #expect(first.count == 86 + message.count + 1 + 16)
        #expect(first != second)
        let a = try WebPushEncryption.parseHeader(first), b = try WebPushEncryption.parseHeader(second)
        #expect(a.salt != b.salt && a.keyID != b.keyID)
        #expect(a.recordSize == 4096 && a.keyID.count == 65 && P256PublicKey.isValidUncompressedPoint(a.keyID))
        #expect(a.keyID != agent.publicKey.uncompressedRepresentation)
        #expect(try WebPushEncryption.decrypt(body: first, userAgentPrivateKey: agent, authSecret: auth) == message)
        #expect(try WebPushEncryption.decrypt(body: second, userAgentPrivateKey: agent, authSecret: auth) == message)
        // An empty message is one delimiter byte.
        let empty = try WebPushEncryption.encrypt(plaintext: [UInt8](), userAgentPublicKey: agent.publicKey, authSecret: auth)
        #expect(empty.count == 86 + 1 + 16)
        #expect(try WebPushEncryption.decrypt(body: empty, userAgentPrivateKey: agent, authSecret: auth).isEmpty)
    }

    @Test func tamperedBodiesAndWrongSecretsFail() throws {
        let agent = try P256PrivateKey.generate()
        let auth = try SecureRandom.bytes(16)
        let body = try WebPushEncryption.encrypt(plaintext: Array("attack at dawn".utf8), userAgentPublicKey: agent.publicKey, authSecret: auth)
        func failure(_ body: [UInt8], key: P256PrivateKey? = nil, auth secret: [UInt8]? = nil) -> WebPushEncryptionError? {
            do {
                _ = try WebPushEncryption.decrypt(body: body, userAgentPrivateKey: key ?? agent, authSecret: secret ?? auth)
                return nil
            } catch {
                return error
            }
        }
        // Any flipped byte of the salt, the ciphertext or the tag.
        for index in [0, 15, 86, 90, body.count - 1] {
            var tampered = body
            tampered[index] ^= 0x40
            #expect(failure(tampered) == .authenticationFailed, "byte \(index)")
        }
        // Another sender key in keyid, another auth secret, another subscription.
        var otherSender = body
        otherSender.replaceSubrange(21..<86, with: try P256PrivateKey.generate().publicKey.uncompressedRepresentation)
        #expect(failure(otherSender) == .authenticationFailed)
        #expect(failure(body, auth: try SecureRandom.bytes(16)) == .authenticationFailed)
        #expect(failure(body, key: try P256PrivateKey.generate()) == .authenticationFailed)
        // keyid bytes that are no point; a keyid of the wrong length; cut bodies; a tiny rs.
        var notAPoint = body
        notAPoint[85] ^= 0x01
        #expect(failure(notAPoint) == .invalidSenderPublicKey)
        var shortID = body
        shortID[20] = 64
        #expect(failure(shortID) == .malformedBody("keyid is 64 bytes; Web Push puts the sender's 65-byte public key there"))
        #expect(failure(Array(body.prefix(20))) == .malformedBody("20 bytes is shorter than the 21-byte header start"))
        #expect(failure(Array(body.prefix(60))) == .malformedBody("60 bytes is shorter than the header with its 65-byte keyid"))
        #expect(failure(Array(body.prefix(86 + 16))) == .malformedBody("the record is 16 bytes, shorter than a tag and a delimiter (17)"))
        var tinyRecords = body
        tinyRecords.replaceSubrange(16..<20, with: [0, 0, 0, 17])
        #expect(failure(tinyRecords) == .malformedBody("record size 17 is below the minimum of 18"))
        var smallRecords = body
        smallRecords.replaceSubrange(16..<20, with: [0, 0, 0, 18])
        #expect(failure(smallRecords)?.description.contains("more than one record") == true)
        #expect(failure(body, auth: [1, 2, 3]) == .invalidAuthSecret(length: 3))
    }

    @Test func paddingIsRemovedAndTheDelimiterChecked() throws {
        // Build records by hand with the derived keys: padding after 0x02 is allowed (RFC 8188
        // §2), a 0x01 delimiter (not the last record) or none at all is not.
        let agent = try P256PrivateKey.generate()
        let sender = try P256PrivateKey.generate()
        let auth = try SecureRandom.bytes(16), salt = try SecureRandom.bytes(16)
        let keys = try WebPushEncryption.deriveKeys(ownKey: sender, peerKey: agent.publicKey, userAgentPublicKey: agent.publicKey,
                                                    senderPublicKey: sender.publicKey, authSecret: auth, salt: salt)
        let header = salt + [0, 0, 0x10, 0, 65] + sender.publicKey.uncompressedRepresentation
        func body(_ record: [UInt8]) throws -> [UInt8] {
            header + (try AES128GCM.seal(record, key: keys.contentEncryptionKey, nonce: keys.nonce))
        }
        let text = Array("padded".utf8)
        #expect(try WebPushEncryption.decrypt(body: try body(text + [2, 0, 0, 0, 0]), userAgentPrivateKey: agent, authSecret: auth) == text)
        #expect(try WebPushEncryption.decrypt(body: try body(text + [2]), userAgentPrivateKey: agent, authSecret: auth) == text)
        #expect(throws: WebPushEncryptionError.invalidPadding) {
            try WebPushEncryption.decrypt(body: try body(text + [1, 0]), userAgentPrivateKey: agent, authSecret: auth)
        }
        #expect(throws: WebPushEncryptionError.invalidPadding) {
            try WebPushEncryption.decrypt(body: try body(text + [0, 0]), userAgentPrivateKey: agent, authSecret: auth)
        }
        // The same keys through encrypt give the same first record as the hand-built one.
        let encrypted = try WebPushEncryption.encrypt(plaintext: text, userAgentPublicKey: agent.publicKey, authSecret: auth,
                                                      ephemeralKey: sender, salt: salt)
        #expect(encrypted == (try body(text + [2])))
    }

    @Test func the3993ByteLimitIsExact() throws {
        #expect(WebPushEncryption.maxPlaintextLength == 3993)
        #expect(WebPushEncryption.maxPlaintextLength == 4096 - 86 - 16 - 1)
        let agent = try P256PrivateKey.generate()
        let auth = try SecureRandom.bytes(16)
        let largest = try SecureRandom.bytes(3993)
        let body = try WebPushEncryption.encrypt(plaintext: largest, userAgentPublicKey: agent.publicKey, authSecret: auth)
        #expect(body.count == 4096)
        #expect(try WebPushEncryption.decrypt(body: body, userAgentPrivateKey: agent, authSecret: auth) == largest)
        #expect(throws: WebPushEncryptionError.plaintextTooLong(length: 3994, maximum: 3993)) {
            try WebPushEncryption.encrypt(plaintext: largest + [0], userAgentPublicKey: agent.publicKey, authSecret: auth)
        }
    }

    @Test func badSubscriptionKeysAreNamed() throws {
        let agent = try P256PrivateKey.generate()
        var point = agent.publicKey.uncompressedRepresentation
        point[64] ^= 1
        let error = #expect(throws: WebPushEncryptionError.self) {
            try WebPushEncryption.encrypt(plaintext: [1], userAgentPublicKey: point, authSecret: [UInt8](repeating: 0, count: 16))
        }
        #expect(error == .invalidUserAgentPublicKey("p256dh is not a point on the P-256 curve"))
        #expect(throws: WebPushEncryptionError.invalidAuthSecret(length: 12)) {
            try WebPushEncryption.encrypt(plaintext: [1], userAgentPublicKey: agent.publicKey, authSecret: [UInt8](repeating: 0, count: 12))
        }
    }

    /// An independent implementation (Python's `cryptography`, when installed) decrypts our body.
    @Test func pythonCryptographyDecryptsOurBody() async throws {
        let probe = try await Run.program("/usr/bin/env", ["python3", "-c", "import cryptography"])
        try #require(probe.status == 0, "this test needs python3 with the cryptography package (Debian python3-cryptography): \(probe.stderr)")
        let agent = try P256PrivateKey.generate()
        let auth = try SecureRandom.bytes(16)
        let message = "Ünïcode payload with enough text to span several AES blocks."
        let body = try WebPushEncryption.encrypt(plaintext: Array(message.utf8), userAgentPublicKey: agent.publicKey, authSecret: auth)
        let script = """
            import base64, sys
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
            from cryptography.hazmat.primitives import hashes, serialization
            d = lambda s: base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))
            body, priv, auth = d(sys.argv[1]), d(sys.argv[2]), d(sys.argv[3])
            salt, rs, idlen = body[:16], int.from_bytes(body[16:20], 'big'), body[20]
            keyid, record = body[21:21 + idlen], body[21 + idlen:]
            ua = ec.derive_private_key(int.from_bytes(priv, 'big'), ec.SECP256R1())
            ua_pub = ua.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
            shared = ua.exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), keyid))
            ikm = HKDF(hashes.SHA256(), 32, auth, b'WebPush: info\\x00' + ua_pub + keyid).derive(shared)
            cek = HKDF(hashes.SHA256(), 16, salt, b'Content-Encoding: aes128gcm\\x00').derive(ikm)
            nonce = HKDF(hashes.SHA256(), 12, salt, b'Content-Encoding: nonce\\x00').derive(ikm)
            plain = AESGCM(cek).decrypt(nonce, record, None).rstrip(b'\\x00')
            assert plain[-1:] == b'\\x02' and rs == 4096
            sys.stdout.write(plain[:-1].decode('utf-8'))
            """
        let result = try await Run.program("/usr/bin/env", ["python3", "-c", script, Base64URL.encode(body),
                                                      Base64URL.encode(agent.rawRepresentation), Base64URL.encode(auth)])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == message)
    }
}
