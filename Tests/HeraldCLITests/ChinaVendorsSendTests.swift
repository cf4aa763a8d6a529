import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// End to end (issue 39): one user with an iPhone, an FCM phone and one phone of each China
/// vendor gets one notification on each, every phone through its own channel's simulator.
@Suite(.serialized) struct ChinaVendorsSendTests {
    static let iosToken = "11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"
    static let fcmToken = "c1d:APA91b" + String(String(repeating: "Rk7_-Zq", count: 24).prefix(142))
    static let phones = [("huawei", "IQAAAACy0kVvAAB5h2nRlm8cTk9Yq3b"), ("xiaomi", "hP+2k8WmQ1Lr/0mNbvCxZ9uYtRe4iOp="),
                         ("oppo", "OPPO_CN_d3b07384d113edec49eaa6238ad5ff00"), ("vivo", "16209183920351893859023")]

    @Test(.timeLimit(.minutes(3))) func oneUserGetsOneNotificationOnEachPhone() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let tls = SimulatorHTTP2Server.Configuration.TLS(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)
        let fcm = try FCMSimulator(configuration: FCMSimulator.Configuration(tls: tls))
        try fcm.start()
        defer { fcm.stop() }
        var vendors: [ChinaVendor: ChinaVendorSimulator] = [:]
        for vendor in ChinaVendor.allCases {
            let sim = try ChinaVendorSimulator(configuration: .init(vendor: vendor, tls: tls))
            try sim.start()
            vendors[vendor] = sim
        }
        defer { for sim in vendors.values { sim.stop() } }
        let dir = try TemporaryDirectory(prefix: "herald-cli-china")
        defer { dir.remove() }
        try fcm.writeServiceAccount(to: dir.file("sa.json"), key: TestKeys.rsa)
        let c = ChinaVendorCredentials()
        let config = try dir.write("config.json", """
            {"storage": {"path": "var/herald.db"},
             "apps": {"com.example.app": {"routes": ["apns", "android", "huawei", "xiaomi", "oppo", "vivo"]}},
             "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                                     "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"},
                            "android": {"type": "fcm", "credentialsFile": "\(dir.file("sa.json"))", "endpoint": "\(fcm.baseURL)", "caFile": "\(certs.caFile)"},
                            "huawei": {"type": "hms", "appId": "\(c.appID)", "appSecret": "${HMS_APP_SECRET}", "endpoint": "\(vendors[.hms]!.baseURL)",
                                       "authEndpoint": "\(vendors[.hms]!.authURL)", "caFile": "\(certs.caFile)"},
                            "xiaomi": {"type": "xiaomi", "appSecret": "${XIAOMI_APP_SECRET}", "packageName": "\(c.packageName)",
                                       "endpoint": "\(vendors[.xiaomi]!.baseURL)", "caFile": "\(certs.caFile)"},
                            "oppo": {"type": "oppo", "appKey": "\(c.appKey)", "masterSecret": "${OPPO_MASTER_SECRET}", "channelId": "messages",
                                     "endpoint": "\(vendors[.oppo]!.baseURL)", "caFile": "\(certs.caFile)"},
                            "vivo": {"type": "vivo", "appId": "\(c.appID)", "appKey": "\(c.appKey)", "appSecret": "${VIVO_APP_SECRET}",
                                     "endpoint": "\(vendors[.vivo]!.baseURL)", "caFile": "\(certs.caFile)"}}}
            """)
        let environment = ["HMS_APP_SECRET": c.appSecret, "XIAOMI_APP_SECRET": c.appSecret, "OPPO_MASTER_SECRET": c.masterSecret, "VIVO_APP_SECRET": c.appSecret]
        func herald(_ arguments: [String]) async throws -> ProcessResult {
            try await Run.herald(arguments + ["--config", config], environment: environment, directory: dir.path)
        }
        let check = try await herald(["check"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(!check.stdout.contains(c.appSecret) && !check.stdout.contains(c.masterSecret))
        #expect(try await herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--token", Self.iosToken]).status == 0)
        let fcmAdded = try await herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--platform", "android", "--token", Self.fcmToken])
        #expect(fcmAdded.stdout.contains("transport android"), "\(fcmAdded.stdout)\(fcmAdded.stderr)")
        for (vendor, token) in Self.phones {
            let added = try await herald(["devices", "add", "--app", "com.example.app", "--user", "alice", "--platform", "android",
                                          "--vendor", vendor, "--token", token])
            #expect(added.stdout.contains("transport \(vendor)"), "\(added.stdout)\(added.stderr)")
        }

        let sent = try await herald(["send", "--app", "com.example.app", "--user", "alice", "--title", "Order shipped", "--body", "It is on its way",
                                     "--json"])
        #expect(sent.status == 0, "\(sent.stdout)\(sent.stderr)")
        let outcomes = try sent.lines.map { try JSONValue.parse($0) }
        #expect(outcomes.count == 6)
        #expect(Set(outcomes.compactMap { $0["transport"]?.stringValue }) == ["apns", "android", "huawei", "xiaomi", "oppo", "vivo"])
        #expect(outcomes.allSatisfy { $0["outcome"]?.stringValue == "delivered" }, "\(sent.stdout)")
        #expect(apns.simulator.received.count == 1 && fcm.received.count == 1)
        for (vendor, (_, token)) in zip([ChinaVendor.hms, .xiaomi, .oppo, .vivo], Self.phones) {
            let received = vendors[vendor]!.received
            #expect(received.count == 1 && received.first?.tokens == [token], "\(vendor): \(received)")
        }
        #expect(vendors[.hms]!.received.first?.message["android"]?["notification"]?["title"] == "Order shipped")
        #expect(vendors[.xiaomi]!.received.first?.message["description"] == "It is on its way")
        #expect(vendors[.oppo]!.received.first?.message["content"] == "It is on its way")
        #expect(vendors[.vivo]!.received.first?.message["title"] == "Order shipped")
    }
}
