import Foundation
import HeraldCore
import HeraldGorush
import HeraldTestKit
import Testing

/// gorush's `/api/push` with tokens that no route takes: reported as gorush reports a failed
/// push (`logs`, `push_error`) while the others are sent; a 400 naming the token when nothing of
/// the request can be sent.
@Suite(.serialized, .stopsDaemons) struct GorushDeadTokenTests {
    static let iosToken = GorushTests.iosToken

    @Test(.timeLimit(.minutes(2))) func deadTokensAreLoggedAndCountedAndTheRestIsSent() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        let c = f.gorush()
        let android = GorushFixture.androidToken("dt1")
        let r = try await c.post("/api/push", """
            {"notifications": [{"tokens": ["\(Self.iosToken)", "not-a-token"], "platform": 1, "message": "Hello iOS", "notif_id": "n-1"},
                               {"tokens": ["\(android)"], "to": "tiny", "platform": 2, "message": "Hello Android"},
                               {"tokens": ["nor-this"], "platform": 2, "message": "nobody"}]}
            """)
        #expect(r.status == 200, "\(r)")
        let body = try #require(r.json)
        #expect(body["success"]?.stringValue == "ok" && body["counts"] == 5, "\(r)")
        let logs = try #require(body["logs"]?.arrayValue, "\(r)")
        #expect(logs.count == 3, "\(r)")
        #expect(logs.map { $0["type"]?.stringValue } == ["failed-push", "failed-push", "failed-push"])
        #expect(logs.map { $0["platform"]?.stringValue } == ["ios", "android", "android"])
        #expect(logs.map { $0["token"]?.stringValue } == ["not-a-token", "tiny", "nor-this"])
        #expect(logs.map { $0["message"]?.stringValue } == ["Hello iOS", "Hello Android", "nobody"])
        #expect(logs[0]["notif_id"]?.stringValue == "n-1" && logs[1]["notif_id"] == nil)
        let errors = logs.compactMap { $0["error"]?.stringValue }
        #expect(errors.count == 3 && errors[0].hasPrefix("notifications[0].tokens[1]: no route of app com.example.app takes it: route apns: "), "\(errors)")
        #expect(errors[1].hasPrefix("notifications[1].to: ") && errors[2].hasPrefix("notifications[2].tokens[0]: ") && errors[2].contains("droid"), "\(errors)")

        // The good tokens went out; the refused ones count in push_error, the empty notification was not stored.
        var stat: JSONValue? = nil
        #expect(await eventually(timeout: 20) {
            stat = try? await c.get("/api/stat/app").json
            return stat?["ios"]?["push_success"] == 1 && stat?["android"]?["push_success"] == 1
        }, "\(String(describing: stat))")
        #expect(stat?["ios"]?["push_error"] == 1 && stat?["android"]?["push_error"] == 2, "\(String(describing: stat))")
        #expect(stat?["total_count"] == 2 && stat?["success_tasks"] == 2 && stat?["failure_tasks"] == 1, "\(String(describing: stat))")
        #expect(f.received(Self.iosToken).count == 1 && f.sent(android).count == 1)
        #expect(f.apns.simulator.received.count == 1 && f.fcm.received.count == 1)
        await f.stop()
    }

    @Test(.timeLimit(.minutes(2))) func aRequestWithNoTokenThatCanBeSentIsA400NamingItAndStoresNothing() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        let c = f.gorush()
        let r = try await c.post("/api/push", """
            {"notifications": [{"tokens": ["not-a-token", "zz"], "platform": 1, "message": "x"},
                               {"tokens": ["nor-this"], "platform": 2, "message": "y"}]}
            """)
        #expect(r.status == 400 && r.json?["code"] == 400, "\(r)")
        let message = try #require(r.json?["message"]?.stringValue)
        #expect(message.hasPrefix("notifications[0].tokens[0]: no route of app com.example.app takes it: route apns: "), "\(message)")
        #expect(message.hasSuffix(" (and 2 more tokens no route takes)"), "\(message)")
        let stat = try await c.get("/api/stat/app").json
        #expect(stat?["success_tasks"] == 0 && stat?["failure_tasks"] == 2 && stat?["total_count"] == 0, "\(String(describing: stat))")
        let metrics = try await f.test.client.get("/metrics")
        #expect(!metrics.text.contains(#"herald_notifications_accepted_total{app="com.example.app"}"#))
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(f.apns.simulator.counters.requests == 0 && f.fcm.received.isEmpty)
        await f.stop()
    }
}
