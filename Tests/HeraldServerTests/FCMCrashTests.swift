import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald serve` with an fcm route killed with SIGKILL while sends are in flight (FCM answers
/// after 300 ms), then started again: every accepted notification reaches FCM for every device.
@Suite(.serialized) struct FCMCrashTests {
    @Test(.timeLimit(.minutes(3))) func killNineUnderLoadLosesNothing() async throws {
        let (fcm, certs) = try FCMDaemonTests.fcmSimulator { $0.faults.latency = 0.3 }
        defer { fcm.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-fcm-kill")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        // Two streams at a time: the 60 sends take about 9 s, so the kill (after the fifth) lands
        // with most of them not yet sent and two in flight, every run.
        let config = FCMDaemonTests.config(fcm: fcm, credentials: dir.file("sa.json"), certificates: certs,
                                           fcmExtra: #", "maxConcurrentStreams": 2"#)
        let (first, client) = try await FCMDaemonTests.serve(dir, config)
        defer { first.terminate() }
        let devices = 10
        for k in 1...devices {
            let r = try await client.post("/v1/devices", #"{"app":"\#(FCMDaemonTests.app)","user":"u","token":"\#(FCMDaemonTests.androidToken(100 + k))"}"#)
            #expect(r.status == 201, "\(r.text)")
        }
        var ids: [String] = []
        for n in 0..<6 {
            let r = try await client.post("/v1/notifications", #"{"app":"\#(FCMDaemonTests.app)","users":["u"],"body":"n\#(n)"}"#)
            #expect(r.status == 202, "\(r.text)")
            ids.append(r.json?["id"]?.stringValue ?? "")
        }
        #expect(await eventually(timeout: 30) { fcm.received.count >= 5 }, "\(first.stderr)")
        first.signal(SIGKILL)
        #expect(await first.waitForExit(timeout: 30) != nil)
        let atKill = fcm.received.count

        let (second, again) = try await FCMDaemonTests.serve(dir, config)
        defer { second.terminate() }
        let done = await eventually(timeout: 90) { (try? await FCMDaemonTests.states(again, ids)) == ["delivered": ids.count * devices] }
        let states = try await FCMDaemonTests.states(again, ids)
        #expect(done, "\(states) \(second.stderr)")
        var pairs = Set<String>()
        for m in fcm.received { pairs.insert("\(m.token ?? "") \(m.data["herald_id"] ?? "")") }
        #expect(pairs.count == ids.count * devices, "lost: \(ids.count * devices - pairs.count)")
        #expect(atKill < ids.count * devices, "the kill came after everything was sent")
        second.signal(SIGTERM)
        #expect(await second.waitForExit(timeout: 30) == 0, "\(second.stderr)")
    }
}
