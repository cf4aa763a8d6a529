import HeraldAPNs
import HeraldCore
import Testing
@testable import HeraldSimulator

/// Apple's Live Activity payload rules, the broadcast send and the channel management API, as
/// pure functions of the simulator.
@Suite("Live Activity and broadcast rules")
struct LiveActivityRulesTests {
    static let now = 1_790_000_000

    func problem(_ aps: String, broadcast: Bool = false) -> String? {
        LiveActivityPayloadRules.problem(try! JSONValue.parse(#"{"aps":\#(aps)}"#), broadcast: broadcast)
    }

    @Test func acceptsStartUpdateAndEnd() {
        #expect(problem(#"{"event":"start","timestamp":\#(Self.now),"content-state":{"score":1},"attributes-type":"MatchAttributes","attributes":{"home":"A"},"alert":{"title":"Kick-off"},"input-push-channel":"dGVzdA=="}"#) == nil)
        #expect(problem(#"{"event":"update","timestamp":\#(Self.now),"content-state":{"score":2},"stale-date":\#(Self.now + 60),"relevance-score":50}"#) == nil)
        #expect(problem(#"{"event":"end","timestamp":\#(Self.now),"dismissal-date":\#(Self.now + 600)}"#) == nil)
    }

    @Test func namesTheFieldThatBreaksARule() {
        #expect(problem(#"{"timestamp":1,"content-state":{}}"#) == "aps.event: missing (start, update or end)")
        #expect(problem(#"{"event":"pause","timestamp":1,"content-state":{}}"#) == "aps.event: expected start, update or end")
        #expect(problem(#"{"event":"update","content-state":{}}"#) == "aps.timestamp: missing (seconds since 1970)")
        #expect(problem(#"{"event":"update","timestamp":1.5,"content-state":{}}"#) == "aps.timestamp: expected whole seconds since 1970")
        #expect(problem(#"{"event":"update","timestamp":1}"#) == "aps.content-state: missing (an object)")
        #expect(problem(#"{"event":"update","timestamp":1,"content-state":[1]}"#) == "aps.content-state: expected an object")
        #expect(problem(#"{"event":"start","timestamp":1,"content-state":{},"attributes":{},"alert":"x"}"#) == "aps.attributes-type: missing on start")
        #expect(problem(#"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","alert":"x"}"#) == "aps.attributes: missing on start")
        #expect(problem(#"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{}}"#) == "aps.alert: missing on start")
        #expect(problem(#"{"event":"end","timestamp":1,"dismissal-date":"soon"}"#) == "aps.dismissal-date: expected whole seconds since 1970")
        #expect(problem(#"{"event":"update","timestamp":1,"content-state":{},"relevance-score":"high"}"#) == "aps.relevance-score: expected a number")
        #expect(problem(#"{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"alert":"x"}"#, broadcast: true)
                == "aps.event: a broadcast cannot start a Live Activity")
        #expect(LiveActivityPayloadRules.problem(try! JSONValue.parse(#"{"alert":"x"}"#)) == "aps: missing (an object)")
    }

    @Test func theValidatorRefusesABadLiveActivityPayload() {
        let headers = [("apns-topic", "com.example.app.push-type.liveactivity"), ("apns-push-type", "liveactivity")]
        let good = HTTP2RequestHead(path: "/3/device/\(HTTP2ValidatorTests.token)", headers: headers,
                                    body: #"{"aps":{"event":"update","timestamp":1,"content-state":{"s":1}}}"#)
        #expect(HTTP2RequestValidator().validate(good, topics: HTTP2ValidatorTests.tokenPolicy) { _ in nil }.reason == nil)
        let bad = HTTP2RequestHead(path: "/3/device/\(HTTP2ValidatorTests.token)", headers: headers, body: #"{"aps":{"alert":"hi"}}"#)
        let verdict = HTTP2RequestValidator().validate(bad, topics: HTTP2ValidatorTests.tokenPolicy) { _ in nil }
        #expect(verdict.reason == .badLiveActivityPayload)
        #expect(verdict.status == 400)
    }

    // MARK: Broadcasts

    func broadcast(_ store: APNsChannelStore, channel: String?, _ extra: [(String, String)] = [("apns-push-type", "liveactivity")],
                   body: String = #"{"aps":{"event":"update","timestamp":1,"content-state":{"s":1}}}"#,
                   path: String = "/4/broadcasts/apps/com.example.app", method: String = "POST") -> HTTP2Verdict {
        var headers = extra
        if let channel { headers.append(("apns-channel-id", channel)) }
        let request = HTTP2RequestHead(method: method, path: path, headers: headers, body: body)
        return HTTP2BroadcastRules(store: store).validate(request, topics: HTTP2ValidatorTests.tokenPolicy) { _ in nil }
    }

    @Test func broadcastRulesInAppleOrder() throws {
        let store = APNsChannelStore()
        let channel = try store.create(bundle: "com.example.app", storagePolicy: 1).get()
        let ok = broadcast(store, channel: channel.id, [("apns-push-type", "liveactivity"), ("apns-priority", "5")])
        #expect(ok.reason == nil && ok.isBroadcast && ok.pushType == .liveactivity)
        #expect(broadcast(store, channel: channel.id, method: "GET").reason == .methodNotAllowed)
        #expect(broadcast(store, channel: channel.id, path: "/4/broadcasts/apps/").reason == .badPath)
        #expect(broadcast(store, channel: channel.id, path: "/4/broadcasts/apps/other.app").reason == .topicDisallowed)
        #expect(broadcast(store, channel: channel.id, []).reason == .missingPushType)
        #expect(broadcast(store, channel: channel.id, [("apns-push-type", "alert")]).reason == .invalidPushType)
        #expect(broadcast(store, channel: nil).reason == .missingChannelId)
        #expect(broadcast(store, channel: "not base64!").reason == .badChannelId)
        let unknown = broadcast(store, channel: "AAAAAAAAAAAAAAAAAAAAAA==")
        #expect(unknown.reason == .channelNotRegistered && unknown.status == 404)
        #expect(broadcast(store, channel: channel.id, [("apns-push-type", "liveactivity"), ("apns-priority", "7")]).reason == .badPriority)
        #expect(broadcast(store, channel: channel.id, [("apns-push-type", "liveactivity"), ("apns-expiration", "soon")]).reason == .badExpirationDate)
        #expect(broadcast(store, channel: channel.id, body: "").reason == .payloadEmpty)
        #expect(broadcast(store, channel: channel.id, body: #"{"aps":{"event":"update","timestamp":1,"content-state":{"x":"\#(String(repeating: "a", count: 5200))"}}}"#).reason == .payloadTooLarge)
        #expect(broadcast(store, channel: channel.id,
                          body: #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"alert":"x"}}"#).reason
                == .badLiveActivityPayload)
    }

    // MARK: Channel management

    func manage(_ rules: ChannelManagementRules, _ method: String, _ path: String, channel: String? = nil, body: String = "",
                authorization: String? = nil) -> SimulatorHTTP2Response {
        var headers: [SimulatorHTTP2Header] = []
        if let channel { headers.append(SimulatorHTTP2Header("apns-channel-id", channel)) }
        if let authorization { headers.append(SimulatorHTTP2Header("authorization", authorization)) }
        return rules.respond(SimulatorHTTP2Request(method: method, path: path, headers: headers, body: Array(body.utf8)))
    }

    func reason(_ response: SimulatorHTTP2Response) -> String? {
        (try? JSONValue.parse(response.body))?["reason"]?.stringValue
    }

    @Test func managementCreatesReadsListsAndDeletes() throws {
        let rules = ChannelManagementRules(store: APNsChannelStore(limit: 2), bundles: ["com.example.app"], authenticate: nil)
        let path = "/1/apps/com.example.app/channels"
        let created = manage(rules, "POST", path, body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(created.status == 201)
        let id = try #require(created.headers.first { $0.name == "apns-channel-id" }?.value)
        #expect(APNsChannelStore.isWellFormedID(id))
        #expect(created.headers.contains { $0.name == "apns-request-id" })
        let read = manage(rules, "GET", path, channel: id)
        #expect(read.status == 200)
        #expect(try JSONValue.parse(read.body)["message-storage-policy"]?.intValue == 1)
        let second = manage(rules, "POST", path, body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
        #expect(second.status == 201)
        let third = manage(rules, "POST", path, body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
        #expect(third.status == 400 && reason(third) == "CannotCreateChannelConfig")
        let list = manage(rules, "GET", "/1/apps/com.example.app/all-channels")
        #expect(try JSONValue.parse(list.body)["channels"]?.arrayValue?.count == 2)
        #expect(manage(rules, "DELETE", path, channel: id).status == 204)
        let gone = manage(rules, "GET", path, channel: id)
        #expect(gone.status == 404 && reason(gone) == "ChannelNotRegistered")
        #expect(manage(rules, "DELETE", path, channel: id).status == 404)
    }

    @Test func managementRefusals() {
        let rules = ChannelManagementRules(store: APNsChannelStore(), bundles: ["com.example.app"],
                                           authenticate: { header in header == "bearer good" ? nil : .missingProviderToken })
        let path = "/1/apps/com.example.app/channels"
        let auth = "bearer good"
        #expect(reason(manage(rules, "POST", path, body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)) == "MissingProviderToken")
        #expect(reason(manage(rules, "POST", path, body: #"{"message-storage-policy":0}"#, authorization: auth)) == "MissingPushType")
        #expect(reason(manage(rules, "POST", path, body: #"{"message-storage-policy":0,"push-type":"Alert"}"#, authorization: auth)) == "InvalidPushType")
        #expect(reason(manage(rules, "POST", path, body: #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, authorization: auth)) == "BadMessageStoragePolicy")
        #expect(reason(manage(rules, "GET", path, authorization: auth)) == "MissingChannelId")
        #expect(reason(manage(rules, "GET", path, channel: "%%%", authorization: auth)) == "BadChannelId")
        #expect(reason(manage(rules, "PUT", path, authorization: auth)) == "MethodNotAllowed")
        #expect(reason(manage(rules, "GET", "/1/apps/com.example.app/elsewhere", authorization: auth)) == "BadPath")
        #expect(reason(manage(rules, "GET", "/1/apps/other.app/all-channels", authorization: auth)) == "TopicDisallowed")
    }
}
