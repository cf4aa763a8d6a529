import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import HeraldWebPush
import Testing

/// The `webpush` section: the key in its forms, the subject rule, the allow list, defaults and
/// unknown keys, each problem with its JSON path and never the key.
@Suite struct ConfigurationTests {
    @Test func theKeyIsBase64URLTextOrAPEMFile() throws {
        let (key, text) = try newVAPIDKey()
        let (c, errors, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "\#(text)", "subject": "https://example.com/contact"}"#)
        #expect(errors.isEmpty, "\(errors)")
        #expect(c?.vapidKey.publicKey == key.publicKey && c?.publicClientKey == key.publicKey.base64URL)
        #expect(c?.platform == .web && c?.defaultTTL == 86_400 && c?.timeout == 10 && c?.refusalsToPause == 3)
        #expect(c?.summary.contains(text) == false)

        let dir = try TemporaryDirectory(prefix: "herald-webpush-config")
        defer { dir.remove() }
        _ = try dir.write("vapid.pem", key.pemRepresentation)
        let (fromFile, fileErrors, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "vapid.pem", "subject": "mailto:a@example.com", "ttl": "1h", "allowedEndpoints": ["127.0.0.1"]}"#,
                                                          baseDirectory: dir.path)
        #expect(fileErrors.isEmpty, "\(fileErrors)")
        #expect(fromFile?.vapidKey.publicKey == key.publicKey && fromFile?.defaultTTL == 3600)
        #expect(fromFile?.allowedEndpoints.patterns == ["127.0.0.1"])
    }

    @Test func problemsNameTheirPathAndNeverShowTheKey() throws {
        let short = Base64URL.encode([UInt8](repeating: 9, count: 31))
        let (c, errors, warnings) = readConfiguration(#"""
            {"type": "webpush", "vapidKey": "\#(short)", "subject": "mailto: push@example.com",
             "allowedEndpoints": ["fcm.googleapis.com", "https://x/"], "ttl": "30d", "vapidLifetime": "25h", "timeot": 3}
            """#)
        #expect(c == nil)
        let paths = errors.map(\.path)
        #expect(paths.contains("transports.web.vapidKey") && paths.contains("transports.web.subject"), "\(errors)")
        #expect(paths.contains("transports.web.allowedEndpoints[1]") && paths.contains("transports.web.ttl") && paths.contains("transports.web.vapidLifetime"), "\(errors)")
        #expect(!errors.description.contains(short))
        #expect(warnings.contains { $0.path == "transports.web.timeot" && $0.message.contains("timeout") }, "\(warnings)")
        for subject in ["mailto:push@localhost", "http://example.com", "push@example.com", "https://localhost/x"] {
            let (_, e, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "\#(try newVAPIDKey().1)", "subject": "\#(subject)"}"#)
            #expect(e.contains { $0.path == "transports.web.subject" }, "\(subject): \(e)")
        }
        let (_, missing, _) = readConfiguration(#"{"type": "webpush"}"#)
        #expect(missing.map(\.path).contains("transports.web.vapidKey") && missing.map(\.path).contains("transports.web.subject"), "\(missing)")
    }
}
