import Foundation
import HeraldCore
import HeraldMatrix
import HeraldSimulator
import HeraldTestKit
import Testing

/// A real homeserver: Synapse from PyPI (`scripts/synapse-venv.sh`, run by `make test`'s
/// bootstrap) on loopback, two users, four pushers pointed at Herald's gateway (two iOS ones: one
/// in full format with a base64 pushkey, one `event_id_only` with a hex pushkey and a default
/// payload; an Android one with an FCM registration token; a web one with a Web Push simulator
/// subscription), an invitation and messages; the APNs, FCM and Web Push simulators receive
/// what Sygnal would have sent (the web one decrypted).
///
/// The gateway's `matrix.apps` are the shipped config.json's: the iOS app id mapped without a
/// platform and the Android one with `platform: android`, both to `com.example.app`, which routes
/// through APNs and FCM (each pushkey takes the route that takes it), and the web one to
/// `com.example.web`.
@Suite(.serialized, .stopsDaemons) struct MatrixSynapseTests {
    static let appID = "im.vector.app.ios.prod"

    @Test(.timeLimit(.minutes(4))) func synapsePushesThroughHerald() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-synapse")
        defer { dir.remove() }
        typealias F = MatrixGatewayFixture
        let shipped = try JSONValue.parse(try String(contentsOfFile: PackagePaths.root + "/config.json", encoding: .utf8))
        let apps = try #require(shipped["matrix"]?["apps"])
        #expect(apps["im.vector.app.android"]?["app"]?.stringValue == "com.example.app" && apps[Self.appID]?["platform"] == nil)
        let gateway = try await F.start(matrix: #"{"apps": \#(apps.jsonString)}"#, platforms: F.Platforms(), appRoutes: #"["apns", "android"]"#)
        var synapse: SynapseProcess? = nil
        do {
            synapse = try await SynapseProcess.start(in: dir)
            let hs = synapse!.client
            let alice = try await hs.register("alice")
            let bob = try await hs.register("bob")

            let full = MatrixGatewayFixture.token(21), idOnly = MatrixGatewayFixture.token(22)
            let url = "http://127.0.0.1:\(gateway.test.port)/_matrix/push/v1/notify"
            for (pushkey, data) in [(full.base64, #"{"url": "\#(url)"}"#),
                                    (idOnly.hex, #"{"url": "\#(url)", "format": "event_id_only", "default_payload": {"aps": {"mutable-content": 1}}}"#)] {
                let r = try await hs.call("POST", "/_matrix/client/v3/pushers/set", token: alice.token, #"""
                    {"kind": "http", "app_id": "\#(Self.appID)", "pushkey": "\#(pushkey)", "app_display_name": "Herald test",
                     "device_display_name": "iPhone", "lang": "en", "data": \#(data)}
                    """#)
                #expect(r.status == 200, "pushers/set: \(r)")
            }
            let android = FCMDaemonTests.androidToken(7)
            let web = try gateway.webPusher(0, extra: #""url": "\#(url)", "events_only": true"#)
            for (appID, pushkey, data) in [(F.androidAppID, android, #"{"url": "\#(url)"}"#), (F.webAppID, web.pushkey, web.data)] {
                let r = try await hs.call("POST", "/_matrix/client/v3/pushers/set", token: alice.token, #"""
                    {"kind": "http", "app_id": "\#(appID)", "pushkey": "\#(pushkey)", "app_display_name": "Herald test",
                     "device_display_name": "\#(appID)", "lang": "en", "data": \#(data)}
                    """#)
                #expect(r.status == 200, "pushers/set \(appID): \(r)")
            }

            let room = try await hs.call("POST", "/_matrix/client/v3/createRoom", token: bob.token,
                                         #"{"preset": "private_chat", "is_direct": true, "invite": ["\#(alice.userID)"]}"#)
            let roomID = try #require(room.json?["room_id"]?.stringValue, "createRoom: \(room)")
            let escaped = roomID.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            #expect(try await hs.call("POST", "/_matrix/client/v3/join/\(escaped)", token: alice.token, "{}").status == 200)
            var messages: [String] = []
            for i in 1...2 {
                let r = try await hs.call("PUT", "/_matrix/client/v3/rooms/\(escaped)/send/m.room.message/t\(i)", token: bob.token,
                                          #"{"msgtype": "m.text", "body": "hello \#(i)"}"#)
                messages.append(try #require(r.json?["event_id"]?.stringValue, "send: \(r)"))
            }

            // The invitation and both messages, to each pusher.
            let arrived = await gateway.simulator.waitForNotifications(count: 6, timeout: 60) ?? gateway.simulator.received
            #expect(arrived.count >= 6, "APNs received \(arrived.map(\.payloadString)); synapse log: \(synapse!.logTail)")
            let toFull = arrived.filter { $0.deviceToken == full.hex }.compactMap(\.payloadJSON)
            let toIDOnly = arrived.filter { $0.deviceToken == idOnly.hex }.compactMap(\.payloadJSON)

            #expect(toFull.contains { $0["aps"]?["alert"]?["loc-key"]?.stringValue?.hasPrefix("USER_INVITE_TO_") == true })
            for (i, eventID) in messages.enumerated() {
                let push = try #require(toFull.first { $0["event_id"]?.stringValue == eventID }, "no full push for message \(i + 1)")
                let alert = push["aps"]?["alert"]
                #expect(alert?["loc-key"]?.stringValue?.hasPrefix("MSG_FROM_USER") == true)
                #expect(alert?["loc-args"]?.arrayValue?.contains(.string("hello \(i + 1)")) == true)
                #expect(alert?["loc-args"]?.arrayValue?.first?.stringValue == "bob")
                #expect(push["room_id"]?.stringValue == roomID)
                #expect(push["aps"]?["sound"]?.stringValue == "default")   // the one-to-one rule's sound tweak
                #expect((push["aps"]?["badge"]?.intValue ?? 0) >= 1)

                let idPush = try #require(toIDOnly.first { $0["event_id"]?.stringValue == eventID }, "no event_id_only push for message \(i + 1)")
                #expect(idPush["room_id"]?.stringValue == roomID)
                #expect(idPush["aps"]?.jsonString == #"{"mutable-content":1}"#)
                #expect(idPush["unread_count"]?.intValue != nil)
                #expect(!idPush.jsonString.contains("hello"), "event_id_only sends no content")
            }

            // Android: Sygnal's gcm v1 data message, to the FCM simulator.
            let fcm = try #require(gateway.fcm), webpush = try #require(gateway.webpush)
            let fcmArrived = await fcm.waitForMessages(count: 3, timeout: 60) ?? fcm.received
            #expect(fcmArrived.count >= 3 && fcmArrived.allSatisfy { $0.token == android }, "FCM received \(fcmArrived.map(\.data))")
            #expect(fcmArrived.contains { $0.data["type"] == "m.room.member" && $0.data["membership"] == "invite" }, "\(fcmArrived.map(\.data))")
            for (i, eventID) in messages.enumerated() {
                let m = try #require(fcmArrived.first { $0.data["event_id"] == eventID }, "no FCM message for message \(i + 1)")
                #expect(m.data["type"] == "m.room.message" && m.data["room_id"] == roomID && m.data["sender"] == bob.userID)
                #expect(m.data["content_body"] == "hello \(i + 1)" && m.data["content_msgtype"] == "m.text")
                #expect(m.data["prio"] == "high" && m.data["unread"].flatMap { Int($0) } != nil)
                #expect(m.message["android"]?["priority"]?.stringValue == "high" && m.message["notification"] == nil)
            }

            // The web: Sygnal's webpush payload, decrypted by the Web Push simulator.
            #expect(await eventually(timeout: 60) { webpush.rules.received.count >= 3 }, "\(webpush.summary)")
            let webArrived = webpush.rules.received.compactMap(\.json)
            #expect(webArrived.contains { $0["type"] == "m.room.member" && $0["membership"] == "invite" }, "\(webArrived)")
            for (i, eventID) in messages.enumerated() {
                let m = try #require(webArrived.first { $0["event_id"]?.stringValue == eventID }, "no web push for message \(i + 1): \(webArrived)")
                #expect(m["type"] == "m.room.message" && m["room_id"]?.stringValue == roomID && m["sender"]?.stringValue == bob.userID)
                #expect(m["content"]?["body"]?.stringValue == "hello \(i + 1)")
                #expect(m["unread"]?.intValue != nil)
            }
            #expect(webpush.rules.received.allSatisfy { $0.subscription == 0 && $0.urgency == "normal" })

            let metrics = try await gateway.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_payloads_total{app_id="\#(Self.appID)",mode="event_id_only"}"#))
        } catch {
            Issue.record(error, "synapse log: \(synapse?.logTail ?? "-")")
        }
        await synapse?.stop()
        await gateway.stop()
    }
}

/// Synapse in a child process on 127.0.0.1, with a throwaway config and SQLite database.
///
/// It runs under a small shell that stops it on SIGTERM, and also as soon as the test process is
/// gone for any reason (even SIGKILL), so no homeserver outlives the test run.
final class SynapseProcess: Sendable {
    let client: MatrixClient
    private let process: SpawnedProcess
    private let directory: String

    static var venvPython: String { "\(PackagePaths.root)/var/synapse/venv/bin/python" }

    private init(process: SpawnedProcess, directory: String, port: Int) {
        self.process = process
        self.directory = directory
        client = MatrixClient(port: port)
    }

    /// Writes a config, starts Synapse and waits for `/health`.
    static func start(in dir: TemporaryDirectory) async throws -> SynapseProcess {
        if !FileManager.default.isExecutableFile(atPath: venvPython) {
            // `make test` installs it through the bootstrap; a bare `swift test` installs it here.
            let r = try await Run.program("/bin/bash", ["\(PackagePaths.root)/scripts/synapse-venv.sh"])
            guard r.status == 0 else { throw HTTPTestClient.Failure(description: "scripts/synapse-venv.sh failed: \(r.stderr)") }
        }
        let port = try freePort()
        let d = dir.path
        var seed = [UInt8](repeating: 0, count: 32)
        for i in seed.indices { seed[i] = UInt8.random(in: 0...255) }
        _ = try dir.write("signing.key", "ed25519 a_test \(Data(seed).base64EncodedString().replacingOccurrences(of: "=", with: ""))\n")
        _ = try dir.write("log.yaml", """
            version: 1
            formatters: {precise: {format: '%(asctime)s %(name)s %(levelname)s %(message)s'}}
            handlers: {file: {class: logging.FileHandler, filename: \(d)/homeserver.log, formatter: precise}}
            root: {level: INFO, handlers: [file]}
            disable_existing_loggers: false
            """)
        let limits = "{per_second: 1000, burst_count: 1000}"
        let config = try dir.write("homeserver.yaml", """
            server_name: localhost
            listeners:
              - {port: \(port), bind_addresses: ['127.0.0.1'], type: http, tls: false, resources: [{names: [client], compress: false}]}
            database: {name: sqlite3, args: {database: \(d)/homeserver.db}}
            log_config: \(d)/log.yaml
            media_store_path: \(d)/media
            signing_key_path: \(d)/signing.key
            report_stats: false
            trusted_key_servers: []
            suppress_key_server_warning: true
            enable_registration: true
            enable_registration_without_verification: true
            macaroon_secret_key: test-macaroon-secret-0123456789
            form_secret: test-form-secret-0123456789
            # Herald's gateway listens on loopback, which Synapse refuses to push to unless allowed.
            ip_range_whitelist: ['127.0.0.1/32']
            rc_message: \(limits)
            rc_registration: \(limits)
            rc_joins: {local: \(limits), remote: \(limits)}
            rc_invites: {per_room: \(limits), per_user: \(limits), per_issuer: \(limits)}
            rc_login: {address: \(limits), account: \(limits), failed_attempts: \(limits)}
            """)
        // The shell stops Synapse on SIGTERM, and by itself when the test process is gone (even after SIGKILL).
        // With SIGKILL: its database is thrown away anyway.
        let wrapper = """
            "$0" -m synapse.app.homeserver --config-path "$1" >"$2/stdout.log" 2>&1 </dev/null &
            pid=$!
            echo $pid >"$2/synapse.pid"
            stop() { kill -9 $pid 2>/dev/null; wait $pid; exit 0; }
            trap stop TERM INT
            while kill -0 $PPID 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.5; done
            stop
            """
        let process = try SpawnedProcess("/bin/sh", ["-c", wrapper, venvPython, config, d], directory: d)
        let synapse = SynapseProcess(process: process, directory: d, port: port)
        let up = await eventually(timeout: 120) {
            guard process.isRunning else { return true }
            return (try? await synapse.client.call("GET", "/health").status) == 200
        }
        guard up, process.isRunning, (try? await synapse.client.call("GET", "/health").status) == 200 else {
            let tail = synapse.logTail
            await synapse.stop()
            throw HTTPTestClient.Failure(description: "Synapse did not start on 127.0.0.1:\(port): \(tail)")
        }
        return synapse
    }

    /// Stops Synapse: SIGTERM to the shell (which kills Synapse and waits for it); after 30 s,
    /// SIGKILL to both.
    func stop() async {
        process.signal(SIGTERM)
        let end = Date().addingTimeInterval(30)
        while process.isRunning && Date() < end { try? await Task.sleep(nanoseconds: 50_000_000) }
        if let text = try? String(contentsOfFile: "\(directory)/synapse.pid", encoding: .utf8),
           let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), kill(pid, 0) == 0 {
            kill(pid, SIGKILL)
        }
        process.signal(SIGKILL)
    }

    /// The last lines of Synapse's log and output, for failure messages.
    var logTail: String {
        let log = (try? String(contentsOfFile: "\(directory)/homeserver.log", encoding: .utf8)) ?? ""
        let out = (try? String(contentsOfFile: "\(directory)/stdout.log", encoding: .utf8)) ?? ""
        return (log.split(separator: "\n").suffix(15) + out.split(separator: "\n").suffix(15)).joined(separator: "\n")
    }

    private static func freePort() throws -> Int { try Loopback.freePort() }
}

/// The few Client-Server API calls the test makes.
struct MatrixClient: Sendable {
    let port: Int

    struct User { var userID: String; var token: String }

    func call(_ method: String, _ path: String, token: String? = nil, _ body: String? = nil) async throws -> HTTPTestClient.Response {
        try await HTTPTestClient(port: port, key: token).request(method, path, body: Array((body ?? "").utf8),
                                                               contentType: body == nil ? nil : "application/json")
    }

    /// Registers a user with the dummy auth flow.
    func register(_ name: String) async throws -> User {
        let r = try await call("POST", "/_matrix/client/v3/register",
                               #"{"username": "\#(name)", "password": "password-\#(name)-0123456789", "auth": {"type": "m.login.dummy"}}"#)
        guard let id = r.json?["user_id"]?.stringValue, let token = r.json?["access_token"]?.stringValue else {
            throw HTTPTestClient.Failure(description: "register \(name): \(r)")
        }
        return User(userID: id, token: token)
    }
}
