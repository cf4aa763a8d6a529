import Foundation
import HeraldAPNs
import HeraldCore
import Testing

func payloadString(_ content: NotificationContent) -> String {
    String(decoding: APNsPayload.encode(content), as: UTF8.self)
}

@Suite struct PayloadTests {
    @Test func plainAlert() {
        #expect(payloadString(NotificationContent(alert: .text("Hello"))) == #"{"aps":{"alert":"Hello"}}"#)
    }

    @Test func alertDictionaryAndApsKeysInOrder() {
        var c = NotificationContent(alert: .fields(Alert(title: "T", subtitle: "S", body: "B \"quoted\"\n",
                                                         titleLocKey: "TK", titleLocArgs: ["a"], subtitleLocKey: "SK",
                                                         subtitleLocArgs: ["b"], locKey: "LK", locArgs: ["c", "d"])),
                                    badge: 3, sound: .named("default"))
        c.apns.launchImage = "li.png"
        c.apns.threadID = "thread"
        c.apns.category = "cat"
        c.apns.contentAvailable = true
        c.apns.mutableContent = true
        c.apns.targetContentID = "target"
        c.apns.interruptionLevel = .timeSensitive
        c.apns.relevanceScore = 0.5
        c.apns.filterCriteria = "work"
        #expect(payloadString(c) == #"{"aps":{"alert":{"title":"T","subtitle":"S","body":"B \"quoted\"\n","launch-image":"li.png","title-loc-key":"TK","title-loc-args":["a"],"subtitle-loc-key":"SK","subtitle-loc-args":["b"],"loc-key":"LK","loc-args":["c","d"]},"badge":3,"sound":"default","thread-id":"thread","category":"cat","content-available":1,"mutable-content":1,"target-content-id":"target","interruption-level":"time-sensitive","relevance-score":0.5,"filter-criteria":"work"}}"#)
    }

    @Test func criticalSoundAndCustomDataBesideAps() {
        let c = NotificationContent(alert: .text("x"), sound: .critical(name: "alarm.caf", volume: 0.8),
                                    data: ["z": 1, "a": ["k": "v"], "aps": "ignored"])
        #expect(payloadString(c) == #"{"aps":{"alert":"x","sound":{"critical":1,"name":"alarm.caf","volume":0.8}},"a":{"k":"v"},"z":1}"#)
    }

    @Test func liveActivityKeys() {
        var c = NotificationContent()
        c.apns.liveActivity = LiveActivityContent(event: .update, timestamp: 1_700_000_000, contentState: ["score": 2],
                                                  staleDate: 1_700_000_600, dismissalDate: nil)
        #expect(c.pushType == .liveactivity)
        #expect(payloadString(c) == #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":2},"stale-date":1700000600}}"#)
    }

    @Test func widgetPushesSayContentChanged() {
        var widget = NotificationContent()
        widget.apns.pushType = .widgets
        #expect(payloadString(widget) == #"{"aps":{"content-changed":true}}"#)
        var alert = NotificationContent(alert: .text("x"))
        alert.apns.pushType = .alert
        #expect(!payloadString(alert).contains("content-changed"))
    }

    @Test func pushTypeAndPriorityDefaults() {
        var background = NotificationContent()
        background.apns.contentAvailable = true
        #expect(background.pushType == .background)
        #expect(background.apnsPriority == 5)
        #expect(NotificationContent(alert: .text("x")).pushType == .alert)
        #expect(NotificationContent(alert: .text("x")).apnsPriority == 10)
        var explicit = NotificationContent(alert: .text("x"))
        explicit.apns.pushType = .voip
        explicit.apns.priority = 5
        #expect(explicit.pushType == .voip && explicit.apnsPriority == 5)
    }

