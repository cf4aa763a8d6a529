import Foundation
import HeraldCore
import HeraldHMS
import HeraldMatrix
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import HeraldXiaomi
import Testing

/// A Matrix app_id mapped to a China vendor's route (`"vendor"` in the mapping): its pushers get
/// Sygnal's Android data (event id, room, counts) through that vendor, as a data message (HMS)
/// or a pass-through message (Xiaomi), never a notification the vendor would show by itself.
@Suite(.serialized, .stopsDaemons) struct MatrixVendorTests {
    @Test(.timeLimit(.minutes(2))) func aVendorMappingSendsSygnalsAndroidDataThroughThatVendor() async throws {
        let certs = try TestCertificates.shared()
        let tls = SimulatorHTTP2Server.Configuration.TLS(certificateFile: certs.serverCertificate, keyFile: certs.serverKey)
        let hms = try ChinaVendorSimulator(configuration: .init(vendor: .hms, tls: tls))
        let xiaomi = try ChinaVendorSimulator(configuration: .init(vendor: .xiaomi, tls: tls))
        try hms.start()
        defer { hms.stop() }
        try xiaomi.start()
        defer { xiaomi.stop() }
        let c = ChinaVendorCredentials()
        let config = """
            {"storage": {"path": "herald.db", "synchronous": "normal"},
             "apps": {"com.example.app": {"routes": ["huawei", "xiaomi"]}},
             "transports": {"huawei": {"type": "hms", "appId": "\(c.appID)", "appSecret": "${HMS_APP_SECRET}", "endpoint": "\(hms.baseURL)",
                                       "authEndpoint": "\(hms.authURL)", "caFile": "\(certs.caFile)"},
                            "xiaomi": {"type": "xiaomi", "appSecret": "${XIAOMI_APP_SECRET}", "packageName": "\(c.packageName)",
                                       "endpoint": "\(xiaomi.baseURL)", "caFile": "\(certs.caFile)"}},
             "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]}]},
             "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
             "matrix": {"apps": {"im.example.huawei": {"app": "com.example.app", "vendor": "huawei"},
                                 "im.example.xiaomi": {"app": "com.example.app", "vendor": "xiaomi"}}}}
            """
        var registry = TransportRegistry()
        registry.register(HMSTransport.self)
        registry.register(XiaomiTransport.self)
        registry.register(section: MatrixConfiguration.self)
        let environment = ["HMS_APP_SECRET": c.appSecret, "XIAOMI_APP_SECRET": c.appSecret]
        let directory = try TemporaryDirectory(prefix: "herald-matrix-vendor")
        let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: directory.path, registry: registry, environment: environment)
        let logs = RecordingLogHandler()
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                            options: Daemon.Options(random: { 0.5 }, environment: environment, frontEnds: [MatrixGateway.self]))
        let port = try await daemon.start()
        let test = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        StopsDaemons.current?.withLock { $0.append(test) }
        do {
            typealias F = MatrixGatewayFixture
            let huaweiToken = "IQAAAACy0kVvAAB5h2nRlm8cTk9Yq3b", xiaomiToken = "hP+2k8WmQ1Lr/0mNbvCxZ9uYtRe4iOp="
            for (appID, token, event) in [("im.example.huawei", huaweiToken, "$hw"), ("im.example.xiaomi", xiaomiToken, "$mi")] {
                let r = try await HTTPTestClient(port: port, key: nil).post(F.notifyPath, F.body(eventID: event, pushkey: token, appID: appID))
                #expect(r.status == 200 && r.json?["rejected"]?.arrayValue == [], "\(r.text)")
            }
            #expect(await eventually(timeout: 15) { hms.received.count == 1 && xiaomi.received.count == 1 }, "\(hms.received) \(xiaomi.received)")
            let h = try #require(hms.received.first)
            #expect(h.tokens == [huaweiToken])
            #expect(h.message["android"]?["notification"] == nil, "a data message: \(h.message.jsonString)")
            let hmsData = try JSONValue.parse(try #require(h.message["data"]?.stringValue))
            #expect(hmsData["event_id"]?.stringValue == "$hw" && hmsData["room_id"]?.stringValue == "!room:example.org" && hmsData["prio"] == "high",
                    "\(hmsData.jsonString)")
            let x = try #require(xiaomi.received.first)
            #expect(x.tokens == [xiaomiToken])
            #expect(x.message["pass_through"]?.stringValue == "1", "\(x.message.jsonString)")
            let payload = try JSONValue.parse(try #require(x.message["payload"]?.stringValue))
            #expect(payload["event_id"]?.stringValue == "$mi" && payload["content_body"]?.stringValue == "hi", "\(payload.jsonString)")
            // The pushkeys became devices of the vendors' routes.
            let devices = try await test.client.get("/v1/users/matrix:im.example.huawei/devices?app=com.example.app")
            #expect(devices.json?["devices"]?.arrayValue?.first?["transport"]?.stringValue == "huawei", "\(devices.text)")
        } catch {
            Issue.record(error)
        }
        await test.stop()
    }
}
