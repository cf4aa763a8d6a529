import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// `herald send` for one app with iOS and Android routes against the APNs and FCM simulators:
/// each device is judged by its own route, and the command reports each one.
@Suite(.serialized) struct CrossPlatformSendTests {
    static let iosToken = "11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"
    static let androidToken = "c1d:APA91b" + String(String(repeating: "Rk7_-Zq", count: 24).prefix(142))

    @Test(.timeLimit(.minutes(2))) func eachDeviceIsReportedInItsOwnPlatformsState() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let fcm = try FCMSimulator(configuration: FCMSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)))
        try fcm.start()
        defer { fcm.stop() }
        let dir = try TemporaryDirectory(prefix: "herald-cli-cross")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        let config = try dir.write("config.json", """
            {"storage": {"path": "var/herald.db"},
             "apps": {"com.example.app": {"routes": ["apns", "android"]}},
             "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                                     "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"},
                            "android": {"type": "fcm", "credentialsFile": "\(dir.file("sa.json"))", "endpoint": "\(fcm.baseURL)", "caFile": "\(certs.caFile)"}}}
            """)
        func herald(_ arguments: [String]) async throws -> ProcessResult {
            try await Run.herald(arguments + ["--config", config], environment: [:], directory: dir.path)
        }
        #expect(try await herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", Self.iosToken]).status == 0)
        let added = try await herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--platform", "android", "--token", Self.androidToken])
        #expect(added.status == 0, "\(added.stderr)")

        // Data only: a background push on APNs, a data message on FCM; both delivered.
        let data = try await herald(["send", "--app", "com.example.app", "--user", "alice", "--data", #"{"k":"v"}"#, "--json"])
        #expect(data.status == 0, "\(data.stdout)\(data.stderr)")
        let outcomes = try data.lines.map { try JSONValue.parse($0) }
        #expect(Set(outcomes.compactMap { $0["transport"]?.stringValue }) == ["apns", "android"])
        #expect(outcomes.allSatisfy { $0["outcome"]?.stringValue == "delivered" }, "\(data.stdout)")
        #expect(apns.simulator.received.first?.pushType == .background && apns.simulator.received.first?.priority == 5)
        #expect(fcm.received.first?.data["k"] == "v" && fcm.received.first?.message["notification"] == nil)

        // Data too large for FCM (its values are strings, so the quotes are escaped): the iPhone
        // gets it, the Android phone is reported rejected with FCM's reason, and the exit says so.
        let list = "[" + Array(repeating: #""a""#, count: 800).joined(separator: ",") + "]"
        let big = try await herald(["send", "--app", "com.example.app", "--user", "alice", "--data", #"{"list":\#(list)}"#])
        #expect(big.status == 1, "\(big.stdout)\(big.stderr)")
        #expect(big.stdout.contains("delivered") && big.stdout.contains("transport=apns"), "\(big.stdout)")
        #expect(big.stdout.contains("rejected") && big.stdout.contains("route android (fcm): payload"), "\(big.stdout)")
        #expect(big.stderr.contains("1 of 2 devices not delivered (1 rejected)"), "\(big.stderr)")
        #expect(apns.simulator.received.count == 2 && fcm.received.count == 1)
    }
}
