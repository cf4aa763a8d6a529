import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

/// The key pairs of RFC 8291 Appendix A (application server and user agent).
enum RFC8291Keys {
    static let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let asPublic = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let uaPublic = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let ecdhSecret = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"
}

@Suite struct P256Tests {
    @Test func rawPrivateKeysGiveTheRFCPublicKeysAndSharedSecret() throws {
        let sender = try P256PrivateKey(base64URL: RFC8291Keys.asPrivate)
        let agent = try P256PrivateKey(rawRepresentation: b64(RFC8291Keys.uaPrivate))
        #expect(sender.publicKey.uncompressedRepresentation == b64(RFC8291Keys.asPublic))
        #expect(agent.publicKey.uncompressedRepresentation == b64(RFC8291Keys.uaPublic))
        #expect(sender.rawRepresentation == b64(RFC8291Keys.asPrivate))
        #expect(sender.publicKey.base64URL == RFC8291Keys.asPublic.filter { !$0.isWhitespace })
        let peer = try P256PublicKey(uncompressed: b64(RFC8291Keys.uaPublic))
        #expect(try sender.sharedSecret(with: peer) == b64(RFC8291Keys.ecdhSecret))
        #expect(try agent.sharedSecret(with: sender.publicKey) == b64(RFC8291Keys.ecdhSecret))
    }

    @Test func generatedKeysAgreeAndRoundTrip() throws {
        let a = try P256PrivateKey.generate()
        let b = try P256PrivateKey.generate()
        #expect(a.publicKey != b.publicKey)
        #expect(a.publicKey.uncompressedRepresentation.count == 65 && a.publicKey.uncompressedRepresentation[0] == 0x04)
        let ab = try a.sharedSecret(with: b.publicKey)
        #expect(ab.count == 32)
        #expect(ab == (try b.sharedSecret(with: a.publicKey)))
        #expect(ab != (try a.sharedSecret(with: try P256PrivateKey.generate().publicKey)))

        let raw = a.rawRepresentation
        #expect(raw.count == 32)
        #expect(try P256PrivateKey(rawRepresentation: raw).publicKey == a.publicKey)
        let pem = a.pemRepresentation
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try P256PrivateKey(pem: pem).publicKey == a.publicKey)
        // The ES256 view of the key signs; the public key's ES256 view verifies.
        let message = Array("vapid".utf8)
        #expect(a.publicKey.verifyingKey.verify(signature: try a.signingKey.sign(message), message: message))
        #expect(!b.publicKey.verifyingKey.verify(signature: try a.signingKey.sign(message), message: message))
    }

    @Test func sec1AndPKCS8PEMKeysFromOpenSSLLoad() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-p256")
        defer { dir.remove() }
        for (name, arguments) in [("sec1", ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"]),
                                  ("pkcs8", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])] {
            let made = try await openssl(arguments + [dir.file("\(name).pem")])
            try #require(made.status == 0, "\(made.stderr)")
            let text = try String(contentsOfFile: dir.file("\(name).pem"), encoding: .utf8)
            #expect(text.contains(name == "sec1" ? "BEGIN EC PRIVATE KEY" : "BEGIN PRIVATE KEY"))
            let key = try P256PrivateKey(pemFile: dir.file("\(name).pem"))
            // openssl's own public key (DER SubjectPublicKeyInfo ends with the 65-byte point).
            let exported = try await openssl(["pkey", "-in", dir.file("\(name).pem"), "-pubout", "-outform", "DER", "-out", dir.file("\(name).der")])
            try #require(exported.status == 0)
            let der = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("\(name).der"))))
            #expect(Array(der.suffix(65)) == key.publicKey.uncompressedRepresentation)
            #expect(try P256PrivateKey(pem: text).rawRepresentation == key.rawRepresentation)
        }

        // Another curve is refused, naming it.
        let made = try await openssl(["ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", dir.file("p384.pem")])
        try #require(made.status == 0)
        let error = #expect(throws: CryptoError.self) { try P256PrivateKey(pemFile: dir.file("p384.pem")) }
        #expect(error?.kind == .unsupportedKey("EC key on secp384r1; a P-256 (prime256v1) key is needed"))
        #expect(error?.message.contains("APNs") == false)
    }

    @Test func badRawPrivateKeysAreRefusedWithoutShowingThem() {
        let short = #expect(throws: CryptoError.self) { try P256PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 31)) }
        #expect(short?.kind == .invalidFormat("raw private key of 31 bytes"))
        let zero = #expect(throws: CryptoError.self) { try P256PrivateKey(rawRepresentation: [UInt8](repeating: 0, count: 32)) }
        #expect(zero?.kind == .invalidFormat("private scalar out of range"))
        // 2^256 - 1 is above the group order n = FFFFFFFF00000000FFFF…FC632551.
        let big = #expect(throws: CryptoError.self) { try P256PrivateKey(rawRepresentation: [UInt8](repeating: 0xFF, count: 32)) }
        #expect(big?.kind == .invalidFormat("private scalar out of range"))
        // The order itself is refused; one below it is the largest valid key.
        let order = hexBytes("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551")
        #expect(throws: CryptoError.self) { try P256PrivateKey(rawRepresentation: order) }
        var below = order
        below[31] -= 1
        #expect((try? P256PrivateKey(rawRepresentation: below)) != nil)
        let text = #expect(throws: CryptoError.self) { try P256PrivateKey(base64URL: "not*base64", source: "vapid.privateKey") }
        #expect(text?.message.hasPrefix("vapid.privateKey is not base64url") == true)
        #expect(text?.message.contains("not*base64") == false)
        // A key pasted with a trailing newline still loads.
        #expect((try? P256PrivateKey(base64URL: RFC8291Keys.asPrivate + "\n")) != nil)
    }

    @Test func onlyUncompressedPointsOnTheCurveAreAccepted() throws {
        let good = b64(RFC8291Keys.uaPublic)
        #expect(P256PublicKey.isValidUncompressedPoint(good))
        #expect(try P256PublicKey(base64URL: RFC8291Keys.uaPublic).uncompressedRepresentation == good)

        var offCurve = good
        offCurve[64] ^= 0x01
        #expect(!P256PublicKey.isValidUncompressedPoint(offCurve))
        let error = #expect(throws: CryptoError.self) { try P256PublicKey(uncompressed: offCurve, source: "p256dh") }
        #expect(error?.message == "p256dh is not a point on the P-256 curve")

        var compressedPrefix = good
        compressedPrefix[0] = 0x02
        #expect(!P256PublicKey.isValidUncompressedPoint(compressedPrefix))
        #expect(!P256PublicKey.isValidUncompressedPoint(good.prefix(33)))      // compressed length
        #expect(!P256PublicKey.isValidUncompressedPoint(good.dropLast()))
        #expect(!P256PublicKey.isValidUncompressedPoint([UInt8]()))
        #expect(!P256PublicKey.isValidUncompressedPoint([0x04] + [UInt8](repeating: 0, count: 64)))
        let wrongLength = #expect(throws: CryptoError.self) { try P256PublicKey(uncompressed: good.dropLast(), source: "p256dh") }
        #expect(wrongLength?.message == "p256dh is 64 bytes starting with 0x4; a P-256 public key is 65 bytes, 0x04 followed by X and Y")
        // x = p (the field prime) is out of range even though the bytes have the right shape.
        let p = hexBytes("FFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF")
        #expect(!P256PublicKey.isValidUncompressedPoint([0x04] + p + Array(good[33...])))
    }
}
