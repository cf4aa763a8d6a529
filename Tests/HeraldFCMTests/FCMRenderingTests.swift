import Foundation
import HeraldCore
import Testing
@testable import HeraldFCM

@Suite("FCM rendering")
struct FCMRenderingTests {
    let context = RenderContext(notificationID: "n-123", app: "com.example.app", topic: "com.example.app")

    func render(_ content: NotificationContent) throws(ContentProblem) -> JSONValue {
        let p = try FCMRenderer.render(content, context: context)
        return try! JSONValue.parse(p.body)
    }

    /// The request body for one device, parsed.
    func body(_ content: NotificationContent, token: String = registrationToken(), validateOnly: Bool = false, now: Date = Date(timeIntervalSince1970: 1_000)) throws -> JSONValue {
        let p = try FCMRenderer.render(content, context: context)
        return try JSONValue.parse(FCMBody.make(p, token: token, validateOnly: validateOnly, now: now))
    }

    @Test func neutralContentBecomesAV1Message() throws {
        var content = NotificationContent(title: "Hi", body: "there", imageURL: "https://x/i.png", badge: 3, sound: .named("ping.caf"),
                                          data: ["s": "text", "n": 12, "o": ["a": [1, true]]], category: "OPEN", collapseKey: "news",
                                          priority: .high)
        content.localization = Localization(titleKey: "T", bodyKey: "B", bodyArgs: ["x"])
        let m = try body(content)["message"]!
        #expect(m["token"]?.stringValue == registrationToken())
        #expect(m["notification"] == ["title": "Hi", "body": "there", "image": "https://x/i.png"])
        #expect(m["data"] == ["s": "text", "n": "12", "o": #"{"a":[1,true]}"#, "herald_id": "n-123"])
        #expect(m["android"]?["priority"] == "high")
        #expect(m["android"]?["collapse_key"] == "news")
        #expect(m["android"]?["notification"] == ["sound": "ping.caf", "click_action": "OPEN", "notification_count": 3,
                                                  "title_loc_key": "T", "body_loc_key": "B", "body_loc_args": ["x"]])
        #expect(m["android"]?["ttl"] == nil)
        for p in [NotificationPriority.normal, .low] {
            #expect(try render(NotificationContent(body: "x", priority: p))["android"]?["priority"] == "normal")
        }
    }

    @Test func contentAvailableIsDataOnly() throws {
        let m = try render(NotificationContent(title: "Hi", body: "there", data: ["k": "v"], contentAvailable: true))
        #expect(m["notification"] == nil)
        #expect(m["android"]?["notification"] == nil)
        #expect(m["data"] == ["k": "v", "title": "Hi", "body": "there", "herald_id": "n-123"])
    }

    @Test func theFCMBlockIsMergedOverTheNeutralFields() throws {
        let content = NotificationContent(title: "Hi", body: "there", priority: .normal, overrides: ["fcm": [
            "notification": ["title": "Hello"],
            "data": ["extra": 1],
            "android": ["priority": "HIGH", "ttl": "30s", "restrictedPackageName": "com.example.app", "direct_boot_ok": true,
                        "notification": ["channel_id": "news", "tag": "t1"]],
            "apns": ["payload": ["aps": ["badge": 1]]],
            "webpush": ["headers": ["Urgency": "high"]],
            "fcm_options": ["analytics_label": "campaign"],
        ]])
        let m = try body(content)["message"]!
        #expect(m["notification"] == ["title": "Hello", "body": "there"])
        #expect(m["data"]?["extra"] == "1")
        #expect(m["android"]?["priority"] == "high" && m["android"]?["ttl"] == "30s")
        #expect(m["android"]?["restricted_package_name"] == "com.example.app" && m["android"]?["direct_boot_ok"] == true)
        #expect(m["android"]?["notification"]?["channel_id"] == "news")
        #expect(m["apns"]?["payload"]?["aps"]?["badge"] == 1)
        #expect(m["webpush"]?["headers"]?["Urgency"] == "high")
        #expect(m["fcm_options"] == ["analytics_label": "campaign"])
    }

    @Test func theTTLIsTheTimeLeftWhenSent() throws {
        let content = NotificationContent(body: "x", expiration: 1_000 + 3_600)
        let early = try body(content, now: Date(timeIntervalSince1970: 1_000))["message"]!
        #expect(early["android"]?["ttl"] == "3600s")
        let late = try body(content, now: Date(timeIntervalSince1970: 4_000))["message"]!
        #expect(late["android"]?["ttl"] == "600s")
        let withPriority = try body(NotificationContent(body: "x", priority: .high, expiration: 0))["message"]!
        #expect(withPriority["android"] == ["priority": "high", "ttl": "0s"])
        let far = try body(NotificationContent(body: "x", expiration: 1_000 + 90 * 86_400))["message"]!
        #expect(far["android"]?["ttl"] == "2419200s")
        let validate = try body(NotificationContent(body: "x"), validateOnly: true)
        #expect(validate["validate_only"] == true && validate["message"]?["token"] != nil)
    }

    @Test func reservedKeysAndUnknownFieldsAreRefusedNamingTheField() {
        func problem(_ content: NotificationContent) -> ContentProblem? {
            do { _ = try FCMRenderer.render(content, context: context); return nil } catch { return error }
        }
        #expect(problem(NotificationContent(body: "x", data: ["from": "me"]))?.field == "data.from")
        #expect(problem(NotificationContent(body: "x", data: ["google.sent_time": "1"]))?.field == "data.google.sent_time")
        #expect(problem(NotificationContent(body: "x", data: ["gcmKey": "1"]))?.field == "data.gcmKey")
        #expect(problem(NotificationContent(body: "x", data: ["message_type": "1"]))?.field == "data.message_type")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["data": ["from": "x"]]]))?.field == "fcm.data.from")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["token": "x"]]))?.field == "fcm.token")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["android": ["colour": "red"]]]))?.field == "fcm.android.colour")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["android": ["notification": ["colour": "red"]]]]))?.field == "fcm.android.notification.colour")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["android": ["ttl": "1h"]]]))?.field == "fcm.android.ttl")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": ["android": ["priority": "urgent"]]]))?.field == "fcm.android.priority")
        #expect(problem(NotificationContent(body: "x", overrides: ["fcm": "nope"]))?.field == "fcm")
        #expect(problem(NotificationContent(body: "x", data: ["herald_id": "mine"]))?.field == "data.herald_id")
    }

    /// The limit counts the message without its token: 4096 bytes fit, 4097 do not.
    @Test func theLimitIs4096BytesAtTheByte() throws {
        let empty = try FCMRenderer.render(NotificationContent(data: ["k": ""]), context: context).body.count
        let fits = NotificationContent(data: ["k": .string(String(repeating: "x", count: 4096 - empty))])
        let rendered = try FCMRenderer.render(fits, context: context)
        #expect(rendered.body.count == 4096)
        do {
            _ = try FCMRenderer.render(NotificationContent(data: ["k": .string(String(repeating: "x", count: 4097 - empty))]), context: context)
            Issue.record("4097 bytes were accepted")
        } catch {
            #expect(error.field == "payload" && error.message.contains("4097 bytes") && error.message.contains("4096"))
        }
        // With an expiration, room for the ttl is kept.
        do {
            var c = fits
            c.expiration = 5_000
            _ = try FCMRenderer.render(c, context: context)
            Issue.record("no room was kept for the ttl")
        } catch {
            #expect(error.message.contains("ttl"))
        }
    }
}
