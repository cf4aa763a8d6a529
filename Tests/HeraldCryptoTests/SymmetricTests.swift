import Foundation
import HeraldCrypto
import Testing

@Suite struct SymmetricTests {
    /// RFC 5869 Appendix A.1 (test case 1) and A.3 (no salt, no info).
    @Test func hkdfMatchesRFC5869() throws {
        let ikm = [UInt8](repeating: 0x0b, count: 22)
        let salt = hexBytes("000102030405060708090a0b0c")
        let info = hexBytes("f0f1f2f3f4f5f6f7f8f9")
        let prk = try HKDFSHA256.extract(salt: salt, inputKeyingMaterial: ikm)
        #expect(hexString(prk) == "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5")
        let okm = "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        #expect(hexString(try HKDFSHA256.expand(pseudorandomKey: prk, info: info, outputLength: 42)) == okm)
        #expect(hexString(try HKDFSHA256.deriveKey(inputKeyingMaterial: ikm, salt: salt, info: info, outputLength: 42)) == okm)

        let noSalt = try HKDFSHA256.deriveKey(inputKeyingMaterial: ikm, salt: [UInt8](), info: [UInt8](), outputLength: 42)
        #expect(hexString(noSalt) == "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")

        #expect(throws: CryptoError.self) { try HKDFSHA256.expand(pseudorandomKey: prk, info: info, outputLength: 0) }
        #expect(throws: CryptoError.self) {
            try HKDFSHA256.expand(pseudorandomKey: prk, info: info, outputLength: HKDFSHA256.maxOutputLength + 1)
        }
    }

    /// The GCM specification's test cases 1-4 (AES-128).
    @Test func aesGCMMatchesTheGCMSpecVectors() throws {
        let zeroKey = [UInt8](repeating: 0, count: 16)
        let zeroNonce = [UInt8](repeating: 0, count: 12)
        #expect(hexString(try AES128GCM.seal([UInt8](), key: zeroKey, nonce: zeroNonce)) == "58e2fccefa7e3061367f1d57a4e7455a")
        #expect(hexString(try AES128GCM.seal([UInt8](repeating: 0, count: 16), key: zeroKey, nonce: zeroNonce))
                == "0388dace60b6a392f328c2b971b2fe78" + "ab6e47d42cec13bdf53a67b21257bddf")

        let key = hexBytes("feffe9928665731c6d6a8f9467308308")
        let nonce = hexBytes("cafebabefacedbaddecaf888")
        let plaintext = hexBytes("""
            d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
            1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39
            """)
        let aad = hexBytes("feedfacedeadbeeffeedfacedeadbeefabaddad2")
        let sealed = try AES128GCM.seal(plaintext, key: key, nonce: nonce, authenticating: aad)
        #expect(hexString(sealed) == """
            42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e\
            21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091\
            5bc94fbc3221a5db94fae95ae7121a47
            """)
        #expect(try AES128GCM.open(sealed, key: key, nonce: nonce, authenticating: aad) == plaintext)
    }

    @Test func aesGCMOpenRefusesAnyChange() throws {
        let key = try SecureRandom.bytes(16)
        let nonce = try SecureRandom.bytes(12)
        let sealed = try AES128GCM.seal(Array("secret message".utf8), key: key, nonce: nonce, authenticating: [1, 2, 3])
        #expect(try AES128GCM.open(sealed, key: key, nonce: nonce, authenticating: [1, 2, 3]) == Array("secret message".utf8))
        for index in [0, 5, sealed.count - 1] {
            var tampered = sealed
            tampered[index] ^= 0x01
            let error = #expect(throws: CryptoError.self) { try AES128GCM.open(tampered, key: key, nonce: nonce, authenticating: [1, 2, 3]) }
            #expect(error?.kind == .authenticationFailed, "byte \(index)")
        }
        var otherKey = key
        otherKey[0] ^= 1
        #expect(throws: CryptoError.self) { try AES128GCM.open(sealed, key: otherKey, nonce: nonce, authenticating: [1, 2, 3]) }
        #expect(throws: CryptoError.self) { try AES128GCM.open(sealed, key: key, nonce: nonce, authenticating: [1, 2]) }
        #expect(throws: CryptoError.self) { try AES128GCM.open(sealed.prefix(15), key: key, nonce: nonce) }
        let badKey = #expect(throws: CryptoError.self) { try AES128GCM.seal([1], key: [1, 2], nonce: nonce) }
        #expect(badKey?.kind == .invalidFormat("AES-128 key of 2 bytes"))
        #expect(throws: CryptoError.self) { try AES128GCM.seal([1], key: key, nonce: [1]) }
    }

    @Test func secureRandomGivesFreshBytes() throws {
        let a = try SecureRandom.bytes(32), b = try SecureRandom.bytes(32)
        #expect(a.count == 32 && b.count == 32 && a != b)
        #expect(try SecureRandom.bytes(0).isEmpty)
    }
}