    @Test func topicSuffixesFollowApple() {
        let expected: [PushType: String] = [
            .alert: "com.a", .background: "com.a", .mdm: "com.a", .location: "com.a.location-query", .voip: "com.a.voip",
            .complication: "com.a.complication", .fileprovider: "com.a.pushkit.fileprovider",
            .liveactivity: "com.a.push-type.liveactivity", .pushtotalk: "com.a.voip-ptt",
            .widgets: "com.a.push-type.widgets", .controls: "com.a.push-type.controls",
        ]
        #expect(PushType.allCases.count == 11)
        for type in PushType.allCases { #expect(type.topic(forBundleID: "com.a") == expected[type]) }
        #expect(PushType.voip.topic(forBundleID: "com.a.voip") == "com.a.voip")
    }

    @Test func priorityRules() {
        #expect(PushType.background.allows(priority: 5) && PushType.background.allows(priority: 10))
        #expect(PushType.alert.allows(priority: 1))
        #expect(!PushType.alert.allows(priority: 7))
        // Background always goes with 5, whatever was asked; others keep theirs.
        #expect([nil, 1, 5, 10].map { PushType.background.priority(requested: $0) } == [5, 5, 5, 5])
        #expect([nil, 1, 5, 10].map { PushType.alert.priority(requested: $0) } == [10, 1, 5, 10])
        var background = NotificationContent()
        background.apns.pushType = .background
        background.apns.priority = 10
        #expect(background.apnsPriority == 5)
        #expect(throws: Never.self) { try APNsRoute.render(background, context: Self.context) }
        #expect(PushType.voip.maxPayloadBytes == 5120)
        #expect(PushType.alert.maxPayloadBytes == 4096)
    }

    static let context = RenderContext(notificationID: "n", app: "com.a", topic: "com.a")

    @Test func theRenderNamesTheFieldItRefuses() {
        var c = NotificationContent(alert: .text("x"))
        c.overrides["apns"] = ["priority": 7]
        #expect(throws: ContentProblem(field: "apns.priority", "must be 10, 5 or 1, found 7")) {
            try APNsRoute.render(c, context: Self.context)
        }
        var collapse = NotificationContent(alert: .text("x"))
        collapse.overrides["apns"] = ["collapse_id": .string(String(repeating: "é", count: 33))]
        #expect(throws: ContentProblem(field: "apns.collapse_id", "must be at most 64 bytes, found 66")) {
            try APNsRoute.render(collapse, context: Self.context)
        }
        var unknown = NotificationContent(alert: .text("x"))
        unknown.overrides["apns"] = ["push_typ": "alert"]
        #expect((try? APNsRoute.render(unknown, context: Self.context)) == nil)
        #expect(throws: ContentProblem(field: "data.aps", "\"aps\" is reserved for Apple's keys; use the top-level fields or the apns block")) {
            try APNsRoute.render(NotificationContent(alert: .text("x"), data: ["aps": 1]), context: Self.context)
        }
    }

    @Test func theRenderedPayloadCarriesTheNotificationIDBesideApsAndTheKeyIsReserved() throws {
        let context = RenderContext(notificationID: "01a2357b-ed84-7319-90c0-b4236224ae74", app: "com.a", topic: "com.a")
        let c = NotificationContent(alert: .text("x"), data: ["a": 1, "z": "v"])
        let payload = try APNsRoute.render(c, context: context)
        #expect(String(decoding: payload.body, as: UTF8.self)
                == #"{"aps":{"alert":"x"},"herald_id":"01a2357b-ed84-7319-90c0-b4236224ae74","a":1,"z":"v"}"#)
        // Without a notification (tools that show a payload) there is no id.
        #expect(payloadString(c) == #"{"aps":{"alert":"x"},"a":1,"z":"v"}"#)
        // Custom data may not set it: the accept refuses it, naming the field.
        #expect(throws: ContentProblem(field: "data.herald_id", "\"herald_id\" is reserved: Herald sets it to the notification id in every APNs payload")) {
            try APNsRoute.render(NotificationContent(alert: .text("x"), data: ["herald_id": "mine"]), context: context)
        }
        // Callers that drive a transport directly get it too.
        let d = Delivery(id: 1, notificationID: "n-7", app: "com.a", topic: "com.a", token: "", user: nil, transport: "t", content: c)
        #expect(String(decoding: APNsRoute.rendered([d])[0].payload.body, as: UTF8.self) == #"{"aps":{"alert":"x"},"herald_id":"n-7","a":1,"z":"v"}"#)
    }

    @Test func aPayloadOverApplesLimitIsRefusedAtRenderNamingTheLimit() throws {
        // 4096 bytes fit an alert; one more byte does not.
        // The herald_id key counts toward the limit.
        let base = APNsPayload.encode(NotificationContent(alert: .text("")), notificationID: Self.context.notificationID).count
        #expect(base == APNsPayload.encode(NotificationContent(alert: .text(""))).count + #","herald_id":"n""#.utf8.count)
        let fits = NotificationContent(alert: .text(String(repeating: "a", count: 4096 - base)))
        #expect(try APNsRoute.render(fits, context: Self.context).body.count == 4096)
        let over = NotificationContent(alert: .text(String(repeating: "a", count: 4097 - base)))
        #expect(throws: ContentProblem(field: "payload", "is 4097 bytes; APNs accepts at most 4096 for alert notifications")) {
            try APNsRoute.render(over, context: Self.context)
        }
    }

    @Test func neutralFieldsReachAPNsAndTheBlockWins() throws {
        var c = NotificationContent(title: "T", body: "B", thread: "th", collapseKey: "ck", priority: .normal, expiration: 1_900_000_000)
        var payload = try APNsRoute.render(c, context: Self.context)
        var options = APNsSendOptions(payload)
        #expect(options.priority == 5 && options.collapseID == "ck" && options.expiration == 1_900_000_000)
        #expect(String(decoding: payload.body, as: UTF8.self) == #"{"aps":{"alert":{"title":"T","body":"B"},"thread-id":"th"},"herald_id":"n"}"#)
        c.overrides["apns"] = ["priority": 10, "collapse_id": "block"]
        payload = try APNsRoute.render(c, context: Self.context)
        options = APNsSendOptions(payload)
        #expect(options.priority == 10 && options.collapseID == "block" && payload.expiration == 1_900_000_000)
    }

    @Test func jsonWriterEscapesControlCharacters() {
        var w = JSONWriter()
        w.string("a\u{01}b\tc\\d/é")
        #expect(w.string == #""a\u0001b\tc\\d/é""#)
        #expect(JSONValue.object(["b": [1, 2.5, nil, true], "a": "x"]).jsonString == #"{"a":"x","b":[1,2.5,null,true]}"#)
    }
}
