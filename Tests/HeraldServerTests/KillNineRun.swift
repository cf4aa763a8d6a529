import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The shape of a "kill -9 under load loses nothing" test, shared by the transports' crash
/// tests: `herald serve` (a child process) gets devices and notifications, is killed with
/// SIGKILL once `killWhen` holds (sends in flight, most not yet sent), and is started again on
/// the same store; the run ends when every delivery of every notification is `delivered`.
///
/// What "at least once" means here: a delivery the push service accepted just before the kill,
/// whose `delivered` had not reached the store, is sent again after the restart. So a peer may
/// receive a message twice (the test counts distinct device–notification pairs, and the
/// duplicates separately); it never receives it zero times.
struct KillNineRun {
    /// The notification ids sent.
    var ids: [String] = []
    /// Deliveries the peer had received when the kill came.
    var receivedAtKill = 0
    /// The deliveries' states after the restart, when the run ended (`["delivered": n]` on success).
    var states: [String: Int] = [:]
    /// Whether every delivery was `delivered` within the wait.
    var allDelivered = false

    /// Runs it in `dir` with `config`.
    /// - Parameters:
    ///   - register: registers the devices (first daemon).
    ///   - notifications: how many notifications to send (each `{"users":["u"],"body":"n<i>"}` to `app`).
    ///   - received: how many messages the peer has received so far.
    ///   - killWhen: kills when `received()` reaches this.
    ///   - deliveries: the expected deliveries in all (notifications × devices).
    static func run(dir: TemporaryDirectory, config: String, app: String, notifications: Int, deliveries: Int,
                    killWhen: Int, received: @Sendable () -> Int,
                    register: (HTTPTestClient) async throws -> Void) async throws -> KillNineRun {
        var run = KillNineRun()
        let (first, client) = try await FCMDaemonTests.serve(dir, config)
        defer { first.terminate() }
        try await register(client)
        for n in 0..<notifications {
            let r = try await client.post("/v1/notifications", #"{"app":"\#(app)","users":["u"],"body":"n\#(n)"}"#)
            #expect(r.status == 202, "\(r.text)")
            run.ids.append(r.json?["id"]?.stringValue ?? "")
        }
        #expect(await eventually(timeout: 30) { received() >= killWhen }, "\(first.stderr)")
        first.signal(SIGKILL)
        #expect(await first.waitForExit(timeout: 30) != nil)
        run.receivedAtKill = received()

        let (second, again) = try await FCMDaemonTests.serve(dir, config)
        defer { second.terminate() }
        let ids = run.ids
        run.allDelivered = await eventually(timeout: 90) { (try? await FCMDaemonTests.states(again, ids)) == ["delivered": deliveries] }
        run.states = try await FCMDaemonTests.states(again, ids)
        #expect(run.allDelivered, "\(run.states) \(second.stderr)")
        #expect(run.receivedAtKill < deliveries, "the kill came after everything was sent")
        second.signal(SIGTERM)
        #expect(await second.waitForExit(timeout: 30) == 0, "\(second.stderr)")
        return run
    }
}
