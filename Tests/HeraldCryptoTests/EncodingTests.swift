import Foundation
import Testing
@testable import HeraldCrypto

@Suite struct EncodingTests {
    @Test func base64URLMatchesRFC4648Vectors() {
        let vectors = ["": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func base64URLUsesTheURLAlphabetAndAgreesWithFoundation() {
        let bytes: [UInt8] = [0xFB, 0xFF, 0xBF, 0x00, 0x10, 0x83] + (0...255).map { UInt8($0) }
        let encoded = Base64URL.encode(bytes)
        #expect(!encoded.contains("+") && !encoded.contains("/") && !encoded.contains("="))
        let standard = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        #expect(encoded == standard)
        #expect(Base64URL.decode(encoded) == bytes)
        #expect(Base64URL.decode(encoded[...]) == bytes)
    }

    @Test func base64URLRejectsBadInput() {
        #expect(Base64URL.decode("ab+c") == nil)
        #expect(Base64URL.decode("ab/c") == nil)
        #expect(Base64URL.decode("abcde") == nil)  // length 1 mod 4
        #expect(Base64URL.decode("a b") == nil)
        #expect(Base64URL.decode("Zg==") == [0x66])  // padding tolerated
    }

    @Test func sha256MatchesKnownDigests() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex(SHA256.hash("abc".utf8)) == hex(SHA256.hash(Array("abc".utf8))))  // non-contiguous collection
    }

    @Test func derSignatureConversionRoundTrips() {
        // High bits set (needs a 0x00 pad in DER) and leading zeros (shorter INTEGER).
        let raw: [UInt8] = [0x80] + [UInt8](repeating: 1, count: 31) + [0, 0, 0x7F] + [UInt8](repeating: 2, count: 29)
        let der = DER.derSignature(fromRaw: raw) ?? []
        #expect(der == TestDER.der(fromRaw: raw))
        #expect(DER.rawSignature(fromDER: der[...]) == raw)
        #expect(DER.derSignature(fromRaw: [UInt8](repeating: 1, count: 63)) == nil)
        #expect(DER.rawSignature(fromDER: [0x30, 0x03, 0x02, 0x01][...]) == nil)
    }
}
