import Foundation
import HeraldAPNs
import HeraldCore
import Testing

/// Values that become a platform request's headers are refused, naming the field, when they
/// carry a control character (or are longer than the platform takes): never stripped, never sent.
@Suite struct HeaderValueTests {
    func issues(_ text: String) -> [JSONIssue] {
        do { _ = try NotificationRequest.fromAPI(try JSONValue.parse(text)); return [] } catch let e as RequestIssues { return e.issues } catch {
            return [JSONIssue(path: "?", message: "\(error)")]
        }
    }

    func apnsProblem(_ content: NotificationContent, topic: String = "com.example.app") -> ContentProblem? {
        do throws(ContentProblem) {
            _ = try APNsRoute.render(content, context: RenderContext(notificationID: "n", app: "a", topic: topic))
            return nil
        } catch {
            return error
        }
    }

    /// A JSON string literal holding `value` (control characters as JSON escapes).
    func json(_ value: String) -> String {
        var w = JSONWriter()
        w.object { $0.string("v", value) }
        return String(w.string.dropFirst(5).dropLast())
    }

    static let breaking: [(String, String)] = [("a\r\nx-evil: 1", "CR"), ("a\nx-evil: 1", "LF"), ("a\u{0}b", "NUL"),
                                              ("a\u{1B}[31m", "U+001B"), ("a\tb", "TAB"), ("a\u{7F}", "DEL"), ("a\u{85}b", "U+0085")]

    @Test func theNeutralCollapseKeyIsRefusedAtAcceptTimeNamingTheField() {
        for (value, name) in Self.breaking {
            let found = issues(#"{"app":"a","users":["u"],"body":"x","collapse_key":\#(json(value))}"#)
            #expect(found.map(\.path) == ["collapse_key"], "\(name): \(found)")
            #expect(found.first?.message == "contains a control character (\(name))", "\(found)")
        }
        #expect(issues(#"{"app":"a","users":["u"],"body":"x","collapse_key":"room-1 news"}"#).isEmpty)
        #expect(FieldLimits.headerValueProblem("ünïcode ok") == nil)
    }

    @Test func apnsCollapseIDIsRefusedInTheBlockAndFromStoredContent() throws {
        for (value, name) in Self.breaking {
            var content = NotificationContent(body: "x")
            content.overrides["apns"] = .object(["collapse_id": .string(value)])
            let problem = try #require(apnsProblem(content), "\(name) passed")
            #expect(problem.description == "apns.collapse_id: contains a control character (\(name))")
            // Content stored by an earlier version never went through the accept-time check.
            let stored = NotificationContent(body: "x", collapseKey: value)
            #expect(apnsProblem(stored)?.description == "collapse_key: contains a control character (\(name))")
        }
        var long = NotificationContent(body: "x")
        long.overrides["apns"] = .object(["collapse_id": .string(String(repeating: "c", count: 65))])
        #expect(apnsProblem(long)?.field == "apns.collapse_id")
        #expect(apnsProblem(NotificationContent(body: "x", collapseKey: String(repeating: "c", count: 65)))?.field == "collapse_key")
        var fits = NotificationContent(body: "x", collapseKey: String(repeating: "c", count: 64))
        #expect(apnsProblem(fits) == nil)
        fits.overrides["apns"] = .object(["collapse_id": .string(String(repeating: "é", count: 32))])
        #expect(apnsProblem(fits) == nil)
        #expect(apnsProblem(NotificationContent(body: "x"), topic: "com.example\r\nx-evil: 1")?.field == "topic")
    }

    @Test func anAppTopicThatCannotBeAHeaderIsAConfigurationError() throws {
        let found = errors(#"{"transports":{"dry":{"type":"log"}},"apps":{"com.example.app":{"routes":["dry"],"topic":"com.example\r\nx-evil: 1"}}}"#)
        #expect(found.count == 1 && found[0].hasPrefix(#"apps["com.example.app"].topic: "#) && found[0].contains("control character (CR)"), "\(found)")
        #expect(errors(minimal).isEmpty)
    }
}
