import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct ClientIdentityTests {
    static let expectedSubject = "UID=com.example.app, CN=Apple Push Services: com.example.app, OU=DEF123GHIJ, O=Herald Tests, C=US"

    /// The identity's key PEM holds the same key as `keyFile` (checked by the openssl tool).
    func keyMatches(_ identity: ClientIdentity, _ keyFile: String) async throws -> Bool {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let written = try dir.write("key.pem", String(decoding: identity.privateKeyPEM, as: UTF8.self))
        let ours = try await openssl(["pkey", "-in", written, "-pubout"])
        let theirs = try await openssl(["pkey", "-in", keyFile, "-pubout"])
        return ours.status == 0 && !ours.stdout.isEmpty && ours.stdout == theirs.stdout
    }

    func pemCount(_ bytes: [UInt8], _ label: String) -> Int {
        String(decoding: bytes, as: UTF8.self).components(separatedBy: "-----BEGIN \(label)-----").count - 1
    }

    @Test func loadsPEMPair() async throws {
        let certs = try TestCertificates.shared()
        let identity = try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: certs.clientKey, passphrase: nil)
        #expect(identity.certificate.subject == Self.expectedSubject)
        #expect(pemCount(identity.certificatePEM, "CERTIFICATE") == 1)
        #expect(pemCount(identity.privateKeyPEM, "PRIVATE KEY") == 1)
        #expect(try await keyMatches(identity, certs.clientKey))
        let original = try String(contentsOfFile: certs.clientCertificate, encoding: .utf8)
        #expect(String(decoding: identity.certificatePEM, as: UTF8.self) == original)
    }

    @Test func loadsCombinedPEM() async throws {
        let certs = try TestCertificates.shared()
        let identity = try ClientIdentity.load(certificateFile: certs.clientCombined, keyFile: nil, passphrase: nil)
        #expect(identity.certificate.uid == "com.example.app")
        #expect(try await keyMatches(identity, certs.clientKey))
    }

    @Test func certificateWithoutKeyAndNoKeyFileIsExplained() async throws {
        let certs = try TestCertificates.shared()
        let error = #expect(throws: CryptoError.self) {
            try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: nil, passphrase: nil)
        }
        #expect(error?.message.contains("no private key") == true)
    }

    @Test func encryptedKeyNeedsTheRightPassphrase() async throws {
        let certs = try TestCertificates.shared()
        let good = try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: certs.clientEncryptedKey,
                                           passphrase: certs.p12Passphrase)
        #expect(try await keyMatches(good, certs.clientKey))
        #expect(!String(decoding: good.privateKeyPEM, as: UTF8.self).contains("ENCRYPTED"))

        let none = #expect(throws: CryptoError.self) {
            try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: certs.clientEncryptedKey, passphrase: nil)
        }
        #expect(none?.kind == .wrongPassphrase)
        #expect(none?.message.contains("no passphrase") == true)
        #expect(none?.message.contains(certs.clientEncryptedKey) == true)

        let secretGuess = "not-the-passphrase-7Q2"
        let wrong = #expect(throws: CryptoError.self) {
            try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: certs.clientEncryptedKey,
                                    passphrase: secretGuess)
        }
        #expect(wrong?.kind == .wrongPassphrase)
        #expect(wrong?.message.contains("wrong passphrase for \(certs.clientEncryptedKey)") == true)
        #expect(wrong?.message.contains(secretGuess) == false)
        #expect(wrong?.description.contains(secretGuess) == false)
    }

    @Test func p12WithRightWrongAndMissingPassphrase() async throws {
        let certs = try TestCertificates.shared()
        let identity = try ClientIdentity.load(p12File: certs.clientP12, passphrase: certs.p12Passphrase)
        #expect(identity.certificate.subject == Self.expectedSubject)
        #expect(pemCount(identity.certificatePEM, "CERTIFICATE") == 2)  // leaf + the CA added with -certfile
        #expect(try await keyMatches(identity, certs.clientKey))

        let secretGuess = "herald-test-passphrasf"
        let wrong = #expect(throws: CryptoError.self) { try ClientIdentity.load(p12File: certs.clientP12, passphrase: secretGuess) }
        #expect(wrong?.kind == .wrongPassphrase)
        #expect(wrong?.message.contains("wrong passphrase for \(certs.clientP12)") == true)
        #expect(wrong?.message.contains(secretGuess) == false)
        #expect(wrong?.message.contains(certs.p12Passphrase) == false)

        let missing = #expect(throws: CryptoError.self) { try ClientIdentity.load(p12File: certs.clientP12, passphrase: nil) }
        #expect(missing?.kind == .wrongPassphrase)
        #expect(missing?.message.contains("none was given") == true)
    }

    @Test func p12LegacyAndWithoutPassphrase() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let legacy = try await openssl(["pkcs12", "-export", "-legacy", "-in", certs.clientCertificate, "-inkey", certs.clientKey,
                                  "-passout", "pass:old-style", "-out", dir.file("legacy.p12")])
        #expect(legacy.status == 0, "\(legacy.stderr)")
        let old = try ClientIdentity.load(p12File: dir.file("legacy.p12"), passphrase: "old-style")
        #expect(old.certificate.uid == "com.example.app")
        #expect(try await keyMatches(old, certs.clientKey))

        let open = try await openssl(["pkcs12", "-export", "-in", certs.clientCertificate, "-inkey", certs.clientKey,
                                "-passout", "pass:", "-out", dir.file("open.p12")])
        #expect(open.status == 0, "\(open.stderr)")
        let unprotected = try ClientIdentity.load(p12File: dir.file("open.p12"), passphrase: nil)
        #expect(unprotected.certificate.uid == "com.example.app")
    }

    @Test func mismatchedKeyAndCertificate() async throws {
        let certs = try TestCertificates.shared()
        let error = #expect(throws: CryptoError.self) {
            try ClientIdentity.load(certificateFile: certs.clientCertificate, keyFile: certs.otherClientKey, passphrase: nil)
        }
        #expect(error?.kind == .certificateMismatch)
        #expect(error?.message.contains(certs.otherClientKey) == true)
    }

    @Test func notAP12AndMissingFiles() async throws {
        let certs = try TestCertificates.shared()
        let notP12 = #expect(throws: CryptoError.self) { try ClientIdentity.load(p12File: certs.clientCertificate, passphrase: "x") }
        #expect(notP12?.kind == .invalidFormat("not PKCS#12"))
        let missing = #expect(throws: CryptoError.self) {
            try ClientIdentity.load(certificateFile: "/nonexistent/cert.pem", keyFile: nil, passphrase: nil)
        }
        #expect(missing?.kind == .unreadableFile("/nonexistent/cert.pem"))
    }
}
