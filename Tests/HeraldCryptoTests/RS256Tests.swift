import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

/// RSA keys made once per test run by the `openssl` tool: PKCS#8 (`genpkey`), PKCS#1
/// (`genrsa -traditional`) and the PKCS#8 key's public half. Only the PEM text is kept; the
/// files are removed at once.
struct RSAKeys: Sendable {
    var pkcs8: String
    var pkcs1: String
    var pkcs8Public: String

    static func shared() async throws -> RSAKeys {
        try cached.get()
    }

    private static let cached: Result<RSAKeys, any Error> = Result {
        let dir = try TemporaryDirectory(prefix: "herald-rsa")
        defer { dir.remove() }
        for arguments in [["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", dir.file("pkcs8.pem")],
                          ["genrsa", "-traditional", "-out", dir.file("pkcs1.pem"), "2048"],
                          ["pkey", "-in", dir.file("pkcs8.pem"), "-pubout", "-out", dir.file("public.pem")]] {
            let result = try Run.blocking("/usr/bin/env", ["openssl"] + arguments)
            guard result.status == 0 else { throw TestSetupError("openssl \(arguments[0]): \(result.stderr)") }
        }
        return RSAKeys(pkcs8: try String(contentsOfFile: dir.file("pkcs8.pem"), encoding: .utf8),
                       pkcs1: try String(contentsOfFile: dir.file("pkcs1.pem"), encoding: .utf8),
                       pkcs8Public: try String(contentsOfFile: dir.file("public.pem"), encoding: .utf8))
    }
}

@Suite struct RS256Tests {
    @Test func pkcs8AndPKCS1KeysLoadSignAndVerify() async throws {
        let keys = try await RSAKeys.shared()
        #expect(keys.pkcs8.contains("-----BEGIN PRIVATE KEY-----"))
        #expect(keys.pkcs1.contains("-----BEGIN RSA PRIVATE KEY-----"))
        for pem in [keys.pkcs8, keys.pkcs1] {
            let key = try RS256SigningKey(pem: pem)
            #expect(key.bits == 2048)
            #expect(key.publicKeyPEM.hasPrefix("-----BEGIN PUBLIC KEY-----"))
            let message = Array("header.claims".utf8)
            let signature = try key.sign(message)
            #expect(signature.count == 256)
            #expect(key.verifyingKey.verify(signature: signature, message: message))
            #expect(try RS256VerifyingKey(pem: key.publicKeyPEM).verify(signature: signature, message: message))
            // PKCS#1 v1.5 is deterministic: the same message gives the same signature.
            #expect(try key.sign(message) == signature)
        }
        // The public key openssl wrote for the PKCS#8 key checks our signatures.
        let key = try RS256SigningKey(pem: keys.pkcs8)
        let verifier = try RS256VerifyingKey(pem: keys.pkcs8Public)
        #expect(verifier.verify(signature: try key.sign(Array("x".utf8)), message: Array("x".utf8)))
        #expect(key.publicKeyPEM == keys.pkcs8Public)
    }

    @Test func verifyRejectsTamperingAndOtherKeys() async throws {
        let keys = try await RSAKeys.shared()
        let key = try RS256SigningKey(pem: keys.pkcs8)
        let other = try RS256SigningKey(pem: keys.pkcs1)
        let message = Array("payload".utf8)
        let signature = try key.sign(message)
        let verifier = key.verifyingKey
        for byte in [0, 100, 255] {
            var tampered = signature
            tampered[byte] ^= 0x01
            #expect(!verifier.verify(signature: tampered, message: message), "byte \(byte)")
        }
        #expect(!verifier.verify(signature: signature, message: Array("payloaD".utf8)))
        #expect(!verifier.verify(signature: signature.dropLast(), message: message))
        #expect(!verifier.verify(signature: [UInt8](), message: message))
        #expect(!other.verifyingKey.verify(signature: signature, message: message))
    }

