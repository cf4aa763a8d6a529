import Foundation
import HeraldCore
import HeraldWebPush
import Testing

/// `Topic` and `Urgency` are headers: a value that could break the request is refused naming
/// its field, and what is sent is always a valid RFC 8030 header.
@Suite struct WebPushHeaderValueTests {
    let context = RenderContext(notificationID: "n-1", app: "com.example.web", topic: "com.example.web")

    func problem(_ content: NotificationContent) -> ContentProblem? {
        do throws(ContentProblem) {
            _ = try WebPushRendering.render(content, context: context, defaultTTL: 600)
            return nil
        } catch {
            return error
        }
    }

    @Test func topicAndUrgencyWithControlCharactersAreRefusedNamingTheField() {
        for (value, name) in [("news\r\nx-evil: 1", "CR"), ("news\nx", "LF"), ("news\u{0}", "NUL"), ("a\u{1B}b", "U+001B")] {
            #expect(problem(NotificationContent(body: "x", overrides: ["webpush": ["topic": .string(value)]]))?.description
                    == "webpush.topic: contains a control character (\(name))")
            #expect(problem(NotificationContent(body: "x", overrides: ["webpush": ["urgency": .string("high" + value)]]))?.field == "webpush.urgency")
            // Content an earlier version stored, never checked at accept time.
            #expect(problem(NotificationContent(body: "x", collapseKey: value))?.description == "collapse_key: contains a control character (\(name))")
        }
    }

    @Test func theTopicSentIsAlwaysAtMost32Base64URLCharacters() throws {
        for key in ["news", "a-b_C9", String(repeating: "x", count: 32), String(repeating: "x", count: 33), "room:!abc:example.org", "ünï code"] {
            for content in [NotificationContent(body: "x", collapseKey: key), NotificationContent(body: "x", overrides: ["webpush": ["topic": .string(key)]])] {
                let topic = try #require(try WebPushRendering.render(content, context: context, defaultTTL: 600).headers["topic"])
                #expect((1...WebPushRendering.maxTopicLength).contains(topic.utf8.count), "\(key) → \(topic)")
                #expect(topic.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F },
                        "\(key) → \(topic)")
            }
        }
    }
}
