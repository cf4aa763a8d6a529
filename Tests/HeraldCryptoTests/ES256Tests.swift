import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct ES256Tests {
    @Test func signThenVerify() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let verifier = try ES256VerifyingKey(pemFile: certs.authKeyPublic)
        let message = Array("hello, APNs".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(verifier.verify(signature: signature, message: message))
        #expect(key.verifyingKey.verify(signature: signature, message: message))
        // ECDSA is randomised: a second signature differs but verifies too.
        let again = try key.sign(message)
        #expect(again != signature)
        #expect(verifier.verify(signature: again, message: message))
    }

    @Test func verifyRejectsAnyFlippedBit() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let verifier = try ES256VerifyingKey(pemFile: certs.authKeyPublic)
        let message = Array("payload".utf8)
        let signature = try key.sign(message)
        for bit in [0, 100, 255, 256, 511] {
            var tampered = signature
            tampered[bit / 8] ^= UInt8(1 << (bit % 8))
            #expect(!verifier.verify(signature: tampered, message: message), "bit \(bit)")
        }
        var other = message
        other[0] ^= 1
        #expect(!verifier.verify(signature: signature, message: other))
        #expect(!verifier.verify(signature: signature.dropLast(), message: message))
        #expect(!verifier.verify(signature: [UInt8](repeating: 0, count: 64), message: message))
    }

    @Test func signatureFromOpenSSLToolVerifies() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let message = try dir.write("message.txt", "signed by the openssl tool")
        let result = try await openssl(["dgst", "-sha256", "-sign", certs.authKey, "-out", dir.file("sig.der"), message])
        #expect(result.status == 0, "\(result.stderr)")
        let der = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("sig.der"))))
        let raw = try #require(TestDER.raw(fromDER: der))
        let verifier = try ES256VerifyingKey(pemFile: certs.authKeyPublic)
        #expect(verifier.verify(signature: raw, message: Array("signed by the openssl tool".utf8)))
        #expect(!verifier.verify(signature: raw, message: Array("something else".utf8)))
    }

    @Test func signatureVerifiesWithOpenSSLTool() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let text = "signed by HeraldCrypto"
        let message = try dir.write("message.txt", text)
        let raw = try ES256SigningKey(pemFile: certs.authKey).sign(Array(text.utf8))
        try Data(TestDER.der(fromRaw: raw)).write(to: URL(fileURLWithPath: dir.file("sig.der")))
        let good = try await openssl(["dgst", "-sha256", "-verify", certs.authKeyPublic, "-signature", dir.file("sig.der"), message])
        #expect(good.status == 0 && good.stdout.contains("Verified OK"), "\(good.stdout) \(good.stderr)")
        let tampered = try dir.write("tampered.txt", text + "!")
        let bad = try await openssl(["dgst", "-sha256", "-verify", certs.authKeyPublic, "-signature", dir.file("sig.der"), tampered])
        #expect(bad.status != 0)
    }

    @Test func publicKeyPEMMatchesTheOpenSSLTool() throws {
        let certs = try TestCertificates.shared()
        let key = try ES256SigningKey(pemFile: certs.authKey)
        let expected = try String(contentsOfFile: certs.authKeyPublic, encoding: .utf8)
        #expect(key.publicKeyPEM == expected)
    }

    @Test func acceptsSEC1ECPrivateKeyPEM() async throws {
        let certs = try TestCertificates.shared()
        let sec1 = try await openssl(["ec", "-in", certs.authKey])  // writes "BEGIN EC PRIVATE KEY"
        #expect(sec1.stdout.contains("BEGIN EC PRIVATE KEY"))
        let key = try ES256SigningKey(pem: sec1.stdout)
        let message = Array("sec1".utf8)
        #expect(try ES256VerifyingKey(pemFile: certs.authKeyPublic).verify(signature: key.sign(message), message: message))
    }

    @Test func refusesP384KeyNamingTheCurve() async throws {
        let certs = try TestCertificates.shared()
        let error = #expect(throws: CryptoError.self) { try ES256SigningKey(pemFile: certs.p384Key) }
        guard case .unsupportedKey(let what)? = error?.kind else {
            Issue.record("expected .unsupportedKey, got \(String(describing: error))")
            return
        }
        #expect(what.contains("secp384r1") && what.contains("P-256"))
        #expect(error?.message.contains(certs.p384Key) == true)
        let publicP384 = try await openssl(["pkey", "-in", certs.p384Key, "-pubout"]).stdout
        #expect(throws: CryptoError.self) { try ES256VerifyingKey(pem: publicP384) }
    }

    @Test func refusesRSAKeysMissingFilesAndGarbage() async throws {
        let rsa = try await openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"]).stdout
        let error = #expect(throws: CryptoError.self) { try ES256SigningKey(pem: rsa) }
        #expect(error?.kind == .unsupportedKey("RSA key; APNs needs P-256 (prime256v1)"))
        let missing = #expect(throws: CryptoError.self) { try ES256SigningKey(pemFile: "/nonexistent/AuthKey.p8") }
        #expect(missing?.kind == .unreadableFile("/nonexistent/AuthKey.p8"))
        #expect(missing?.message.contains("No such file") == true)
        let garbage = #expect(throws: CryptoError.self) { try ES256SigningKey(pem: "not a key") }
        #expect(garbage?.kind == .invalidFormat("no PEM private key"))
        let empty = #expect(throws: CryptoError.self) { try ES256SigningKey(pem: "") }
        #expect(empty?.kind == .invalidFormat("no PEM private key"))
    }
}
