import Foundation
import HeraldCore
import HeraldMatrix
import HeraldSimulator
import HeraldTestKit
import Testing

/// The built `herald serve` killed with SIGKILL after it answered a notify 200 while APNs had
/// not answered the push: started again, it sends the push, and the homeserver's retry of the
/// same event is not sent a second time.
@Suite(.serialized) struct MatrixDurabilityTests {
    @Test(.timeLimit(.minutes(2))) func killDashNineAfterA200StillDelivers() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        let token = MatrixGatewayFixture.token(9)
        var faults = HTTP2Faults()
        faults.unansweredTokens = [token.hex]   // the first run's request stays in flight until the kill
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-matrix-kill9")
        defer { dir.remove() }
        let path = try dir.write("config.json", MatrixGatewayFixture.config(
            apns, matrix: #"{"apps": {"\#(MatrixGatewayFixture.appID)": {"app": "com.example.app"}}}"#,
            storage: #""path": "herald.db""#))

        func start() async throws -> (ChildProcess, Int) {
            let child = try ChildProcess.herald(["serve", "--config", path], directory: dir.path)
            guard let port = await child.listeningPort(timeout: 30) else {
                child.terminate()
                throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
            }
            return (child, port)
        }
        let body = MatrixGatewayFixture.body(eventID: "$durable", pushkey: token.base64, pushkeyTS: 1_700_000_000)
        var (child, port) = try await start()
        let r = try await HTTPTestClient(port: port).post(MatrixGatewayFixture.notifyPath, body)
        #expect(r.status == 200 && r.text == "{\"rejected\":[]}\n")
        // The push reached APNs, which has not answered: kill the daemon now.
        #expect(await eventually(timeout: 20) { apns.simulator.counters.unansweredStreams >= 1 })
        #expect(apns.simulator.received.isEmpty)
        child.signal(SIGKILL)
        #expect(await child.waitForExit(timeout: 20) != nil)

        apns.simulator.setFaults(HTTP2Faults())
        (child, port) = try await start()
        defer { child.terminate() }
        let arrived = try #require(await apns.simulator.waitForNotifications(count: 1, timeout: 30))
        #expect(arrived[0].deviceToken == token.hex)
        #expect(arrived[0].payloadJSON?["event_id"]?.stringValue == "$durable")
        // A homeserver retry of the event: the same event is not sent again.
        let again = try await HTTPTestClient(port: port).post(MatrixGatewayFixture.notifyPath, body)
        #expect(again.status == 200)
        let settled = await eventually(timeout: 20) {
            let m = (try? await HTTPTestClient(port: port, key: TestDaemon.key).get("/metrics").text) ?? ""
            return m.contains(#"herald_queue_depth{transport="apns"} 0"#) && m.contains(#"herald_deliveries_in_flight{transport="apns"} 0"#)
                && m.contains(#"outcome="duplicate"} 1"#)
        }
        #expect(settled)
        #expect(apns.simulator.received.count == 1)
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 20) == 0)
    }
}
