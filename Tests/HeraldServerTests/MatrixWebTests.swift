import Foundation
import HeraldCore
import HeraldMatrix
import HeraldSimulator
import HeraldTestKit
import HeraldWebPush
import Testing

/// Matrix for the web: an `app_id` mapped to an app whose route is `webpush`, through the
/// daemon's real Web Push transport to the Web Push simulator, which decrypts what it receives.
/// The pushkey is the subscription's p256dh and `data.endpoint`/`data.auth` complete it (Sygnal's
/// webpush pushkin); the route's `allowedEndpoints` applies; only 404 and 410 reject the pushkey.
@Suite(.serialized, .stopsDaemons) struct MatrixWebTests {
    typealias F = MatrixGatewayFixture
    static let appID = F.webAppID

    static func start(_ platforms: F.Platforms = F.Platforms()) async throws -> F {
        try await F.start(matrix: #"{"apps": \#(F.allApps)}"#, platforms: platforms)
    }

    /// The store's record of a web pusher's device (its token is the subscription's canonical JSON).
    static func device(_ f: F, p256dh: String) async throws -> JSONValue? {
        let r = try await f.client.get("/v1/users/matrix:\(appID)/devices?app=com.example.web&include_invalidated=true")
        return r.json?["devices"]?.arrayValue?.first { $0["token"]?.stringValue?.contains(p256dh) == true }
    }

    @Test(.timeLimit(.minutes(1))) func aWebPusherGetsSygnalsPayloadWithUrgencyAndTopic() async throws {
        let f = try await Self.start()
        do {
            let web = try #require(f.webpush)
            let pusher = try f.webPusher(0, extra: #""only_last_per_room": true, "default_payload": {"cs": 1}"#)
            let body = F.body(eventID: "$w1", pushkey: pusher.pushkey, appID: Self.appID,
                              extra: #""prio": "low", "room_name": "Ops", "content": {"msgtype": "m.text", "body": "hello web", "formatted_body": "<b>hello</b>"}, "counts": {"unread": 2}"#,
                              data: pusher.data)
            let r = try await f.notify(body)
            #expect(r.status == 200 && r.rejected == [], "\(r.response)")
            #expect(await eventually(timeout: 20) { web.rules.received.count == 1 }, "\(web.summary)")
            let m = try #require(web.rules.received.first)
            #expect(m.subscription == 0)
            #expect(m.urgency == "low")
            #expect(m.topic == WebPushRendering.topic(for: "!room:example.org") && m.topic?.count == 32)
            let json = try #require(m.json, "plaintext: \(String(decoding: m.plaintext, as: UTF8.self))")
            #expect(json["event_id"] == "$w1" && json["room_id"] == "!room:example.org" && json["type"] == "m.room.message")
            #expect(json["sender"] == "@alice:example.org" && json["sender_display_name"] == "Alice" && json["room_name"] == "Ops")
            #expect(json["content"] == ["msgtype": "m.text", "body": "hello web"], "formatted_body is left out")
            #expect(json["unread"] == 2 && json["cs"] == 1)
            #expect(json["id"]?.stringValue != nil && json["app"] == "com.example.web", "Herald's members")
            #expect(json["urgency"] == nil && json["topic"] == nil, "headers, not members")
            #expect(try await Self.device(f, p256dh: pusher.pushkey)?["transport"]?.stringValue == "web")

            // prio high is Urgency normal (Sygnal sends only normal and low); no only_last_per_room, no Topic.
            let plain = try f.webPusher(1)
            #expect(try await f.notify(F.body(eventID: "$w2", pushkey: plain.pushkey, appID: Self.appID, data: plain.data)).rejected == [])
            #expect(await eventually(timeout: 20) { web.rules.received.count == 2 })
            let second = try #require(web.rules.received.first { $0.subscription == 1 })
            #expect(second.urgency == "normal" && second.topic == nil)
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// 410 for one subscription and 404 for another: the next notify lists both pushkeys in
    /// `rejected`. A 403 (a subscription made with another VAPID key) is a failed delivery only.
    @Test(.timeLimit(.minutes(1))) func only404And410RejectThePushkey() async throws {
        var platforms = F.Platforms()
        platforms.webFaults.gone = [2]
        platforms.webFaults.notFound = [3]
        platforms.webFaults.mismatchedKey = [4]
        let f = try await Self.start(platforms)
        do {
            let web = try #require(f.webpush)
            let gone = try f.webPusher(2), notFound = try f.webPusher(3), mismatched = try f.webPusher(4)
            for p in [gone, notFound, mismatched] {
                #expect(try await f.notify(F.body(eventID: "$1", pushkey: p.pushkey, pushkeyTS: 1_700_000_000, appID: Self.appID, data: p.data)).rejected == [])
            }
            let settled = try await eventually(timeout: 20) {
                let a = try await Self.device(f, p256dh: gone.pushkey)?["invalidated_at"]?.stringValue
                let b = try await Self.device(f, p256dh: notFound.pushkey)?["invalidated_at"]?.stringValue
                return a != nil && b != nil && web.rules.count(status: 403) >= 1
            }
            #expect(settled, "\(web.summary)")
            #expect(try await Self.device(f, p256dh: mismatched.pushkey)?["invalidated_at"] == .null)
            let refused403 = web.rules.count(status: 403)
            let requests = web.rules.count(status: 404) + web.rules.count(status: 410)
            for p in [gone, notFound] {
                #expect(try await f.notify(F.body(eventID: "$2", pushkey: p.pushkey, pushkeyTS: 1_700_000_000, appID: Self.appID, data: p.data)).rejected == [p.pushkey])
            }
            #expect(web.rules.count(status: 404) + web.rules.count(status: 410) == requests, "a rejected pushkey is not sent")
            #expect(try await f.notify(F.body(eventID: "$2", pushkey: mismatched.pushkey, pushkeyTS: 1_700_000_000, appID: Self.appID, data: mismatched.data)).rejected == [])
            #expect(await eventually(timeout: 20) { web.rules.count(status: 403) > refused403 }, "sent again: \(web.summary)")
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// The push service answers 503 (with Retry-After) twice: the gateway has answered 200 and
    /// the queue retries until it is taken; nothing is rejected.
    @Test(.timeLimit(.minutes(1))) func aRetryable5xxIsRetriedAfterThe200AndNeverRejects() async throws {
        var platforms = F.Platforms()
        platforms.webFaults.serverErrors = 2
        platforms.webFaults.retryAfter = 1
        let f = try await Self.start(platforms)
        do {
            let web = try #require(f.webpush)
            let p = try f.webPusher(5)
            let r = try await f.notify(F.body(eventID: "$r", pushkey: p.pushkey, appID: Self.appID, data: p.data))
            #expect(r.status == 200 && r.rejected == [], "\(r.response)")
            #expect(await eventually(timeout: 30) { web.rules.received.count == 1 }, "\(web.summary)")
            #expect(web.rules.received.first?.json?["event_id"] == "$r")
            #expect(web.rules.count(status: 201) == 1 && web.rules.count(status: 503) + web.rules.count(status: 500) == 2, "\(web.summary)")
            #expect(try await f.notify(F.body(eventID: "$r", pushkey: p.pushkey, appID: Self.appID, data: p.data)).rejected == [])
            #expect(try await Self.device(f, p256dh: p.pushkey)?["invalidated_at"] == .null)
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }

    /// A pusher whose subscription is incomplete or malformed is rejected. One whose endpoint is
    /// outside the route's `allowedEndpoints` (another host, or loopback by another name) is not
    /// sent and not rejected either (Sygnal: "don't reject push key"; the allow-list may change).
    /// Nothing is sent and no device is registered.
    @Test(.timeLimit(.minutes(1))) func pushersOutsideTheAllowListAreNotSentAndIncompleteOnesAreRejected() async throws {
        let f = try await Self.start()
        do {
            let web = try #require(f.webpush)
            let p = try f.webPusher(6)
            let endpoint = try #require(p.json["endpoint"]?.stringValue)
            let auth = try #require(p.json["keys"]?["auth"]?.stringValue)
            let port = try #require(URL(string: endpoint)?.port)
            let cases = [
                #"{"endpoint": "https://push.example.org/s/6", "auth": "\#(auth)"}"#,            // not in allowedEndpoints
                #"{"endpoint": "https://localhost:\#(port)/s/6", "auth": "\#(auth)"}"#,         // loopback, but not as listed
                #"{"endpoint": "\#(endpoint.replacingOccurrences(of: "https:", with: "http:"))", "auth": "\#(auth)"}"#,
                #"{"endpoint": "\#(endpoint)"}"#,                                               // no auth
                #"{"endpoint": "\#(endpoint)", "auth": "AAAA"}"#,                               // auth is not 16 bytes
            ]
            for (i, data) in cases.enumerated() {
                let r = try await f.notify(F.body(eventID: "$\(i)", pushkey: p.pushkey, appID: Self.appID, data: data))
                #expect(r.status == 200 && r.rejected == (i < 2 ? [] : [p.pushkey]), "case \(i): \(r.response)")
            }
            // A pushkey that is no P-256 point, with a good endpoint.
            let r = try await f.notify(F.body(eventID: "$k", pushkey: "BAAA", appID: Self.appID, data: p.data))
            #expect(r.rejected == ["BAAA"], "\(r.response)")
            #expect(web.rules.received.isEmpty)
            #expect(try await Self.device(f, p256dh: p.pushkey) == nil)
            let metrics = try await f.client.get("/metrics").text
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(Self.appID)",outcome="rejected_bad_subscription"} 4"#), "\(metrics)")
            #expect(metrics.contains(#"herald_matrix_pushkeys_total{app_id="\#(Self.appID)",outcome="refused_endpoint_not_allowed"} 2"#), "\(metrics)")
            // The good one goes.
            #expect(try await f.notify(F.body(eventID: "$ok", pushkey: p.pushkey, appID: Self.appID, data: p.data)).rejected == [])
            #expect(await eventually(timeout: 20) { web.rules.received.count == 1 })
        } catch {
            Issue.record(error)
        }
        await f.stop()
    }
}
