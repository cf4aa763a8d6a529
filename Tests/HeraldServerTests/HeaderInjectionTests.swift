import Foundation
import HeraldCore
import HeraldGorush
import HeraldSimulator
import HeraldTestKit
import Testing

/// End to end through the daemon to the APNs simulator: a collapse key or id that would add a
/// header (`x-evil: 1`), change one (`apns-priority: 5`) or be cut short (NUL) is a 400 naming the
/// field, from the API and from gorush's `/api/push` alike, and the simulator never records it.
@Suite(.serialized, .stopsDaemons) struct HeaderInjectionTests {
    static let token = GorushTests.iosToken

    @Test(.timeLimit(.minutes(2))) func theSimulatorNeverRecordsAnInjectedHeader() async throws {
        let f = try await GorushFixture.start()
        defer { f.apns.stop() }
        for (escaped, name) in [(#"a\r\nx-evil: 1"#, "CR"), (#"a\r\napns-priority: 5"#, "CR"), (#"a\nx-evil: 1"#, "LF"), (#"cut\u0000short"#, "NUL")] {
            let neutral = try await f.test.client.post("/v1/notifications", #"{"app":"org.example.ios","tokens":["\#(Self.token)"],"alert":"x","collapse_key":"\#(escaped)"}"#)
            #expect(neutral.status == 400 && neutral.errorField == "collapse_key", "\(neutral)")
            #expect(neutral.text.contains("contains a control character (\(name))"), "\(neutral)")
            let block = try await f.test.client.post("/v1/notifications", #"{"app":"org.example.ios","tokens":["\#(Self.token)"],"alert":"x","apns":{"collapse_id":"\#(escaped)"}}"#)
            #expect(block.status == 400 && block.text.contains("apns.collapse_id") && block.text.contains("contains a control character (\(name))"), "\(block)")
            let gorush = try await f.gorush().post("/api/push", #"{"notifications":[{"tokens":["\#(Self.token)"],"platform":1,"message":"x","collapse_id":"\#(escaped)"}]}"#)
            #expect(gorush.status == 400, "\(gorush)")
            #expect(gorush.json?["message"]?.stringValue == "notifications[0].collapse_id: contains a control character (\(name))", "\(gorush)")
        }
        // A well-formed one goes through, with its collapse id as given and nothing else.
        let good = try await f.gorush().post("/api/push", #"{"notifications":[{"tokens":["\#(Self.token)"],"platform":1,"message":"x","collapse_id":"score"}]}"#)
        #expect(good.status == 200, "\(good)")
        let arrived = try #require(await f.apns.simulator.waitForNotifications(count: 1))
        #expect(arrived.count == 1 && arrived[0].collapseID == "score" && arrived[0].priority == 10)
        #expect(f.apns.simulator.counters.requests == 1)
        #expect(f.apns.simulator.received.allSatisfy { r in r.header("x-evil") == nil && r.headers.allSatisfy { !$0.value.contains("\r") && !$0.value.contains("\n") } })
        await f.stop()
    }
}