    @Test func opensslAcceptsOurSignatureAndWeAcceptOpenSSLs() async throws {
        let keys = try await RSAKeys.shared()
        let dir = try TemporaryDirectory(prefix: "herald-rs256")
        defer { dir.remove() }
        let key = try RS256SigningKey(pem: keys.pkcs1)
        let message = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0"
        try dir.write("message.txt", message)
        try dir.write("public.pem", key.publicKeyPEM)
        try dir.write("key.pem", keys.pkcs1)
        try Data(key.sign(Array(message.utf8))).write(to: URL(fileURLWithPath: dir.file("ours.sig")))

        let verified = try await openssl(["dgst", "-sha256", "-verify", dir.file("public.pem"), "-signature", dir.file("ours.sig"), dir.file("message.txt")])
        #expect(verified.status == 0)
        #expect(verified.stdout.contains("Verified OK"))

        // A tampered signature is refused by openssl too, so the check above can fail.
        var bad = try key.sign(Array(message.utf8))
        bad[10] ^= 0x80
        try Data(bad).write(to: URL(fileURLWithPath: dir.file("bad.sig")))
        let refused = try await openssl(["dgst", "-sha256", "-verify", dir.file("public.pem"), "-signature", dir.file("bad.sig"), dir.file("message.txt")])
        #expect(refused.status != 0)

        let signed = try await openssl(["dgst", "-sha256", "-sign", dir.file("key.pem"), "-out", dir.file("theirs.sig"), dir.file("message.txt")])
        #expect(signed.status == 0)
        let theirs = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("theirs.sig"))))
        #expect(key.verifyingKey.verify(signature: theirs, message: Array(message.utf8)))
        #expect(theirs == (try key.sign(Array(message.utf8))))
    }

    @Test func generatedKeysRoundTripThroughPEM() throws {
        let key = try RS256SigningKey.generate()
        #expect(key.bits == 2048)
        let pem = key.pemRepresentation
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try RS256SigningKey(pem: pem)
        #expect(reloaded.publicKeyPEM == key.publicKeyPEM)
        let message = Array("m".utf8)
        #expect(key.verifyingKey.verify(signature: try reloaded.sign(message), message: message))
        #expect(throws: CryptoError.self) { try RS256SigningKey.generate(bits: 1024) }
    }

    @Test func wrongKeysAreRefusedWithoutShowingThem() async throws {
        let certs = try TestCertificates.shared()
        // An EC key is not an RSA key.
        let ec = try String(contentsOfFile: certs.authKey, encoding: .utf8)
        let ecError = #expect(throws: CryptoError.self) { try RS256SigningKey(pem: ec) }
        guard case .unsupportedKey(let what)? = ecError?.kind else {
            Issue.record("expected unsupportedKey, got \(String(describing: ecError))")
            return
        }
        #expect(what.contains("EC key") && what.contains("RS256 needs an RSA key"))
        #expect(ecError.map { !$0.message.contains("PRIVATE KEY") && !$0.message.contains(ec.split(separator: "\n")[1]) } == true)

        // A short RSA key.
        let dir = try TemporaryDirectory(prefix: "herald-rsa-short")
        defer { dir.remove() }
        let made = try await openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", dir.file("short.pem")])
        #expect(made.status == 0)
        let short = #expect(throws: CryptoError.self) { try RS256SigningKey(pemFile: dir.file("short.pem")) }
        #expect(short?.kind == .unsupportedKey("RSA key of 1024 bits; RS256 needs at least 2048"))

        // Not PEM at all; a missing file; an EC public key for the verifier.
        let garbage = #expect(throws: CryptoError.self) { try RS256SigningKey(pem: "not a key") }
        #expect(garbage?.kind == .invalidFormat("no PEM private key"))
        let missing = #expect(throws: CryptoError.self) { try RS256SigningKey(pemFile: dir.file("nope.pem")) }
        #expect(missing?.kind == .unreadableFile(dir.file("nope.pem")))
        let ecPublic = #expect(throws: CryptoError.self) { try RS256VerifyingKey(pemFile: certs.authKeyPublic) }
        guard case .unsupportedKey? = ecPublic?.kind else {
            Issue.record("expected unsupportedKey, got \(String(describing: ecPublic))")
            return
        }
    }
}
