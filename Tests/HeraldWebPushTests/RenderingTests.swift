import Foundation
import HeraldCore
import HeraldCrypto
import HeraldWebPush
import Testing

/// What the service worker receives and the RFC 8030 headers, decided at accept time.
@Suite struct RenderingTests {
    let context = RenderContext(notificationID: "n-1", app: "com.example.web", topic: "com.example.web")

    func render(_ content: NotificationContent) throws(ContentProblem) -> RenderedPayload {
        try WebPushRendering.render(content, context: context, defaultTTL: 600)
    }

    @Test func theServiceWorkerGetsOneDocumentWithTheNotificationID() throws {
        let content = NotificationContent(title: "Hi", body: "there", imageURL: "https://example.com/i.png", badge: 3,
                                          data: ["k": "v"], collapseKey: "news", priority: .high,
                                          overrides: ["webpush": ["icon": "https://example.com/icon.png", "title": "Hello", "urgency": "very-low"]])
        let p = try render(content)
        let json = try JSONValue.parse(p.body)
        #expect(json["id"]?.stringValue == "n-1" && json["app"]?.stringValue == "com.example.web")
        #expect(json["title"]?.stringValue == "Hello" && json["body"]?.stringValue == "there" && json["icon"]?.stringValue == "https://example.com/icon.png")
        #expect(json["image"]?.stringValue == "https://example.com/i.png" && json["badge"]?.intValue == 3 && json["tag"]?.stringValue == "news")
        #expect(json["data"]?["k"]?.stringValue == "v" && json["urgency"] == nil)
        #expect(p.headers["urgency"] == "very-low" && p.headers["topic"] == "news" && p.headers["ttl"] == "600")
        // created_at is added when sent, from the accept time.
        let sent = try JSONValue.parse(WebPushRendering.plaintext(p.body, createdAt: Date(timeIntervalSince1970: 1_767_225_600)))
        #expect(sent["created_at"]?.stringValue == "2026-01-01T00:00:00.000Z" && sent["id"]?.stringValue == "n-1")
    }

    @Test func urgencyFollowsPriorityTopicFitsAndTTLFollowsTheExpiration() throws {
        #expect(try render(NotificationContent(body: "x")).headers["urgency"] == "normal")
        #expect(try render(NotificationContent(body: "x", priority: .low)).headers["urgency"] == "low")
        #expect(try render(NotificationContent(body: "x", priority: .high)).headers["urgency"] == "high")
        let long = try render(NotificationContent(body: "x", collapseKey: "room:!abc:example.org/with spaces and more than 32 chars"))
        let topic = try #require(long.headers["topic"])
        #expect(topic.count == 32 && topic.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        #expect(WebPushRendering.topic(for: "room:!abc:example.org/with spaces and more than 32 chars") == topic)
        #expect(WebPushRendering.topic(for: "a-b_C9") == "a-b_C9")
        let now = Date(timeIntervalSince1970: 1_767_225_600)
        let expiring = try render(NotificationContent(body: "x", expiration: 1_767_225_600 + 90))
        #expect(expiring.headers["ttl"] == nil && WebPushRendering.ttl(expiring, now: now) == 90)
        #expect(WebPushRendering.ttl(try render(NotificationContent(body: "x", expiration: 0)), now: now) == 0)
        #expect(WebPushRendering.ttl(try render(NotificationContent(body: "x")), now: now) == 600)
        #expect(WebPushRendering.ttl(try render(NotificationContent(body: "x", overrides: ["webpush": ["ttl": 5]])), now: now) == 5)
    }

    @Test func theBlockIsCheckedAndThePlaintextLimitIsEnforcedAtAcceptTime() throws {
        for (block, field) in [(JSONValue.object(["urgency": "urgent"]), "webpush.urgency"), (["topic": 3], "webpush.topic"),
                               (["ttl": -1], "webpush.ttl"), (["id": "mine"], "webpush.id"), (["created_at": "x"], "webpush.created_at")] {
            #expect(throws: ContentProblem.self) { try render(NotificationContent(body: "x", overrides: ["webpush": block])) }
            do { _ = try render(NotificationContent(body: "x", overrides: ["webpush": block])) } catch { #expect(error.field == field) }
        }
        // The document (with room for created_at) must fit 3993 bytes.
        let overhead = try render(NotificationContent(body: "")).body.count + 40
        _ = try render(NotificationContent(body: String(repeating: "a", count: WebPushEncryption.maxPlaintextLength - overhead)))
        do {
            _ = try render(NotificationContent(body: String(repeating: "a", count: WebPushEncryption.maxPlaintextLength - overhead + 1)))
            Issue.record("a document over 3993 bytes was accepted")
        } catch {
            #expect(error.field == "payload" && error.message.contains("3993"))
        }
    }
}
