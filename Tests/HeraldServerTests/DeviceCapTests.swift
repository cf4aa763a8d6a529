import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// `apps.<id>.maxRegisteredDevicesPerUser` through the API: registering past it still answers
/// 201, and the user's least recently registered device goes, logged (token shortened) and
/// counted; the user's devices never exceed the bound, and other users and apps are untouched.
@Suite(.serialized, .stopsDaemons) struct DeviceCapTests {
    static func config(cap: Int) -> String {
        TestDaemon.configJSON().replacingOccurrences(
            of: #""\#(TestDaemon.app)": {"routes": ["t"]}"#,
            with: #""\#(TestDaemon.app)": {"routes": ["t"], "maxDevicesPerUser": 2, "maxRegisteredDevicesPerUser": \#(cap)}"#)
    }

    static func tokens(_ d: TestDaemon, user: String, app: String = TestDaemon.app) async throws -> Set<String> {
        let r = try await d.client.get("/v1/users/\(user)/devices?app=\(app)")
        #expect(r.status == 200, "\(r.text)")
        return Set((r.json?["devices"]?.arrayValue ?? []).compactMap { $0["token"]?.stringValue })
    }

    @Test func registeringPastTheCapSucceedsAndRemovesTheLeastRecentlyRegisteredDevice() async throws {
        let clock = TestClock()
        let config = Self.config(cap: 3)
        #expect(config.contains("maxRegisteredDevicesPerUser"), "the app's section was not found in \(config)")
        let d = try await TestDaemon.start(config: config, clock: clock)
        // Tokens whose shortened forms differ (the log keeps the first 8 characters).
        let token: (Int) -> String = { String(repeating: String(format: "%02x", $0 % 256), count: 32) }
        // Another user and another app, each at the bound: never touched by alice's registrations.
        for i in 101...103 {
            #expect(try await d.register(user: "bob", token: token(i)).status == 201)
            #expect(try await d.register(user: "alice", token: token(i + 100), app: "org.other.app").status == 201)
        }
        for i in 1...3 {
            clock.advance(by: 1)
            #expect(try await d.register(user: "alice", token: token(i)).status == 201)
        }
        // Device 1 registers again: now 2 is the least recently registered.
        clock.advance(by: 1)
        #expect(try await d.register(user: "alice", token: token(1)).status == 200)
        clock.advance(by: 1)
        let fourth = try await d.register(user: "alice", token: token(4))
        #expect(fourth.status == 201 && fourth.json?["change"]?.stringValue == "created", "\(fourth.text)")
        #expect(try await Self.tokens(d, user: "alice") == [token(1), token(3), token(4)])
        clock.advance(by: 1)
        #expect(try await d.register(user: "alice", token: token(5)).status == 201)
        #expect(try await Self.tokens(d, user: "alice") == [token(1), token(4), token(5)])
        #expect(try await Self.tokens(d, user: "bob") == Set((101...103).map(token)))
        #expect(try await Self.tokens(d, user: "alice", app: "org.other.app") == Set((201...203).map(token)))

        // Logged with the token shortened, and counted.
        let removals = d.logs.text.split(separator: "\n").filter { $0.contains("maxRegisteredDevicesPerUser") }
        #expect(removals.count == 2, "\(removals)")
        #expect(removals.first?.contains(Redact.token(token(2))) == true && removals.last?.contains(Redact.token(token(3))) == true, "\(removals)")
        #expect(!d.logs.text.contains(token(2)) && !d.logs.text.contains(token(3)), "a full token in the log")
        let metrics = try await d.client.get("/metrics")
        #expect(metrics.text.contains(#"herald_devices_removed_total{app="com.example.app",reason="maxRegisteredDevicesPerUser"} 2"#), "\(metrics.text)")
    }
}
