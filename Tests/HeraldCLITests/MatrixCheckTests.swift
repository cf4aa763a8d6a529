import Foundation
import HeraldCore
import HeraldMatrix
import HeraldTestKit
import Testing

/// `herald check` on the `matrix` section: its summary, a path-named error, and an app id whose
/// Herald app has no route for its tokens.
@Suite struct MatrixCheckTests {
    /// One app routed to a production-only APNs transport (never contacted by `check`).
    func check(_ matrix: String) async throws -> ProcessResult {
        let dir = try TemporaryDirectory(prefix: "herald-matrix-check")
        defer { dir.remove() }
        let certs = try TestCertificates.shared()
        let config = try dir.write("config.json", """
            {"apps": {"com.example.app": {"routes": ["prod"]}},
             "transports": {"prod": {"type": "apns-http2", "environment": "production", "endpoint": "https://127.0.0.1:1",
                                     "caFile": "\(certs.caFile)", "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)",
                                     "teamId": "\(certs.teamID)"}},
             "matrix": \(matrix)}
            """)
        return try await Run.herald(["check", "--config", config])
    }

    @Test func summaryNamesListenerAndAppIDs() async throws {
        let r = try await check(#"{"listen": "127.0.0.1:8090", "apps": {"im.vector.app.ios.prod": {"app": "com.example.app", "defaultPayload": {"aps": {"mutable-content": 1}}}}}"#)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("matrix: POST /_matrix/push/v1/notify on 127.0.0.1:8090, maxBodyBytes=131072 maxRequestsPerSecond=1000"))
        #expect(r.stdout.contains(#"im.vector.app.ios.prod → app com.example.app (production, transport prod) defaultPayload={"aps":{"mutable-content":1}}"#))
    }

    @Test func errorsNameTheirPath() async throws {
        let r = try await check(#"{"apps": {"im.vector.app.ios.prod": {"app": "com.example.app", "defaultPayload": {"aps": {"url-args": []}}}}}"#)
        #expect(r.status == 3)
        #expect(r.stderr.contains(#"matrix.apps["im.vector.app.ios.prod"].defaultPayload.aps.url-args: Herald does not send this aps key"#), "\(r.stderr)")
    }

    @Test func anAppIDWithoutARouteFails() async throws {
        let r = try await check(#"{"apps": {"im.vector.app.ios.dev": {"app": "com.example.app", "environment": "sandbox"}}}"#)
        #expect(r.status != 0)
        #expect(r.stderr.contains("app com.example.app has no route for sandbox tokens"), "\(r.stderr)")
    }

    @Test func anAndroidOrWebAppIDWithoutARouteOfItsPlatformFails() async throws {
        let r = try await check(#"{"apps": {"im.vector.app.web": {"app": "com.example.app", "platform": "web"}}}"#)
        #expect(r.status != 0)
        #expect(r.stderr.contains("app com.example.app has no web route"), "\(r.stdout) \(r.stderr)")
    }

    @Test func aPlatformIsIOSAndroidOrWebAndOnlyIOSHasAnEnvironment() async throws {
        var r = try await check(#"{"apps": {"x": {"app": "com.example.app", "platform": "huawei"}}}"#)
        #expect(r.status == 3)
        #expect(r.stderr.contains(#"matrix.apps.x.platform: expected one of "ios", "android", "web", found "huawei""#), "\(r.stderr)")
        r = try await check(#"{"apps": {"x": {"app": "com.example.app", "platform": "android", "environment": "production"}}}"#)
        #expect(r.status == 3)
        #expect(r.stderr.contains(#"matrix.apps.x.environment: is the environment of APNs tokens; an app_id of platform android has none"#), "\(r.stderr)")
    }
}
