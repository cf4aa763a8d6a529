import Foundation
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// Live Activity tokens as devices (`POST /v1/devices` with `live_activity`), through a daemon
/// with an `apns-http2` route against the APNs simulator.
@Suite(.serialized, .stopsDaemons) struct LiveActivityTokenTests {
    static let app = ChannelAPITests.app

    static func token(_ n: Int) -> String { TestDaemon.token(n) }

    @Test(.timeLimit(.minutes(2))) func pushToStartTokensAreKeptApartAndReplacedPerInstallAndType() async throws {
        let (apns, test) = try await ChannelAPITests.start()
        defer { apns.stop() }
        let client = test.client
        func register(_ token: String, _ user: String, _ block: String?) async throws -> HTTPTestClient.Response {
            let extra = block.map { #", "live_activity": \#($0)"# } ?? ""
            return try await client.post("/v1/devices", #"{"app": "\#(Self.app)", "user": "\#(user)", "token": "\#(token)"\#(extra)}"#)
        }
        // alice: her phone's ordinary token, and push-to-start tokens from two installs.
        var r = try await register(Self.token(1), "alice", nil)
        #expect(r.status == 201, "\(r.text)")
        r = try await register(Self.token(2), "alice", #"{"kind": "start", "attributes_type": "MatchAttributes", "installation": "i1"}"#)
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["purpose"]?.stringValue == "live_activity_start" && r.json?["attributes_type"]?.stringValue == "MatchAttributes")
        #expect(r.json?["transport"]?.stringValue == "apns" && r.json?["replaced"]?.arrayValue == [])
        r = try await register(Self.token(3), "alice", #"{"kind": "start", "attributes_type": "MatchAttributes", "installation": "i2"}"#)
        #expect(r.status == 201, "\(r.text)")
        // Another type on the same install is a token of its own.
        r = try await register(Self.token(4), "alice", #"{"kind": "start", "attributes_type": "RideAttributes", "installation": "i1"}"#)
        #expect(r.status == 201 && r.json?["replaced"]?.arrayValue == [], "\(r.text)")
        // A new token for install i1 and MatchAttributes replaces the old one.
        r = try await register(Self.token(5), "alice", #"{"kind": "start", "attributes_type": "MatchAttributes", "installation": "i1"}"#)
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["replaced"]?.arrayValue?.compactMap(\.stringValue) == [Self.token(2)], "\(r.text)")
        // An update token of an activity.
        r = try await register(Self.token(6), "alice", #"{"kind": "update", "activity": "match-42", "installation": "i2"}"#)
        #expect(r.status == 201 && r.json?["activity"]?.stringValue == "match-42", "\(r.text)")
        r = try await register(Self.token(7), "alice", #"{"kind": "update", "activity": "match-42", "installation": "i2"}"#)
        #expect(r.json?["replaced"]?.arrayValue?.compactMap(\.stringValue) == [Self.token(6)], "\(r.text)")

        r = try await client.get("/v1/users/alice/devices?app=\(Self.app)")
        let listed = Set(r.json?["devices"]?.arrayValue?.compactMap { $0["token"]?.stringValue } ?? [])
        #expect(listed == Set([1, 3, 4, 5, 7].map(Self.token)), "\(r.text)")

        // A notification to alice reaches her ordinary device only.
        r = try await client.post("/v1/notifications", #"{"app": "\#(Self.app)", "users": ["alice"], "title": "Hi"}"#)
        #expect(r.status == 202 && r.json?["deliveries"]?.intValue == 1, "\(r.text)")
        #expect(await eventually(timeout: 10) { apns.simulator.received.count == 1 })
        #expect(apns.simulator.received.map(\.deviceToken) == [Self.token(1)])

        // A Live Activity start to a push-to-start token by address reaches it on the liveactivity topic.
        r = try await client.post("/v1/notifications", """
            {"app": "\(Self.app)", "tokens": ["\(Self.token(5))"], "title": "Kick-off", "body": "Team 1 vs Team 2",
             "apns": {"live_activity": {"event": "start", "timestamp": 1790000000, "attributes_type": "MatchAttributes",
                                        "attributes": {"home": "Team 1"}, "content_state": {"score": "0-0"}}}}
            """)
        #expect(r.status == 202, "\(r.text)")
        #expect(await eventually(timeout: 10) { apns.simulator.received.count == 2 })
        let start = apns.simulator.received.last
        #expect(start?.deviceToken == Self.token(5) && start?.pushType == .liveactivity)
        #expect(start?.topic == "\(Self.app).push-type.liveactivity")
        await test.stop()
    }

    @Test(.timeLimit(.minutes(2))) func aBadBlockNamesItsField() async throws {
        let (apns, test) = try await ChannelAPITests.start()
        defer { apns.stop() }
        func problem(_ block: String) async throws -> String? {
            let r = try await test.client.post("/v1/devices", #"{"app": "\#(Self.app)", "user": "bob", "token": "\#(Self.token(9))", "live_activity": \#(block)}"#)
            #expect(r.status == 400, "\(r.text)")
            return r.errorField
        }
        #expect(try await problem(#"{"kind": "stop"}"#) == "live_activity.kind")
        #expect(try await problem(#"{"kind": "start", "installation": "i1"}"#) == "live_activity.attributes_type")
        #expect(try await problem(#"{"kind": "start", "attributes_type": "T"}"#) == "live_activity.installation")
        #expect(try await problem(#"{"kind": "update"}"#) == "live_activity.activity")
        #expect(try await problem(#"{"kind": "update", "activity": "a", "attributes_type": "T"}"#) == "live_activity.attributes_type")
        #expect(try await problem(#"{"kind": "start", "attributes_type": "T", "installation": "i", "extra": 1}"#) == "live_activity.extra")
        #expect(try await problem(#""start""#) == "live_activity")
        await test.stop()
    }
}
