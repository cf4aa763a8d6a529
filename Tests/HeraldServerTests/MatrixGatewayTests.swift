import Foundation
import HeraldAPNs
import HeraldCore
import HeraldMatrix
import HeraldServer
import HeraldSimulator
import HeraldTestKit
import Testing

/// `POST /_matrix/push/v1/notify` end to end: the daemon in this process, the real
/// `apns-http2` transport, and the APNs HTTP/2 simulator receiving what it sends.
@Suite(.serialized, .stopsDaemons) struct MatrixGatewayTests {
    typealias F = MatrixGatewayFixture

    /// A payload without its `herald_id` (the notification id, made at accept), and that id.
    static func withoutHeraldID(_ payload: String) -> (payload: String, id: String?) {
        guard let m = payload.firstMatch(of: /,"herald_id":"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"/) else { return (payload, nil) }
        return (payload.replacingCharacters(in: m.range, with: ""), String(m.1))
    }

    @Test(.timeLimit(.minutes(1))) func specExampleIsDeliveredAsSygnalSendsIt() async throws {
        let f = try await F.start(matrix: #"{"apps": {"org.matrix.matrixConsole.ios": {"app": "com.example.app"}}}"#)
        do {
            let r = try await f.notify(MatrixPayloadFixtures.specExample)
            #expect(r.status == 200)
            #expect(r.response.text == "{\"rejected\":[]}\n")
            let arrived = try #require(await f.simulator.waitForNotifications(count: 1))
            let n = arrived[0]
            #expect(n.deviceToken == DeviceToken.hex(Array("Why on earth did you decode this?".utf8)))
            #expect(n.topic == "com.example.app" && n.pushType == .alert && n.priority == 10)
            // As Sygnal sends it, plus the notification id beside aps (Herald's herald_id).
            let (payload, id) = Self.withoutHeraldID(n.payloadString)
            #expect(payload == #"{"aps":{"alert":{"loc-key":"MSG_FROM_USER_IN_ROOM_WITH_CONTENT","loc-args":["Major Tom","Mission Control","I'm floating in a most peculiar way."]},"badge":3,"sound":"bing"},"event_id":"$3957tyerfgewrf384","room_id":"!slw48wfj34rtnrf:example.com"}"#)
            #expect(id != nil, "\(n.payloadString)")
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="org.matrix.matrixConsole.ios",outcome="accepted"} 1"#))
            #expect(metrics.contains(#"herald_matrix_payloads_total{app_id="org.matrix.matrixConsole.ios",mode="full"} 1"#))
        } catch { Issue.record(error) }
        await f.stop()
    }

