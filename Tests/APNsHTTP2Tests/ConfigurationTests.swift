import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

func readConfig(_ json: JSONValue) -> (APNsHTTP2Configuration?, [String], [String]) {
    let context = JSONReadContext(baseDirectory: "/")
    let node = JSONNode(root: json, context: context)
    let c = APNsHTTP2Transport.configuration(from: node)
    context.reportUnknownKeys()
    return (c, context.errors.map(\.description), context.warnings.map(\.description))
}

@Suite struct APNsHTTP2ConfigurationTests {
    let certs: TestCertificates

    init() throws { certs = try TestCertificates.shared() }

    @Test func tokenAuthWithDefaults() throws {
        let (c, errors, warnings) = readConfig(["environment": "production", "keyFile": .string(certs.authKey),
                                                "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(errors.isEmpty && warnings.isEmpty)
        let config = try #require(c)
        #expect(config.endpoint.baseURL == "https://api.push.apple.com:443")
        #expect(config.connections == 1 && config.maxConcurrentStreams == 500 && config.timeout == 10)
        #expect(config.apnsEnvironment == .production)
        guard case .token(_, "ABC123DEFG", "DEF123GHIJ", _) = config.authentication else { Issue.record("token auth"); return }
    }

    @Test func sandboxAndEndpointOverride() throws {
        let (sandbox, _, _) = readConfig(["environment": "sandbox", "keyFile": .string(certs.authKey), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(sandbox?.endpoint.baseURL == "https://api.sandbox.push.apple.com:443")
        let (local, _, _) = readConfig(["environment": "sandbox", "endpoint": "https://127.0.0.1:2197", "caFile": .string(certs.caFile),
                                        "keyFile": .string(certs.authKey), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(local?.endpoint.baseURL == "https://127.0.0.1:2197")
        let (_, _, warnings) = readConfig(["environment": "production", "endpoint": "https://api.push.apple.com:8443",
                                           "keyFile": .string(certs.authKey), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(warnings == ["endpoint: APNs listens on port 443 or 2197, not 8443"])
    }

    @Test func certificateAuthFromP12PEMPairAndCombinedPEM() throws {
        let (p12, e1, _) = readConfig(["environment": "production", "p12File": .string(certs.clientP12), "passphrase": .string(certs.p12Passphrase)])
        #expect(e1.isEmpty)
        guard case .certificate(let identity, _)? = p12?.authentication else { Issue.record("certificate auth"); return }
        #expect(identity.certificate.topics.contains("com.example.app"))
        let (pair, e2, _) = readConfig(["environment": "production", "certFile": .string(certs.clientCertificate), "keyFile": .string(certs.clientKey)])
        #expect(e2.isEmpty && pair != nil)
        let (combined, e3, _) = readConfig(["environment": "production", "certFile": .string(certs.clientCombined)])
        #expect(e3.isEmpty && combined != nil)
        let (encrypted, e4, _) = readConfig(["environment": "production", "certFile": .string(certs.clientCertificate),
                                             "keyFile": .string(certs.clientEncryptedKey), "passphrase": .string(certs.p12Passphrase)])
        #expect(e4.isEmpty && encrypted != nil)
    }

    @Test func credentialErrorsNameTheKey() throws {
        let (_, wrong, _) = readConfig(["environment": "production", "p12File": .string(certs.clientP12), "passphrase": "not-the-passphrase"])
        #expect(wrong.count == 1)
        #expect(wrong.first?.hasPrefix("passphrase: ") == true)
        #expect(wrong.first?.contains("wrong passphrase") == true)
        #expect(wrong.first?.contains("not-the-passphrase") == false)

        let (_, p384, _) = readConfig(["environment": "production", "keyFile": .string(certs.p384Key), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(p384.count == 1 && p384[0].hasPrefix("keyFile: ") && p384[0].contains("secp384r1") && p384[0].contains("P-256"))

        let (_, missing, _) = readConfig(["environment": "production", "keyFile": "/nonexistent/AuthKey.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"])
        #expect(missing == ["keyFile: no such file \"/nonexistent/AuthKey.p8\""])

        let (_, none, _) = readConfig(["environment": "production"])
        #expect(none == ["no credentials: give keyFile, keyId and teamId (token auth), or certFile/p12File (certificate auth)"])

        let (_, both, _) = readConfig(["environment": "production", "certFile": .string(certs.clientCertificate), "keyId": "ABC123DEFG"])
        #expect(both == ["choose one kind of authentication: token (keyFile, keyId, teamId) or certificate (certFile/p12File)"])

        let (_, ids, _) = readConfig(["environment": "sandbox", "keyFile": .string(certs.authKey), "keyId": "abc", "teamId": "DEF123GHIJ"])
        #expect(ids == ["keyId: expected Apple's 10-character key id, such as \"ABC123DEFG\", found \"abc\""])

        let (_, env, _) = readConfig(["keyFile": .string(certs.authKey), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "endpoint": "ftp://x"])
        #expect(env.contains("environment: is required"))
        #expect(env.contains("endpoint: expected https://host:port, such as \"https://api.push.apple.com:443\" or \"https://127.0.0.1:2197\", found \"ftp://x\""))
    }

    @Test func proxyCredentialsStayOutOfTheSummary() throws {
        let (c, _, _) = readConfig(["environment": "production", "keyFile": .string(certs.authKey), "keyId": "ABC123DEFG",
                                    "teamId": "DEF123GHIJ", "proxy": "http://user:hunter2@proxy.internal:3128"])
        let summary = try #require(c).summary
        #expect(summary.contains("via proxy http://***@proxy.internal:3128"))
        #expect(!summary.contains("hunter2"))
    }

    @Test func engineIsCurlUnlessNGHTTP2IsChosen() throws {
        let base: [String: JSONValue] = ["environment": "production", "keyFile": .string(certs.authKey), "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"]
        #expect(readConfig(.object(base)).0?.engine == .curl)
        var chosen = base
        chosen["engine"] = "nghttp2"
        let (c, errors, _) = readConfig(.object(chosen))
        #expect(errors.isEmpty && c?.engine == .nghttp2)
        #expect(c?.summary.hasSuffix(", engine nghttp2") == true)
        chosen["engine"] = "quic"
        #expect(readConfig(.object(chosen)).1 == ["engine: unknown value \"quic\"; expected one of: curl, nghttp2"])
        // The nghttp2 engine tunnels through HTTP CONNECT proxies only; libcurl knows more kinds.
        chosen["engine"] = "nghttp2"
        chosen["proxy"] = "socks5://user:secret@proxy.internal:1080"
        let (_, proxyErrors, _) = readConfig(.object(chosen))
        #expect(proxyErrors.count == 1 && proxyErrors[0].hasPrefix("proxy: the nghttp2 engine supports HTTP CONNECT proxies"), "\(proxyErrors)")
        #expect(!proxyErrors[0].contains("secret"))
        chosen["engine"] = "curl"
        #expect(readConfig(.object(chosen)).1.isEmpty)
    }
}
