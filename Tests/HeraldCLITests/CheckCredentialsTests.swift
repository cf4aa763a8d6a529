import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// `herald check` on APNs credentials: what it reports, and how it fails.
@Suite struct CheckCredentialsTests {
    func config(_ dir: TemporaryDirectory, transport: String) throws -> String {
        try dir.write("config.json", """
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": \(transport)}}
        """)
    }

    @Test func certificateSubjectTopicsAndExpiry() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory(prefix: "herald-check")
        defer { dir.remove() }
        let path = try config(dir, transport: """
        {"type": "apns-http2", "environment": "production", "p12File": "\(certs.clientP12)", "passphrase": "${APNS_P12_PASSPHRASE}"}
        """)
        let result = try await Run.herald(["check", "--config", path], environment: ["APNS_P12_PASSPHRASE": certs.p12Passphrase])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("ok: certificate auth from \(certs.clientP12): UID=com.example.app, CN=Apple Push Services: com.example.app"))
        #expect(result.stdout.contains("info: topics: com.example.app, com.example.app.voip, com.example.app.complication"))
        #expect(result.stdout.contains("ok: certificate valid until "))
        #expect(!result.stdout.contains(certs.p12Passphrase) && !result.stderr.contains(certs.p12Passphrase))
    }

    @Test func aCertificateCloseToExpiryIsAWarning() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-check")
        defer { dir.remove() }
        let made = try await Run.program("/usr/bin/openssl", [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "10",
            "-subj", "/UID=com.example.app/CN=Apple Push Services: com.example.app", "-keyout", dir.file("k.pem"), "-out", dir.file("c.pem"),
        ])
        #expect(made.status == 0, "\(made.stderr)")
        let combined = try String(contentsOfFile: dir.file("c.pem"), encoding: .utf8) + String(contentsOfFile: dir.file("k.pem"), encoding: .utf8)
        let pem = try dir.write("combined.pem", combined)
        let path = try config(dir, transport: #"{"type": "apns-http2", "environment": "production", "certFile": "\#(pem)"}"#)
        let result = try await Run.herald(["check", "--config", path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("warning: the certificate expires in 9 days"), "\(result.stdout)")
        #expect(result.stdout.contains("topics: com.example.app"))
    }

    @Test func aWrongPassphraseIsAConfigurationErrorThatNamesTheKey() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory(prefix: "herald-check")
        defer { dir.remove() }
        let path = try config(dir, transport: """
        {"type": "apns-http2", "environment": "production", "p12File": "\(certs.clientP12)", "passphrase": "hunter2-wrong"}
        """)
        let result = try await Run.herald(["check", "--config", path])
        #expect(result.status == 3)
        #expect(result.stderr.contains("\(path): transports.apns.passphrase: "))
        #expect(result.stderr.contains("wrong passphrase"))
        #expect(!result.stderr.contains("hunter2-wrong"))
    }

    @Test func aKeyThatIsNotP256IsRefused() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory(prefix: "herald-check")
        defer { dir.remove() }
        let path = try config(dir, transport: """
        {"type": "apns-http2", "environment": "sandbox", "keyFile": "\(certs.p384Key)", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}
        """)
        let result = try await Run.herald(["check", "--config", path])
        #expect(result.status == 3)
        #expect(result.stderr.contains("\(path): transports.apns.keyFile: "))
        #expect(result.stderr.contains("secp384r1") && result.stderr.contains("P-256"))
    }
}
