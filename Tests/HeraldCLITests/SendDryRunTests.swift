import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// `herald send --dry-run --json`: what each device would get, with the APNs environment its
/// route sends it to (the route's own attribute, as it normalises the token).
@Suite struct SendDryRunTests {
    @Test func eachPlannedDeliveryNamesItsRoutesEnvironment() async throws {
        let certs = try TestCertificates.shared()
        let f = try CLIFixture(extraTransports: """
        , "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:1",
                   "caFile": "\(certs.caFile)", "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"}
        """, routes: #"["apns"]"#)
        defer { f.dir.remove() }
        let dry = try await f.run(["send", "--app", "com.example.app", "--token", f.token(1), "--alert", "hi", "--dry-run", "--json"])
        #expect(dry.status == 0, "\(dry.stderr)")
        let line = try JSONValue.parse(try #require(dry.lines.first))
        #expect(line["environment"]?.stringValue == "sandbox", "\(dry.stdout)")
        #expect(line["transport"]?.stringValue == "apns" && line["push_type"]?.stringValue == "alert", "\(dry.stdout)")
        // A production token given for a sandbox-only app is refused before any plan.
        let wrong = try await f.run(["send", "--app", "com.example.app", "--token", f.token(1), "--environment", "production",
                               "--alert", "hi", "--dry-run", "--json"])
        #expect(wrong.status != 0)
    }

    @Test func theLogRouteNamesTheEnvironmentItWasGiven() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let given = try await f.run(["send", "--app", "com.example.app", "--token", f.token(2), "--environment", "sandbox",
                               "--alert", "hi", "--dry-run", "--json"])
        #expect(given.status == 0, "\(given.stderr)")
        #expect(try JSONValue.parse(try #require(given.lines.first))["environment"]?.stringValue == "sandbox", "\(given.stdout)")
        // Without one, a log route's device has none: the field is left out, not made up.
        let none = try await f.run(["send", "--app", "com.example.app", "--token", f.token(2), "--alert", "hi", "--dry-run", "--json"])
        #expect(none.status == 0, "\(none.stderr)")
        #expect(try JSONValue.parse(try #require(none.lines.first))["environment"] == nil, "\(none.stdout)")
    }
}
