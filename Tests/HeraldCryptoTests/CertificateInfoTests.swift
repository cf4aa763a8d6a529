import Foundation
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct CertificateInfoTests {
    @Test func readsApplePushCertificateFacts() throws {
        let certs = try TestCertificates.shared()
        let info = try CertificateInfo.load(pemFile: certs.clientCertificate)
        #expect(info.subject == "UID=com.example.app, CN=Apple Push Services: com.example.app, OU=DEF123GHIJ, O=Herald Tests, C=US")
        #expect(info.commonName == "Apple Push Services: com.example.app")
        #expect(info.uid == "com.example.app")
        #expect(info.issuer == "CN=Herald Test CA, O=Herald Tests")
        #expect(info.topics == ["com.example.app", "com.example.app.voip", "com.example.app.complication"])
        #expect(info.isDevelopment)
        #expect(info.isProduction)
        let days = info.notAfter.timeIntervalSince(info.notBefore) / 86_400
        #expect(abs(days - 3650) < 1)
        #expect(abs(info.notBefore.timeIntervalSinceNow) < 86_400 * 366)  // issued recently, not epoch 0
    }

    @Test func datesAgreeWithTheOpenSSLTool() async throws {
        let certs = try TestCertificates.shared()
        let info = try CertificateInfo.load(pemFile: certs.clientCertificate)
        let out = try await openssl(["x509", "-in", certs.clientCertificate, "-noout", "-enddate", "-dateopt", "iso_8601"]).stdout
        // notAfter=2036-11-26 12:00:00Z
        let text = try #require(out.split(separator: "=").last).trimmingCharacters(in: .whitespacesAndNewlines)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss'Z'"
        #expect(formatter.date(from: text) == info.notAfter, "\(text)")
    }

    @Test func serverCertificateHasNoAppleExtensions() throws {
        let certs = try TestCertificates.shared()
        let info = try CertificateInfo.load(pemFile: certs.serverCertificate)
        #expect(info.subject == "CN=localhost, O=Herald Tests")
        #expect(info.uid == nil)
        #expect(info.topics.isEmpty)
        #expect(!info.isDevelopment && !info.isProduction)
    }

    @Test func uidIsTheTopicWhenTheExtensionIsAbsent() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await openssl(["req", "-x509", "-new", "-key", certs.clientKey, "-days", "30",
                                  "-subj", "/UID=com.example.mdm/CN=APSP:1234, Inc+OU=x", "-out", dir.file("mdm.pem")])
        #expect(result.status == 0, "\(result.stderr)")
        let info = try CertificateInfo.load(pemFile: dir.file("mdm.pem"))
        #expect(info.topics == ["com.example.mdm"])
        // DER sorts the members of a multi-valued RDN, so OU comes before CN here.
        #expect(info.subject == #"UID=com.example.mdm, OU=x+CN=APSP:1234\, Inc"#)
    }

    @Test func readsDERCertificatesToo() async throws {
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try await openssl(["x509", "-in", certs.clientCertificate, "-outform", "DER", "-out", dir.file("aps.cer")])
        #expect(try CertificateInfo.load(pemFile: dir.file("aps.cer")) == CertificateInfo.load(pemFile: certs.clientCertificate))
    }

    @Test func reportsUnreadableAndInvalidFiles() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let missing = #expect(throws: CryptoError.self) { try CertificateInfo.load(pemFile: dir.file("nope.pem")) }
        #expect(missing?.kind == .unreadableFile(dir.file("nope.pem")))
        let junk = try dir.write("junk.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        let invalid = #expect(throws: CryptoError.self) { try CertificateInfo.load(pemFile: junk) }
        #expect(invalid?.kind == .invalidFormat("no certificate"))
        #expect(invalid?.message.contains(junk) == true)
    }
}
