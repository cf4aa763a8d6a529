import Foundation
import HeraldCore
import HeraldMatrix
import HeraldSimulator
import HeraldTestKit
import Testing

/// Matrix for Android: an `app_id` mapped to an app whose route is `fcm`, through the daemon's
/// real FCM transport to the FCM simulator (real TLS, HTTP/2 and OAuth). What FCM receives is
/// Sygnal's gcm v1 data message; `rejected` lists only pushkeys FCM called dead; FCM's retryable
/// trouble never becomes a 5xx of the gateway.
@Suite(.serialized, .stopsDaemons) struct MatrixAndroidTests {
    typealias F = MatrixGatewayFixture
    static let appID = F.androidAppID

    static func start(_ platforms: F.Platforms = F.Platforms()) async throws -> F {
        try await F.start(matrix: #"{"apps": \#(F.allApps)}"#, platforms: platforms)
    }

    @Test(.timeLimit(.minutes(1))) func anAndroidPusherGetsSygnalsDataMessageThroughFCM() async throws {
        let f = try await Self.start()
        do {
            let token = FCMDaemonTests.androidToken(1)
            let long = String(repeating: "ü", count: 600)   // 1200 bytes
            let body = #"""
                {"notification": {"event_id": "$m1", "room_id": "!room:example.org", "type": "m.room.message", "sender": "@alice:example.org",
                 "sender_display_name": "\#(long)", "room_name": "Ops", "prio": "high",
                 "content": {"msgtype": "m.text", "body": "hello", "m.relates_to": {"rel_type": "m.thread"}},
                 "counts": {"unread": 3, "missed_calls": 1},
                 "devices": [{"app_id": "\#(Self.appID)", "pushkey": "\#(token)", "pushkey_ts": 1700000000, "data": {"default_payload": {"cs": "1", "n": 2}}}]}}
                """#
            let r = try await f.notify(body)
            #expect(r.status == 200 && r.rejected == [], "\(r.response)")
            let fcm = try #require(f.fcm)
            let m = try #require(await fcm.waitForMessages(count: 1)?.first)
            #expect(m.token == token)
            var data = m.data
            let heraldID = data.removeValue(forKey: "herald_id")
            #expect(heraldID != nil, "the FCM route adds the notification id")
            #expect(data == ["event_id": "$m1", "room_id": "!room:example.org", "type": "m.room.message", "sender": "@alice:example.org",
                             "sender_display_name": String(repeating: "ü", count: 510) + "…", "room_name": "Ops",
                             "content_msgtype": "m.text", "content_body": "hello", "prio": "high", "unread": "3", "missed_calls": "1",
                             "cs": "1", "n": "2"])
            #expect(m.message["notification"] == nil, "a data-only message")
            #expect(m.message["android"]?["priority"]?.stringValue == "high")
            #expect(try await f.device(token: token, appID: Self.appID, app: "com.example.android")?["transport"]?.stringValue == "android")

            // prio low: android.priority normal, data.prio normal; event_id_only: the ids, prio and counts.
            let low = F.body(eventID: "$m2", pushkey: token, appID: Self.appID,
                             extra: #""prio": "low", "content": {"msgtype": "m.text", "body": "secret"}, "counts": {"unread": 4}"#,
                             data: #"{"format": "event_id_only"}"#)
            #expect(try await f.notify(low).rejected == [])
            let second = try #require(await fcm.waitForMessages(count: 2)?.last)
            #expect(second.message["android"]?["priority"]?.stringValue == "normal")
            var idOnly = second.data
            idOnly["herald_id"] = nil
            #expect(idOnly == ["event_id": "$m2", "room_id": "!room:example.org", "prio": "normal", "unread": "4"])
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_payloads_total{app_id="\#(Self.appID)",mode="event_id_only"} 1"#))
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// FCM says UNREGISTERED for one token and INVALID_ARGUMENT naming the token for another:
    /// the next notify lists both in `rejected` and sends nothing to them. SENDER_ID_MISMATCH
    /// (the token is another project's) is a failed delivery, not a dead pushkey.
    @Test(.timeLimit(.minutes(1))) func onlyPushkeysFCMCalledDeadAreRejected() async throws {
        let dead = FCMDaemonTests.androidToken(2), bad = FCMDaemonTests.androidToken(3), other = FCMDaemonTests.androidToken(4)
        var platforms = F.Platforms()
        platforms.fcmFaults.unregisteredTokens = [dead]
        platforms.fcmFaults.invalidTokens = [bad]
        platforms.fcmFaults.senderMismatchTokens = [other]
        let f = try await Self.start(platforms)
        do {
            let fcm = try #require(f.fcm)
            for token in [dead, bad, other] {
                #expect(try await f.notify(F.body(eventID: "$1", pushkey: token, pushkeyTS: 1_700_000_000, appID: Self.appID)).rejected == [])
            }
            let settled = try await eventually(timeout: 20) {
                let a = try await f.device(token: dead, appID: Self.appID, app: "com.example.android")?["invalidated_at"]?.stringValue
                let b = try await f.device(token: bad, appID: Self.appID, app: "com.example.android")?["invalidated_at"]?.stringValue
                return a != nil && b != nil && fcm.counters.errors["SENDER_ID_MISMATCH"] == 1
            }
            #expect(settled, "\(fcm.counters.summary)")
            #expect(try await f.device(token: other, appID: Self.appID, app: "com.example.android")?["invalidated_at"] == .null)
            let sends = fcm.counters.sends
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: dead, pushkeyTS: 1_700_000_000, appID: Self.appID)).rejected == [dead])
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: bad, pushkeyTS: 1_700_000_000, appID: Self.appID)).rejected == [bad])
            #expect(fcm.counters.sends == sends, "a rejected pushkey is not sent")
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: other, pushkeyTS: 1_700_000_000, appID: Self.appID)).rejected == [])
            #expect(await eventually(timeout: 20) { fcm.counters.errors["SENDER_ID_MISMATCH"] == 2 }, "sent again: \(fcm.counters.summary)")
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(Self.appID)",outcome="rejected_dead"} 2"#))
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// 500 INTERNAL twice, then 503 UNAVAILABLE: the gateway has answered 200 (committed) and the
    /// queue retries until FCM takes it; nothing is rejected.
    @Test(.timeLimit(.minutes(1))) func retryableFCMTroubleIsRetriedAfterThe200AndNeverRejects() async throws {
        var platforms = F.Platforms()
        platforms.fcmFaults.internalErrors = 2
        platforms.fcmFaults.unavailable = 1
        let f = try await Self.start(platforms)
        do {
            let fcm = try #require(f.fcm)
            let token = FCMDaemonTests.androidToken(5)
            let r = try await f.notify(F.body(eventID: "$r", pushkey: token, appID: Self.appID))
            #expect(r.status == 200 && r.rejected == [], "\(r.response)")
            let m = try #require(await fcm.waitForMessages(count: 1), "\(fcm.counters.summary)")
            #expect(m[0].token == token && m[0].data["event_id"] == "$r")
            #expect(fcm.counters.errors["INTERNAL"] == 2 && fcm.counters.errors["UNAVAILABLE"] == 1, "\(fcm.counters.summary)")
            // The homeserver's retry of the same event is answered without a second send.
            #expect(try await f.notify(F.body(eventID: "$r", pushkey: token, appID: Self.appID)).rejected == [])
            #expect(try await f.device(token: token, appID: Self.appID, app: "com.example.android")?["invalidated_at"] == .null)
            #expect(fcm.received.count == 1)
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// An event whose fields, each under 1024 bytes, add up past FCM's 4096: answered 200, not
    /// rejected, nothing sent, counted as too_large.
    @Test(.timeLimit(.minutes(1))) func aMessageOverFCMsLimitIsAnswered200AndNotSent() async throws {
        let f = try await Self.start()
        do {
            let token = FCMDaemonTests.androidToken(8)
            let big = (1...5).map { #""f\#($0)": "\#(String(repeating: "x", count: 1000))""# }.joined(separator: ", ")
            let r = try await f.notify(F.body(eventID: "$big", pushkey: token, appID: Self.appID, extra: #""content": {\#(big)}"#))
            #expect(r.status == 200 && r.rejected == [], "\(r.response)")
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(Self.appID)",outcome="too_large"} 1"#), "\(metrics)")
            // A normal one after it goes.
            #expect(try await f.notify(F.body(eventID: "$small", pushkey: token, appID: Self.appID)).rejected == [])
            let m = try #require(await f.fcm?.waitForMessages(count: 1))
            #expect(m.count == 1 && m[0].data["event_id"] == "$small")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// `herald check`'s report names each app id's platform and route; a pusher of an app id
    /// whose app has no route of its platform is rejected (it can never be served as configured).
    @Test(.timeLimit(.minutes(1))) func eachAppIDGoesThroughARouteOfItsPlatform() async throws {
        let f = try await F.start(matrix: #"""
            {"apps": {"\#(Self.appID)": {"app": "com.example.android"}, "\#(F.webAppID)": {"app": "com.example.web"},
                      "org.example.misrouted": {"app": "com.example.app", "platform": "android"}}}
            """#, platforms: F.Platforms())
        do {
            let report = f.test.daemon.configuration.matrixReport()
            #expect(report.errors == 1, "\(report.lines)")
            #expect(report.lines.contains { $0.contains("\(Self.appID) → app com.example.android (android, transport android)") }, "\(report.lines)")
            #expect(report.lines.contains { $0.contains("\(F.webAppID) → app com.example.web (web, transport web)") }, "\(report.lines)")
            #expect(report.lines.contains { $0.contains(#"matrix.apps["org.example.misrouted"]: app com.example.app has no android route"#) }, "\(report.lines)")
            let token = FCMDaemonTests.androidToken(6)
            let r = try await f.notify(F.body(pushkey: token, appID: "org.example.misrouted"))
            #expect(r.status == 200 && r.rejected == [token], "\(r.response)")
            #expect(f.fcm?.counters.sends == 0 && f.simulator.received.isEmpty, "sent nowhere, not even to APNs")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }
}
