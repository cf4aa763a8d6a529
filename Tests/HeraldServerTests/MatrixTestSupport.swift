import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldCrypto
import HeraldFCM
import HeraldMatrix
import HeraldServer
import HeraldSimulator
import HeraldSQLite
import HeraldTestKit
import HeraldWebPush

/// A daemon in this process with the real `apns-http2` transport pointed at the in-process APNs
/// simulator, and a `matrix` section: what the Matrix gateway tests drive. With
/// ``Platforms``, also the real `fcm` and `webpush` transports against the FCM and Web Push
/// simulators, for the apps `com.example.android` and `com.example.web`.
struct MatrixGatewayFixture {
    static let appID = "im.vector.app.ios.prod"
    static let androidAppID = "im.vector.app.android"
    static let webAppID = "im.vector.app.web"
    static let notifyPath = "/_matrix/push/v1/notify"
    /// `matrix.apps` for the three platforms.
    static let allApps = #"{"\#(appID)": {"app": "com.example.app"}, "\#(androidAppID)": {"app": "com.example.android"}, "\#(webAppID)": {"app": "com.example.web"}}"#

    /// The FCM and Web Push simulators of an Android-and-web fixture, and their faults.
    struct Platforms {
        var fcmFaults = FCMFaults()
        var webFaults = WebPushServiceRules.Faults()
    }

    let apns: HTTP2SimulatorHarness
    let test: TestDaemon
    var fcm: FCMSimulator? = nil
    var webpush: WebPushSimulator? = nil

    var client: HTTPTestClient { test.client }
    var simulator: APNsHTTP2Simulator { apns.simulator }

    /// The config: one app routed to `apns` (sandbox, token auth against the simulator); with
    /// `androidAndWeb` (the FCM simulator's service-account file, the Web Push simulator and a
    /// VAPID key) also `com.example.android` (route `android`, fcm) and `com.example.web` (route
    /// `web`, webpush, push services on 127.0.0.1 only).
    /// - Parameter appRoutes: the routes of `com.example.app` (`["apns", "android"]` makes it the
    ///   shipped config's app with iOS and Android routes).
    static func config(_ apns: HTTP2SimulatorHarness, matrix: String, storage: String = #""path": "herald.db", "synchronous": "normal""#,
                       androidAndWeb: (fcm: FCMSimulator, serviceAccount: String, vapidKey: String)? = nil,
                       appRoutes: String = #"["apns"]"#) -> String {
        let c = apns.certificates
        var apps = #""com.example.app": {"routes": \#(appRoutes)}"#, transports = ""
        if let p = androidAndWeb {
            apps += #", "com.example.android": {"routes": ["android"]}, "com.example.web": {"routes": ["web"]}"#
            transports = """
                ,
                "android": {"type": "fcm", "credentialsFile": "\(p.serviceAccount)", "endpoint": "\(p.fcm.baseURL)", "caFile": "\(c.caFile)", "timeout": "5s"},
                "web": {"type": "webpush", "vapidKey": "\(p.vapidKey)", "subject": "mailto:push@example.com", "allowedEndpoints": ["127.0.0.1"],
                        "caFile": "\(c.caFile)", "maxBackoff": "1s"}
                """
        }
        return """
        {
          "storage": {\(storage)},
          "apps": {\(apps)},
          "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                                  "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"}\(transports)},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]}]},
          "delivery": {"initialBackoff": "100ms", "maxBackoff": "200ms", "maxAttempts": 20, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"},
          "matrix": \(matrix)
        }
        """
    }

