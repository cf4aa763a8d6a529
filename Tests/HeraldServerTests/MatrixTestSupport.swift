import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldMatrix
import HeraldServer
import HeraldSimulator
import HeraldSQLite
import HeraldTestKit

/// A daemon in this process with the real `apns-http2` transport pointed at the in-process APNs
/// simulator, and a `matrix` section: what the Matrix gateway tests drive.
struct MatrixGatewayFixture {
    static let appID = "im.vector.app.ios.prod"
    static let notifyPath = "/_matrix/push/v1/notify"

    let apns: HTTP2SimulatorHarness
    let test: TestDaemon

    var client: HTTPTestClient { test.client }
    var simulator: APNsHTTP2Simulator { apns.simulator }

    /// The config: one app routed to `apns` (sandbox, token auth against the simulator).
    static func config(_ apns: HTTP2SimulatorHarness, matrix: String, storage: String = #""path": "herald.db", "synchronous": "normal""#) -> String {
        let c = apns.certificates
        return """
        {
          "storage": {\(storage)},
          "apps": {"com.example.app": {"routes": ["apns"]}},
          "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(c.caFile)",
                                  "keyFile": "\(c.authKey)", "keyId": "\(c.authKeyID)", "teamId": "\(c.teamID)"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]}]},
          "delivery": {"initialBackoff": "100ms", "maxBackoff": "200ms", "maxAttempts": 20, "jitter": 0},
          "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
          "log": {"level": "debug"},
          "matrix": \(matrix)
        }
        """
    }

    static func start(matrix: String = #"{"apps": {"\#(appID)": {"app": "com.example.app"}}}"#,
                      faults: HTTP2Faults = HTTP2Faults()) async throws -> MatrixGatewayFixture {
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        do {
            let directory = try TemporaryDirectory(prefix: "herald-matrix")
            var registry = TransportRegistry()
            registry.register(APNsHTTP2Transport.self)
            registry.register(section: MatrixConfiguration.self)
            let configuration = try DaemonConfiguration.parse(Data(config(apns, matrix: matrix).utf8), baseDirectory: directory.path,
                                                              registry: registry, environment: [:])
            let logs = RecordingLogHandler()
            let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: logs,
                                options: Daemon.Options(random: { 0.5 }, environment: [:], probeInterval: 0.2,
                                                        frontEnds: [MatrixGateway.self]))
            let port = try await daemon.start()
            let test = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
            // Stopped by the suite's .stopsDaemons trait on every path, too.
            StopsDaemons.current?.withLock { $0.append(test) }
            return MatrixGatewayFixture(apns: apns, test: test)
        } catch {
            apns.stop()
            throw error
        }
    }

    func stop() async {
        await test.stop()
        apns.stop()
    }

    /// A notify body for one device.
    static func body(eventID: String? = "$e1", type: String? = "m.room.message", pushkey: String, pushkeyTS: Int64? = nil,
                     appID: String = appID, extra: String = #""content": {"msgtype": "m.text", "body": "hi"}, "counts": {"unread": 1}"#) -> String {
        var fields: [String] = []
        if let eventID { fields.append(#""event_id": "\#(eventID)", "room_id": "!room:example.org""#) }
        if let type { fields.append(#""type": "\#(type)", "sender": "@alice:example.org", "sender_display_name": "Alice""#) }
        if !extra.isEmpty { fields.append(extra) }
        let ts = pushkeyTS.map { #", "pushkey_ts": \#($0)"# } ?? ""
        fields.append(#""devices": [{"app_id": "\#(appID)", "pushkey": "\#(pushkey)"\#(ts), "tweaks": {"sound": "default"}}]"#)
        return #"{"notification": {\#(fields.joined(separator: ", "))}}"#
    }

    /// Posts a notify; returns the status and the `rejected` list.
    func notify(_ body: String, port: Int? = nil) async throws -> (status: Int, rejected: [String]?, response: HTTPTestClient.Response) {
        let r = try await HTTPTestClient(port: port ?? test.port, key: nil).post(Self.notifyPath, body)
        return (r.status, r.json?["rejected"]?.arrayValue?.compactMap(\.stringValue), r)
    }

    /// The store's record of a pushkey's token (through the devices API).
    func device(token: String, appID: String = appID) async throws -> JSONValue? {
        let r = try await client.get("/v1/users/matrix:\(appID)/devices?app=com.example.app&include_invalidated=true")
        return r.json?["devices"]?.arrayValue?.first { $0["token"]?.stringValue == token }
    }

    /// Notifications the simulator accepted for `token`.
    func received(_ token: String) -> [ReceivedNotification] { simulator.received.filter { $0.deviceToken == token } }

    /// A 32-byte token: hex, and the same bytes in base64 (as Element iOS registers it).
    static func token(_ n: Int) -> (hex: String, base64: String) {
        let hex = TestDaemon.token(n).replacingOccurrences(of: "0000", with: "a1b2")
        return (hex, Data(DeviceToken.bytes(ofHex: hex)).base64EncodedString())
    }
}