    /// Each branch of the mapping, sent through the gateway: APNs receives exactly what
    /// ``MatrixPayload`` makes (its unit tests pin the JSON), with the right priority.
    @Test(.timeLimit(.minutes(1))) func everyPayloadBranchReachesAPNs() async throws {
        let f = try await F.start(matrix: #"""
            {"apps": {"\#(F.appID)": {"app": "com.example.app", "defaultPayload": {"aps": {"mutable-content": 1}, "origin": "herald"}}}}
            """#)
        do {
            let cases: [(extra: String, type: String?, eventID: String?, data: String)] = [
                (#""room_name": "Ops", "content": {"msgtype": "m.text", "body": "hi"}, "counts": {"unread": 1}"#, "m.room.message", "$1", ""),
                (#""room_name": "Ops", "content": {"msgtype": "m.image", "body": "cat.jpg"}"#, "m.room.message", "$2", ""),
                (##""room_alias": "#ops:x", "content": {"msgtype": "m.emote", "body": "waves"}"##, "m.room.message", "$3", ""),
                (#""content": {"msgtype": "m.text", "body": "dm"}, "prio": "low""#, "m.room.message", "$4", ""),
                (#""counts": {"unread": 2}"#, "m.room.encrypted", "$5", ""),
                (#""content": {"offer": {"sdp": "m=video 9"}}"#, "m.call.invite", "$6", ""),
                (#""content": {"offer": {"sdp": "m=audio 9"}}, "counts": {"missed_calls": 1}"#, "m.call.invite", "$7", ""),
                (#""room_name": "Ops", "user_is_target": true, "membership": "invite""#, "m.room.member", "$8", ""),
                (#""user_is_target": true, "membership": "invite""#, "m.room.member", "$9", ""),
                (#""counts": {"unread": 5, "missed_calls": 2}"#, nil, nil, ""),
                (#""counts": {"unread": 3}"#, nil, "$11", #""format": "event_id_only", "default_payload": {"aps": {"alert": {"loc-key": "Notification", "loc-args": []}}}"#),
                (#""content": {"msgtype": "m.text", "body": "x"}"#, "m.sticker", "$12", #""default_payload": {"aps": {"category": "MSG"}}"#),
                (#""content": {"msgtype": "m.image", "body": "dog.png"}"#, "m.room.message", "$13", ""),
                (#""content": {"msgtype": "m.emote", "body": "nods"}"#, "m.room.message", "$14", ""),
                (#""room_name": "Ops", "counts": {"unread": 4}"#, "m.room.message", "$15", ""),
                (##""room_alias": "#ops:x", "user_is_target": true, "membership": "invite""##, "m.room.member", "$16", ""),
                (#""user_is_target": false, "membership": "join", "counts": {"unread": 6}"#, "m.room.member", "$17", ""),
                (#""room_name": "Ops", "content": {"msgtype": "m.text", "body": "\#(String(repeating: "long \\\"text\\\" ", count: 600))"}"#,
                 "m.room.message", "$18", ""),
            ]
            var expected: [String: (payload: String, priority: Int)] = [:]
            for (i, c) in cases.enumerated() {
                let token = F.token(i + 1)
                var fields: [String] = [c.extra]
                if let e = c.eventID { fields.append(#""event_id": "\#(e)", "room_id": "!r:x""#) }
                if let t = c.type { fields.append(#""type": "\#(t)", "sender": "@bob:x", "sender_display_name": "Bob""#) }
                fields.append(#""devices": [{"app_id": "\#(F.appID)", "pushkey": "\#(token.base64)", "pushkey_ts": 1700000000, "data": {\#(c.data)}, "tweaks": {"sound": "ping"}}]"#)
                let body = #"{"notification": {\#(fields.joined(separator: ", "))}}"#
                let r = try await f.notify(body)
                #expect(r.status == 200 && r.rejected == [], "case \(i): \(r.response)")
                let n = try MatrixPayloadFixtures.parse(body)
                guard case .send(let content, _, _) = MatrixPayload.map(n, device: n.devices[0], defaultPayload: ["aps": ["mutable-content": 1], "origin": "herald"]) else {
                    Issue.record("case \(i) maps to nothing")
                    continue
                }
                expected[token.hex] = (String(decoding: APNsPayload.encode(content), as: UTF8.self), content.apnsPriority)
            }
            let arrived = try #require(await f.simulator.waitForNotifications(count: cases.count))
            #expect(arrived.count == cases.count)
            for n in arrived {
                let e = try #require(expected[n.deviceToken])
                let (payload, id) = Self.withoutHeraldID(n.payloadString)
                #expect(payload == e.payload)
                #expect(id != nil, "\(n.payloadString)")
                #expect(n.priority == e.priority)
            }
            // Spot checks of what the branches mean on the wire.
            let byCase = { (i: Int) in
                arrived.first { $0.deviceToken == F.token(i).hex }.flatMap { try? JSONValue.parse(Data(Self.withoutHeraldID($0.payloadString).payload.utf8)) }
            }
            #expect(byCase(2)?["aps"]?["alert"]?["loc-key"]?.stringValue == "IMAGE_FROM_USER_IN_ROOM")
            #expect(byCase(4).flatMap { _ in arrived.first { $0.deviceToken == F.token(4).hex }?.priority } == 5)
            #expect(byCase(6)?["aps"]?["alert"]?["loc-key"]?.stringValue == "VIDEO_CALL_FROM_USER")
            #expect(byCase(10)?.jsonString == #"{"aps":{"badge":7}}"#)
            #expect(byCase(11)?.jsonString == #"{"aps":{"alert":{"loc-args":[],"loc-key":"Notification"},"mutable-content":1},"event_id":"$11","origin":"herald","room_id":"!r:x","unread_count":3}"#)
            #expect(byCase(12)?["aps"]?["category"]?.stringValue == "MSG" && byCase(12)?["aps"]?["sound"]?.stringValue == "ping")
            #expect(byCase(13)?["aps"]?["alert"]?["loc-key"]?.stringValue == "IMAGE_FROM_USER")
            #expect(byCase(14)?["aps"]?["alert"]?["loc-key"]?.stringValue == "ACTION_FROM_USER")
            #expect(byCase(15)?["aps"]?["alert"]?["loc-key"]?.stringValue == "MSG_FROM_USER_IN_ROOM")
            #expect(byCase(16)?["aps"]?["alert"]?["loc-args"]?.jsonString == ##"["Bob","#ops:x"]"##)
            #expect(byCase(17)?["aps"]?.jsonString == #"{"badge":6,"mutable-content":1}"#)   // no alert: the badge (and the default payload)
            let long = try #require(arrived.first { $0.deviceToken == F.token(18).hex })
            #expect(long.payload.count <= 4096 && long.payload.count > 4000, "shortened to Apple's limit: \(long.payload.count) bytes")
        } catch { Issue.record(error) }
        await f.stop()
    }

    @Test(.timeLimit(.minutes(1))) func base64AndHexPushkeysAreSentAsHex() async throws {
        let f = try await F.start()
        do {
            let t = F.token(7)
            #expect(try await f.notify(F.body(eventID: "$a", pushkey: t.base64)).rejected == [])
            #expect(try await f.notify(F.body(eventID: "$b", pushkey: t.hex.uppercased())).rejected == [])
            let arrived = try #require(await f.simulator.waitForNotifications(count: 2))
            #expect(arrived.map(\.deviceToken) == [t.hex, t.hex])
            // One device in the store, in hex, for the Matrix app id's user.
            let device = try #require(try await f.device(token: t.hex))
            #expect(device["user"]?.stringValue == "matrix:\(F.appID)")
            // A pushkey that is no token at all is rejected at once; nothing is sent.
            #expect(try await f.notify(F.body(eventID: "$c", pushkey: "not*a*token")).rejected == ["not*a*token"])
            // So is one of an app id the config does not map (as the spec says).
            #expect(try await f.notify(F.body(eventID: "$d", pushkey: t.base64, appID: "org.unknown.app")).rejected == [t.base64])
            #expect(f.simulator.counters.requests == 2)
        } catch { Issue.record(error) }
        await f.stop()
    }

    /// APNs says 410 Unregistered on the first send; the next notify for that pushkey lists it
    /// in `rejected` and sends nothing. A pusher registered again after Apple's timestamp is not rejected.
    @Test(.timeLimit(.minutes(1))) func deadTokenIsRejectedUnlessThePusherIsNewer() async throws {
        let dead = F.token(1), bad = F.token(2)
        let appleSaysDeadAt = Date(timeIntervalSince1970: 1_750_000_000)
        var faults = HTTP2Faults()
        faults.unregistered = [dead.hex: appleSaysDeadAt]
        faults.badDeviceTokens = [bad.hex]
        let f = try await F.start(faults: faults)
        do {
            let oldPusher: Int64 = 1_700_000_000
            #expect(try await f.notify(F.body(eventID: "$1", pushkey: dead.base64, pushkeyTS: oldPusher)).rejected == [])
            #expect(try await f.notify(F.body(eventID: "$1", pushkey: bad.base64, pushkeyTS: oldPusher)).rejected == [])
            // Wait until the store knows both are dead.
            let known = try await eventually(timeout: 20) {
                let a = try await f.device(token: dead.hex)?["invalidated_at"]?.stringValue
                let b = try await f.device(token: bad.hex)?["invalidated_at"]?.stringValue
                return a != nil && b != nil
            }
            #expect(known)
            #expect(try await f.device(token: dead.hex)?["invalidation_reason"]?.stringValue?.contains("Unregistered") == true)
            let requests = f.simulator.counters.requests
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: dead.base64, pushkeyTS: oldPusher)).rejected == [dead.base64])
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: bad.base64, pushkeyTS: oldPusher)).rejected == [bad.base64])
            #expect(f.simulator.counters.requests == requests, "a rejected pushkey is not sent")

            // The user reinstalled: the pusher's pushkey_ts is after Apple's timestamp.
            let newPusher = Int64(appleSaysDeadAt.timeIntervalSince1970) + 60
            f.simulator.setFaults(HTTP2Faults())
            #expect(try await f.notify(F.body(eventID: "$3", pushkey: dead.base64, pushkeyTS: newPusher)).rejected == [])
            let arrived = try #require(await f.simulator.waitForNotifications(count: 1))
            #expect(arrived[0].deviceToken == dead.hex)
            #expect(try await f.device(token: dead.hex)?["invalidated_at"] == .null)
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(F.appID)",outcome="rejected_dead"} 2"#))
        } catch { Issue.record(error) }
        await f.stop()
    }

    /// 500, 503 and 429 from APNs, and a device APNs throttles for a while, are retried by
    /// Herald and never reject the pushkey.
    @Test(.timeLimit(.minutes(1))) func temporaryFailuresNeverReject() async throws {
        let t = F.token(3), throttled = F.token(4)
        var faults = HTTP2Faults()
        faults.internalServerErrors = 1
        faults.serviceUnavailable = 1
        faults.throttledRequests = 1
        faults.tooManyRequests = [throttled.hex]
        let f = try await F.start(faults: faults)
        do {
            #expect(try await f.notify(F.body(eventID: "$1", pushkey: t.base64, pushkeyTS: 1)).rejected == [])
            #expect(try await f.notify(F.body(eventID: "$1", pushkey: throttled.base64, pushkeyTS: 1)).rejected == [])
            // Every failure has happened (three counters and at least one per-device 429) before the next notify.
            let failed = await eventually(timeout: 20) {
                let r = f.simulator.counters.rejected
                return r["InternalServerError"] == 1 && r["ServiceUnavailable"] == 1 && (r["TooManyRequests"] ?? 0) >= 2
            }
            #expect(failed, "\(f.simulator.counters.rejected)")
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: t.base64, pushkeyTS: 1)).rejected == [])
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: throttled.base64, pushkeyTS: 1)).rejected == [])
            let arrived = try #require(await f.simulator.waitForNotifications(count: 2))
            #expect(arrived.allSatisfy { $0.deviceToken == t.hex })
            #expect(try await f.device(token: throttled.hex)?["invalidated_at"] == .null)
            #expect(try await f.device(token: t.hex)?["invalidated_at"] == .null)
        } catch { Issue.record(error) }
        await f.stop()
    }

    /// A homeserver's retries of one event to one pushkey are sent once; the same event to
    /// another pushkey, and another event to the same pushkey, are sent.
    @Test(.timeLimit(.minutes(1))) func duplicateEventIDsAreSentOnce() async throws {
        let f = try await F.start()
        do {
            let a = F.token(5), b = F.token(6)
            let body = F.body(eventID: "$same", pushkey: a.base64)
            let results = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 { group.addTask { try await f.notify(body).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(results == [200, 200, 200, 200])
            #expect(try await f.notify(body).rejected == [])                         // a later retry too
            #expect(try await f.notify(F.body(eventID: "$same", pushkey: b.hex)).rejected == [])
            #expect(try await f.notify(F.body(eventID: "$other", pushkey: a.base64)).rejected == [])
            _ = try #require(await f.simulator.waitForNotifications(count: 3))
            // Every queued delivery is final, so a duplicate would have been sent by now.
            let idle = try await eventually(timeout: 20) {
                let m = try await f.client.get("/metrics").text
                return m.contains(#"herald_queue_depth{transport="apns"} 0"#) && m.contains(#"herald_deliveries_in_flight{transport="apns"} 0"#)
            }
            #expect(idle)
            #expect(f.received(a.hex).count == 2 && f.received(b.hex).count == 1)
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(F.appID)",outcome="duplicate"} 4"#))
        } catch { Issue.record(error) }
        await f.stop()
    }

    @Test(.timeLimit(.minutes(1))) func errorsHaveTheMatrixShape() async throws {
        let f = try await F.start(matrix: #"{"maxBodyBytes": 4096, "apps": {"\#(F.appID)": {"app": "com.example.app"}}}"#)
        do {
            let c = HTTPTestClient(port: f.test.port)
            func check(_ r: HTTPTestClient.Response, _ status: Int, _ code: String) {
                #expect(r.status == status && r.json?["errcode"]?.stringValue == code && r.json?["error"]?.stringValue?.isEmpty == false, "\(r)")
            }
            check(try await c.get(F.notifyPath), 405, "M_UNRECOGNIZED")
            #expect(try await c.get(F.notifyPath).headers["allow"] == "POST")
            check(try await c.post("/_matrix/push/v1/other", "{}"), 404, "M_UNRECOGNIZED")
            check(try await c.post("/_matrix/client/v3/login", "{}"), 404, "M_UNRECOGNIZED")
            check(try await c.post(F.notifyPath, "{not json"), 400, "M_NOT_JSON")
            let missing = try await c.post(F.notifyPath, #"{"notification": {"event_id": "$x"}}"#)
            check(missing, 400, "M_BAD_JSON")
            #expect(missing.json?["error"]?.stringValue == "notification.devices: is required")
            check(try await c.post(F.notifyPath, #"{"notification": {"devices": [{"app_id": "x", "pushkey": 5}]}}"#), 400, "M_BAD_JSON")
            check(try await c.post(F.notifyPath, String(repeating: " ", count: 5000) + "{}"), 413, "M_TOO_LARGE")
            // The homeserver does not authenticate; the rest of the API still does.
            #expect(try await c.post("/v1/notifications", "{}").status == 401)
            #expect(f.simulator.counters.requests == 0)
        } catch { Issue.record(error) }
        await f.stop()
    }

    @Test(.timeLimit(.minutes(1))) func ownListenerServesOnlyTheGateway() async throws {
        let f = try await F.start(matrix: #"{"listen": "127.0.0.1:0", "apps": {"\#(F.appID)": {"app": "com.example.app"}}}"#)
        do {
            let port = try #require(f.test.daemon.matrixPort)
            #expect(port != f.test.port)
            let t = F.token(8)
            #expect(try await f.notify(F.body(pushkey: t.base64), port: port).rejected == [])
            _ = try #require(await f.simulator.waitForNotifications(count: 1))
            let onAPI = try await f.notify(F.body(eventID: "$2", pushkey: t.base64))
            #expect(onAPI.status == 404 && onAPI.response.json?["errcode"]?.stringValue == "M_UNRECOGNIZED")
            let other = try await HTTPTestClient(port: port, key: TestDaemon.key).get("/metrics")
            #expect(other.status == 404 && other.json?["errcode"]?.stringValue == "M_UNRECOGNIZED")
        } catch { Issue.record(error) }
        await f.stop()
    }
}

/// The gateway without a `matrix` section, and its rate limit (with a frozen clock).
@Suite(.stopsDaemons) struct MatrixGatewayLimitsTests {
    @Test func offWithoutAMatrixSection() async throws {
        let d = try await TestDaemon.start()
        do {
            let r = try await HTTPTestClient(port: d.port).post(MatrixGatewayFixture.notifyPath, MatrixGatewayFixture.body(pushkey: "00ff00ff00ff00ff"))
            #expect(r.status == 404 && r.json?["errcode"]?.stringValue == "M_UNRECOGNIZED")
        } catch { Issue.record(error) }
        await d.stop()
    }

    /// The one 5xx: Herald could not store the push (here a full queue), so only the homeserver can retry.
    @Test func aFullQueueIs503WithRetryAfterAndNothingStored() async throws {
        let gate = GatedTransport(name: "t")
        let matrix = #", "matrix": {"apps": {"x": {"app": "com.example.app"}}}"#
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(server: #""maxQueuedPerTransport": 1"#, extra: matrix),
                                           transports: { _ in gate })
        do {
            let c = HTTPTestClient(port: d.port)
            func body(_ e: String) -> String { MatrixGatewayFixture.body(eventID: e, pushkey: TestDaemon.token(1), appID: "x") }
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, body("$1")).status == 200)
            let full = try await c.post(MatrixGatewayFixture.notifyPath, body("$2"))
            #expect(full.status == 503 && full.json?["errcode"]?.stringValue == "M_UNKNOWN" && full.headers["retry-after"] == "1", "\(full)")
            gate.open()
            #expect(await eventually(timeout: 10) { gate.deliveries.count == 1 })
            // Retried by the homeserver once there is room: accepted and sent.
            let retried = await eventually(timeout: 10) { (try? await c.post(MatrixGatewayFixture.notifyPath, body("$2")).status) == 200 }
            #expect(retried)
            #expect(await eventually(timeout: 10) { gate.deliveries.count == 2 })
        } catch { Issue.record(error) }
        await d.stop()
    }

    @Test func moreThanTheRatePerSecondGet429() async throws {
        let clock = TestClock()
        let matrix = #", "matrix": {"maxRequestsPerSecond": 2, "apps": {"x": {"app": "com.example.app"}}}"#
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(extra: matrix), clock: clock)
        do {
            let c = HTTPTestClient(port: d.port)
            let body = MatrixGatewayFixture.body(type: nil, pushkey: TestDaemon.token(1), appID: "x", extra: #""counts": {"unread": 1}"#)
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, body).status == 200)
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, body).status == 200)
            let limited = try await c.post(MatrixGatewayFixture.notifyPath, body)
            #expect(limited.status == 429 && limited.json?["errcode"]?.stringValue == "M_LIMIT_EXCEEDED")
            #expect(limited.json?["retry_after_ms"]?.intValue == 500)
            clock.advance(by: 0.5)
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, body).status == 200)
        } catch { Issue.record(error) }
        await d.stop()
    }
}

/// Notify bodies for the gateway tests.
enum MatrixPayloadFixtures {
    static let specExample = MatrixFixtures.specExample

    static func parse(_ body: String) throws -> MatrixNotification { try MatrixNotification.parse(JSONValue.parse(body)) }
}

/// A reload turns the gateway on (on api.listen); moving it to a listener of its own needs a restart.
@Suite(.stopsDaemons) struct MatrixGatewayReloadTests {
    @Test func reloadTurnsTheGatewayOnAndRefusesANewListener() async throws {
        let d = try await TestDaemon.start()
        do {
            let c = HTTPTestClient(port: d.port)
            let body = MatrixGatewayFixture.body(type: nil, pushkey: TestDaemon.token(1), appID: "x", extra: #""counts": {"unread": 1}"#)
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, body).status == 404)
            let on = TestDaemon.configJSON(extra: #", "matrix": {"apps": {"x": {"app": "com.example.app"}}}"#)
            #expect(await d.daemon.reload(try TestDaemon.parse(on, directory: d.directory)) == .applied(added: [], changed: [], removed: []))
            let r = try await c.post(MatrixGatewayFixture.notifyPath, body)
            #expect(r.status == 200 && r.text == "{\"rejected\":[]}\n", "\(r)")
            let moved = TestDaemon.configJSON(extra: #", "matrix": {"listen": "127.0.0.1:0", "apps": {"x": {"app": "com.example.app"}}}"#)
            guard case .refused(let reasons) = await d.daemon.reload(try TestDaemon.parse(moved, directory: d.directory)) else {
                Issue.record("a new matrix.listen must need a restart")
                await d.stop()
                return
            }
            #expect(reasons == ["matrix.listen changed (none → 127.0.0.1:0): restart to apply"])
        } catch { Issue.record(error) }
        await d.stop()
    }
}