    static func start(matrix: String = #"{"apps": {"\#(appID)": {"app": "com.example.app"}}}"#,
                      faults: HTTP2Faults = HTTP2Faults(), platforms: Platforms? = nil, appRoutes: String = #"["apns"]"#) async throws -> MatrixGatewayFixture {
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        var fcm: FCMSimulator? = nil, webpush: WebPushSimulator? = nil
        do {
            let directory = try TemporaryDirectory(prefix: "herald-matrix")
            var registry = TransportRegistry()
            registry.register(APNsHTTP2Transport.self)
            registry.register(section: MatrixConfiguration.self)
            var androidAndWeb: (fcm: FCMSimulator, serviceAccount: String, vapidKey: String)? = nil
            if let platforms {
                let certs = apns.certificates
                var f = FCMSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey))
                f.faults = platforms.fcmFaults
                fcm = try FCMSimulator(configuration: f)
                try fcm!.start()
                var w = WebPushSimulator.Configuration(tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey), seed: "matrix")
                w.faults = platforms.webFaults
                webpush = try WebPushSimulator(configuration: w)
                try webpush!.start()
                try fcm!.writeServiceAccount(to: directory.file("sa.json"), key: TestKeys.rsa)
                androidAndWeb = (fcm!, directory.file("sa.json"), Base64URL.encode(try P256PrivateKey.generate().rawRepresentation))
                registry.register(FCMTransport.self)
                registry.register(WebPushTransport.self)
            }
            let configuration = try DaemonConfiguration.parse(Data(config(apns, matrix: matrix, androidAndWeb: androidAndWeb, appRoutes: appRoutes).utf8),
                                                              baseDirectory: directory.path, registry: registry, environment: [:])
            let logs = RecordingLogHandler()
            let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                                options: Daemon.Options(random: { 0.5 }, environment: [:], probeInterval: 0.2,
                                                        frontEnds: [MatrixGateway.self]))
            let port = try await daemon.start()
            let test = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
            // Stopped by the suite's .stopsDaemons trait on every path, too.
            StopsDaemons.current?.withLock { $0.append(test) }
            return MatrixGatewayFixture(apns: apns, test: test, fcm: fcm, webpush: webpush)
        } catch {
            apns.stop()
            fcm?.stop()
            webpush?.stop()
            throw error
        }
    }

    func stop() async {
        await test.stop()
        apns.stop()
        fcm?.stop()
        webpush?.stop()
    }

    /// A notify body for one device (`data`: the pusher's data, a JSON object).
    static func body(eventID: String? = "$e1", type: String? = "m.room.message", pushkey: String, pushkeyTS: Int64? = nil,
                     appID: String = appID, extra: String = #""content": {"msgtype": "m.text", "body": "hi"}, "counts": {"unread": 1}"#,
                     data: String? = nil) -> String {
        var fields: [String] = []
        if let eventID { fields.append(#""event_id": "\#(eventID)", "room_id": "!room:example.org""#) }
        if let type { fields.append(#""type": "\#(type)", "sender": "@alice:example.org", "sender_display_name": "Alice""#) }
        if !extra.isEmpty { fields.append(extra) }
        let ts = pushkeyTS.map { #", "pushkey_ts": \#($0)"# } ?? ""
        let d = data.map { #", "data": \#($0)"# } ?? ""
        fields.append(#""devices": [{"app_id": "\#(appID)", "pushkey": "\#(pushkey)"\#(ts)\#(d), "tweaks": {"sound": "default"}}]"#)
        return #"{"notification": {\#(fields.joined(separator: ", "))}}"#
    }

    /// Posts a notify; returns the status and the `rejected` list.
    func notify(_ body: String, port: Int? = nil) async throws -> (status: Int, rejected: [String]?, response: HTTPTestClient.Response) {
        let r = try await HTTPTestClient(port: port ?? test.port, key: nil).post(Self.notifyPath, body)
        return (r.status, r.json?["rejected"]?.arrayValue?.compactMap(\.stringValue), r)
    }

    /// The store's record of a pushkey's token (through the devices API).
    func device(token: String, appID: String = appID, app: String = "com.example.app") async throws -> JSONValue? {
        let r = try await client.get("/v1/users/matrix:\(appID)/devices?app=\(app)&include_invalidated=true")
        return r.json?["devices"]?.arrayValue?.first { $0["token"]?.stringValue == token }
    }

    /// Notifications the simulator accepted for `token`.
    func received(_ token: String) -> [ReceivedNotification] { simulator.received.filter { $0.deviceToken == token } }

    /// A web pusher for the Web Push simulator's subscription `index`: its pushkey (the p256dh)
    /// and its data (`endpoint`, `auth`, and `extra` members).
    func webPusher(_ index: Int, extra: String = "") throws -> (pushkey: String, data: String, json: JSONValue) {
        let sub = try JSONValue.parse(webpush!.subscriptionJSON(index))
        let endpoint = sub["endpoint"]!.stringValue!, p256dh = sub["keys"]!["p256dh"]!.stringValue!, auth = sub["keys"]!["auth"]!.stringValue!
        return (p256dh, #"{"endpoint": "\#(endpoint)", "auth": "\#(auth)"\#(extra.isEmpty ? "" : ", " + extra)}"#, sub)
    }

    /// A 32-byte token: hex, and the same bytes in base64 (as Element iOS registers it).
    static func token(_ n: Int) -> (hex: String, base64: String) {
        let hex = TestDaemon.token(n).replacingOccurrences(of: "0000", with: "a1b2")
        return (hex, Data(DeviceToken.bytes(ofHex: hex)).base64EncodedString())
    }
}
