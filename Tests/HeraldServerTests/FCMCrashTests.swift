import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald serve` with an fcm route killed with SIGKILL while sends are in flight (FCM answers
/// after 300 ms), then started again: every accepted notification reaches FCM for every device
/// (at least once: see ``KillNineRun``).
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
        let devices = 10, notifications = 6
        let run = try await KillNineRun.run(dir: dir, config: config, app: FCMDaemonTests.app, notifications: notifications,
                                            deliveries: notifications * devices, killWhen: 5, received: { fcm.received.count }) { client in
            for k in 1...devices {
                let r = try await client.post("/v1/devices", #"{"app":"\#(FCMDaemonTests.app)","user":"u","token":"\#(FCMDaemonTests.androidToken(100 + k))"}"#)
                #expect(r.status == 201, "\(r.text)")
            }
        }
        var pairs = Set<String>()
        for m in fcm.received { pairs.insert("\(m.token ?? "") \(m.data["herald_id"] ?? "")") }
        #expect(pairs.count == run.ids.count * devices, "lost: \(run.ids.count * devices - pairs.count)")
    }
}
