import FoundationEssentials
import HeraldCore
@testable import HeraldGorush
import Testing

/// gorush's request bodies (its README's examples and its router tests', verbatim) read into
/// the core's notification requests, and its refusals.
@Suite struct GorushPushTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let target = GorushPush.Target(app: "com.example.app", topic: "com.example.app", maxNotifications: 100, now: now)

    func parse(_ body: String, _ target: GorushPush.Target = target) throws(GorushError) -> GorushPush {
        try GorushPush.parse(Array(body.utf8), for: target)
    }

    func refusal(_ body: String, _ target: GorushPush.Target = target) -> GorushError? {
        do { _ = try parse(body, target); return nil } catch { return error }
    }

    // MARK: gorush's README

    @Test func readmeIOSBasic() throws {
        let push = try parse(#"{"notifications": [{"tokens": ["ios_device_token"], "platform": 1, "title": "Hello iOS", "message": "Hello World iOS!"}]}"#)
        #expect(push.items.count == 1 && push.counts == 1)
        let r = push.items[0].request
        #expect(r.app == "com.example.app" && r.tokens == ["ios_device_token"] && r.platform == .ios && r.users.isEmpty)
        #expect(r.content.title == "Hello iOS" && r.content.body == "Hello World iOS!")
        #expect(r.content.overrides.isEmpty && r.idempotencyKey == nil)
    }

    @Test func readmeAndroidBasic() throws {
        let push = try parse(#"{"notifications": [{"tokens": ["android_device_token"], "platform": 2, "title": "Hello Android", "message": "Hello World Android!"}]}"#)
        let r = push.items[0].request
        #expect(r.platform == .android && r.tokens == ["android_device_token"])
        #expect(r.content.title == "Hello Android" && r.content.body == "Hello World Android!" && r.content.overrides.isEmpty)
    }

    @Test func readmeMultiplePlatforms() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["ios_token"], "platform": 1, "message": "Hello iOS!"},
                               {"tokens": ["android_token"], "platform": 2, "message": "Hello Android!"}]}
            """)
        #expect(push.items.map(\.request.platform) == [.ios, .android])
        #expect(push.items.map(\.index) == [0, 1] && push.counts == 2)
        #expect(push.items.map(\.request.content.body) == ["Hello iOS!", "Hello Android!"])
    }

    @Test func readmeIOSCustomSoundThroughFCMsApnsObject() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["ios_device_token"], "platform": 1, "title": "Important Alert", "message": "Critical notification",
              "apns": {"payload": {"aps": {"sound": {"name": "custom.wav", "critical": 1, "volume": 0.8}}}}}]}
            """)
        #expect(push.items[0].request.content.sound == .critical(name: "custom.wav", volume: 0.8))
    }

    @Test func readmeIOSAlertWithBadge() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 1, "badge": 5,
              "alert": {"title": "Game Request", "body": "Bob wants to play poker", "action-loc-key": "PLAY"}}]}
            """)
        let c = push.items[0].request.content
        #expect(push.counts == 2 && c.title == "Game Request" && c.body == "Bob wants to play poker" && c.badge == 5)
    }

    @Test func readmeIOSCriticalSoundAndBadge() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 1, "message": "You got your emails.", "badge": 9,
              "sound": {"critical": 1, "name": "default", "volume": 1.0}}]}
            """)
        let c = push.items[0].request.content
        #expect(c.body == "You got your emails." && c.badge == 9 && c.sound == .critical(name: "default", volume: 1.0))
    }

    @Test func readmeSoundFormatWithVolumeTwoIsRefusedNamingTheField() {
        // The README's "request format" shows volume 2.0; Apple takes 0…1.
        let e = refusal(#"{"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "sound": {"critical": 1, "name": "default", "volume": 2.0}}]}"#)
        #expect(e?.status == 400 && e?.message.hasPrefix("notifications[0].sound.volume: must be between 0 and 1") == true, "\(String(describing: e))")
    }

    @Test func readmeIOSData() throws {
        let push = try parse(#"{"notifications": [{"tokens": ["token_a", "token_b"], "platform": 1, "message": "Hello World iOS!", "data": {"key1": "welcome", "key2": 2}}]}"#)
        #expect(push.items[0].request.content.data == ["key1": "welcome", "key2": 2])
    }

    @Test func readmeProductionAndDevelopment() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 1, "production": true, "message": "Hello World iOS Production!"},
                               {"tokens": ["token_a", "token_b"], "platform": 1, "development": true, "message": "Hello World iOS Sandbox!"}]}
            """)
        #expect(push.items.map { $0.request.attributes["environment"] } == ["production", "sandbox"])
        #expect(push.counts == 4)
    }

    @Test func readmeLiveActivityStart() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["push_to_start_token"], "platform": 1, "push_type": "liveactivity",
              "topic": "com.example.app.push-type.liveactivity", "event": "start", "timestamp": 1685952000,
              "content-state": {"homeScore": 0, "awayScore": 0, "minute": 1, "period": "1H"},
              "attributes-type": "FootballMatchAttributes",
              "attributes": {"homeTeam": "Team 1", "awayTeam": "Team 2", "league": "Premier League"},
              "alert": {"title": "Team 1 vs Team 2", "body": "Kick-off! The match has started."}}]}
            """)
        let c = push.items[0].request.content
        #expect(c.title == "Team 1 vs Team 2" && c.body == "Kick-off! The match has started.")
        let apns = c.override("apns")
        #expect(apns["push_type"] == "liveactivity")
        let live = apns["live_activity"]?.objectValue
        #expect(live?["event"] == "start" && live?["timestamp"] == 1_685_952_000 && live?["attributes_type"] == "FootballMatchAttributes")
        #expect(live?["content_state"]?["period"] == "1H" && live?["attributes"]?["league"] == "Premier League")
    }

    @Test func readmeAndroidAnalyticsLabelNotificationPayloadAndData() throws {
        var push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 2, "message": "Hello World Android!", "title": "You got message",
              "fcm_options": {"analytics_label": "example"}}]}
            """)
        #expect(push.items[0].request.content.override("fcm")["fcm_options"]?["analytics_label"] == "example")
        push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 2, "message": "Hello World Android!", "title": "You got message",
              "notification": {"icon": "myicon", "color": "#112244"}}]}
            """)
        let android = push.items[0].request.content.override("fcm")["android"]
        #expect(android?["notification"]?["icon"] == "myicon" && android?["notification"]?["color"] == "#112244")
        push = try parse("""
            {"notifications": [{"tokens": ["token_a", "token_b"], "platform": 2, "message": "Hello World Android!", "title": "You got message",
              "data": {"Nick": "Mario", "body": "great match!", "Room": "PortugalVSDenmark"}}]}
            """)
        #expect(push.items[0].request.content.data == ["Nick": "Mario", "body": "great match!", "Room": "PortugalVSDenmark"])
        #expect(push.items[0].request.content.body == "Hello World Android!")
    }

    @Test func readmeAndroidTopicIsRefused() {
        let e = refusal(#"{"notifications": [{"topic": "highScores", "platform": 2, "message": "This is a Firebase Cloud Messaging Topic Message"}]}"#)
        #expect(e?.status == 400 && e?.message.hasPrefix("notifications[0].topic: FCM topic messages are not supported") == true, "\(String(describing: e))")
    }

    @Test func readmeHuaweiIsRefusedNamingThePlatform() {
        let e = refusal(#"{"notifications": [{"tokens": ["token_a", "token_b"], "platform": 3, "message": "Hello World Huawei!", "title": "You got message"}]}"#)
        #expect(e?.status == 400 && e?.message.hasPrefix("notifications[0].platform: 3 (Huawei) is not served") == true, "\(String(describing: e))")
    }

    // MARK: gorush's router tests

    @Test func missingNotificationsParameter() {
        // TestMissingNotificationsParameter posts no body at all.
        #expect(refusal("") == .missingNotifications)
        #expect(refusal("{}") == .missingNotifications)
        #expect(refusal(#"{"notifications": null}"#) == .missingNotifications)
        #expect(GorushError.missingNotifications.json == Array(#"{"code":400,"message":"Missing notifications field."}"#.utf8))
        #expect(refusal("not json")?.message.hasPrefix("Missing notifications field.") == true)
    }

    @Test func emptyNotifications() {
        #expect(refusal(#"{"notifications": []}"#) == .emptyNotifications)
        #expect(GorushError.emptyNotifications.json == Array(#"{"code":400,"message":"Notifications field is empty."}"#.utf8))
    }

    @Test func mutableContentAsANumberIsRefused() {
        // TestMutableContent: "json: cannot unmarshal number into … mutable_content of type bool".
        let e = refusal("""
            {"notifications": [{"tokens": ["aaaaa", "bbbbb"], "platform": 2, "message": "Welcome From API", "mutable_content": 1,
              "topic": "test", "badge": 1, "alert": {"title": "title", "body": "body"}}]}
            """)
        #expect(e?.status == 400 && e?.message.hasPrefix("notifications[0].mutable_content: expected true or false") == true, "\(String(describing: e))")
    }

    @Test func outOfRangeMaxNotifications() {
        var target = Self.target
        target.maxNotifications = 1
        let e = refusal("""
            {"notifications": [{"tokens": ["aaaaa", "bbbbb"], "platform": 2, "message": "Welcome API From Android"},
                               {"tokens": ["aaaaa", "bbbbb"], "platform": 2, "message": "Welcome API From Android"}]}
            """, target)
        #expect(e == GorushError(status: 400, "Number of notifications(2) over limit(1)"))
    }

    @Test func senMultipleNotificationsCountsEveryToken() throws {
        // TestSenMultipleNotifications: one iOS token and two Android ones count 3.
        let push = try parse("""
            {"notifications": [{"tokens": ["11aa01229f15f0f0c52029d8cf8cd0aeaf2365fe4cebc4af26cd6d76b7919ef7"], "platform": 1, "message": "Welcome iOS"},
                               {"tokens": ["android-token", "bbbbb"], "platform": 2, "message": "Welcome Android"}]}
            """)
        #expect(push.counts == 3)
        #expect(GorushPush.successJSON(counts: 3) == Array(#"{"success":"ok","counts":3,"logs":[]}"#.utf8))
    }

    // MARK: Herald's own rules

    @Test func unknownFieldsAreRefusedWithASuggestion() {
        let e = refusal(#"{"notifications": [{"tokens": ["a"], "platform": 1, "mesage": "x", "title": "t"}]}"#)
        #expect(e?.message.hasPrefix(#"notifications[0].mesage: unknown field; did you mean "message"?"#) == true, "\(String(describing: e))")
    }

    @Test func eachPlatformReadsItsOwnFieldsAndLeavesTheOthers() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "collapse_key": "k", "notification": {"icon": "i"}, "time_to_live": 10},
                               {"tokens": ["b"], "platform": 2, "message": "y", "badge": 3, "collapse_id": "c", "alert": {"title": "t"}}]}
            """)
        #expect(push.items[0].request.content.collapseKey == nil && push.items[0].request.content.expiration == nil)
        #expect(push.items[0].request.content.overrides.isEmpty)
        #expect(push.items[1].request.content.badge == nil && push.items[1].request.content.collapseKey == nil)
        #expect(push.items[1].request.content.title == nil)
    }

    @Test func iosFieldsGoToTheNeutralContentAndTheAPNsBlock() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["a"], "platform": 1, "title": "T", "message": "M", "priority": "normal", "content_available": true,
              "mutable_content": true, "collapse_id": "c1", "expiration": 1800000300, "push_type": "alert", "category": "cat",
              "thread-id": "th", "interruption_level": "time-sensitive", "relevance-score": 0.5, "badge": -1, "name": "ping.aiff",
              "alert": {"subtitle": "S", "loc-key": "K", "loc-args": ["1"], "title-loc-key": "TK", "launch-image": "l.png"}}]}
            """)
        let c = push.items[0].request.content
        #expect(c.title == "T" && c.body == "M" && c.subtitle == "S" && c.priority == .normal && c.contentAvailable)
        #expect(c.collapseKey == "c1" && c.expiration == 1_800_000_300 && c.category == "cat" && c.thread == "th")
        #expect(c.badge == nil, "a negative badge leaves the badge alone, as gorush does")
        #expect(c.sound == .named("ping.aiff"))
        #expect(c.localization == Localization(titleKey: "TK", bodyKey: "K", bodyArgs: ["1"]))
        #expect(c.override("apns") == ["mutable_content": true, "push_type": "alert", "interruption_level": "time-sensitive",
                                       "relevance_score": 0.5, "launch_image": "l.png"])
    }

    @Test func androidFieldsGoToTheNeutralContentAndTheFCMBlock() throws {
        let push = try parse("""
            {"notifications": [{"tokens": ["a"], "to": "b", "platform": 2, "priority": "high", "collapse_key": "score", "time_to_live": 600,
              "image": "https://example.com/i.png", "sound": "chime", "restricted_package_name": "com.example.app",
              "notification": {"title": "NT", "body": "NB", "tag": "t", "click_action": "OPEN", "channel_id": "news",
                               "body_loc_key": "BK", "body_loc_args": ["x"]},
              "android": {"direct_boot_ok": true}}]}
            """)
        let item = push.items[0]
        #expect(item.request.tokens == ["a", "b"] && item.targets == 2)
        let c = item.request.content
        #expect(c.title == "NT" && c.body == "NB" && c.priority == .high && c.collapseKey == "score")
        #expect(c.expiration == Int64(Self.now.timeIntervalSince1970) + 600)
        #expect(c.imageURL == "https://example.com/i.png" && c.sound == .named("chime"))
        #expect(c.localization == Localization(bodyKey: "BK", bodyArgs: ["x"]))
        #expect(c.override("fcm") == ["android": ["direct_boot_ok": true, "restricted_package_name": "com.example.app",
                                                  "notification": ["tag": "t", "click_action": "OPEN", "channel_id": "news"]]])
    }

    @Test func idempotencyKeysComeFromNotifIDOrApnsID() throws {
        var push = try parse(#"{"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "apns_id": "123E4567-E89B-12D3-A456-4266554400A0"}]}"#)
        #expect(push.items[0].request.idempotencyKey == "gorush:apns_id:123e4567-e89b-12d3-a456-4266554400a0")
        push = try parse(#"{"notifications": [{"tokens": ["a"], "platform": 2, "message": "x", "notif_id": "order-42"}]}"#)
        #expect(push.items[0].request.idempotencyKey == "gorush:2:order-42")
        // One notif_id for both platforms is two notifications; twice for one platform is refused.
        push = try parse("""
            {"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "notif_id": "n1"},
                               {"tokens": ["b"], "platform": 2, "message": "x", "notif_id": "n1"}]}
            """)
        #expect(push.items.map(\.request.idempotencyKey) == ["gorush:1:n1", "gorush:2:n1"])
        let twice = refusal("""
            {"notifications": [{"tokens": ["a"], "platform": 2, "message": "x", "notif_id": "n1"},
                               {"tokens": ["b"], "platform": 2, "message": "y", "notif_id": "n1"}]}
            """)
        #expect(twice?.message.hasPrefix("notifications[1].notif_id: repeats notifications[0]'s") == true, "\(String(describing: twice))")
        let e = refusal(#"{"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "apns_id": "not-a-uuid"}]}"#)
        #expect(e?.message.hasPrefix("notifications[0].apns_id: expected a canonical UUID") == true)
    }

    @Test func badValuesAreRefusedNamingTheirField() {
        let cases: [(String, String)] = [
            (#"{"notifications": [{"platform": 1, "message": "x"}]}"#, "notifications[0].tokens: please provide at least one device token"),
            (#"{"notifications": [{"tokens": [""], "platform": 1, "message": "x"}]}"#, "notifications[0].tokens[0]: the device token cannot be empty"),
            (#"{"notifications": [{"tokens": ["a"], "message": "x"}]}"#, "notifications[0].platform: is required"),
            (#"{"notifications": [{"tokens": ["a"], "platform": "1", "message": "x"}]}"#, "notifications[0].platform: expected a whole number"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 1, "priority": "urgent", "message": "x"}]}"#, "notifications[0].priority: expected \"normal\" or \"high\""),
            (#"{"notifications": [{"tokens": ["a"], "platform": 1, "topic": "com.other.app", "message": "x"}]}"#, "notifications[0].topic: app com.example.app sends with its topic"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 2, "condition": "'dogs' in topics", "message": "x"}]}"#, "notifications[0].condition: FCM condition messages are not supported"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 2, "dry_run": true, "message": "x"}]}"#, "notifications[0].dry_run: is not supported"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 1}]}"#, "notifications[0]: nothing to send"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "volume": 0.5}]}"#, "notifications[0].volume: a volume applies only to critical sounds"),
            (#"{"notifications": [{"tokens": ["a"], "platform": 1, "message": "x", "production": true, "development": true}]}"#, "notifications[0].development: give either"),
            (#"{"notifications": {"tokens": ["a"]}}"#, "notifications: expected an array"),
            (#"{"notifications": ["x"]}"#, "notifications[0]: expected an object"),
        ]
        for (body, prefix) in cases {
            let e = refusal(body)
            #expect(e?.status == 400 && e?.message.hasPrefix(prefix) == true, "\(body) → \(String(describing: e))")
        }
    }

    @Test func retryAndDelayWhileIdleAreAcceptedAndNotUsed() throws {
        let push = try parse(#"{"notifications": [{"tokens": ["a"], "platform": 2, "message": "x", "retry": 3, "delay_while_idle": true}]}"#)
        #expect(push.items[0].request.content == NotificationContent(body: "x"))
    }
}
