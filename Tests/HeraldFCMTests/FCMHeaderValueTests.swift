import Foundation
import HeraldCore
import Testing
@testable import HeraldFCM

/// What FCM sends on as headers (`fcm.apns.headers`, `fcm.webpush.headers`) and its token are
/// refused, naming the field, when they could break a request: never stripped, never sent.
@Suite("FCM header values")
struct FCMHeaderValueTests {
    let context = RenderContext(notificationID: "n-1", app: "com.example.app", topic: "com.example.app")

    func problem(_ block: JSONValue) -> ContentProblem? {
        do throws(ContentProblem) {
            _ = try FCMRenderer.render(NotificationContent(body: "x", overrides: ["fcm": block]), context: context)
            return nil
        } catch {
            return error
        }
    }

    @Test func headersFCMPassesOnAreCheckedNamingTheField() {
        for (value, name) in [("a\r\nx-evil: 1", "CR"), ("a\nb", "LF"), ("a\u{0}b", "NUL"), ("a\u{1B}b", "U+001B")] {
            #expect(problem(["apns": ["headers": ["apns-collapse-id": .string(value)]]])?.description
                    == "fcm.apns.headers.apns-collapse-id: contains a control character (\(name))")
            #expect(problem(["webpush": ["headers": ["Topic": .string(value)]]])?.description
                    == "fcm.webpush.headers.Topic: contains a control character (\(name))")
        }
        #expect(problem(["apns": ["headers": ["apns-collapse-id": .string(String(repeating: "c", count: 65))]]])?.description
                == "fcm.apns.headers.apns-collapse-id: must be at most 64 bytes (APNs's limit), found 65")
        #expect(problem(["apns": ["headers": ["apns-collapse-id": .string(String(repeating: "c", count: 64))]]]) == nil)
        #expect(problem(["apns": ["headers": ["x evil": "1"]]])?.field == "fcm.apns.headers")
        #expect(problem(["apns": ["headers": ["x-evil\r\n": "1"]]])?.field == "fcm.apns.headers")
        #expect(problem(["apns": ["headers": ["apns-priority": 5]]])?.field == "fcm.apns.headers.apns-priority")
        #expect(problem(["webpush": ["headers": "TTL: 5"]])?.field == "fcm.webpush.headers")
        #expect(problem(["apns": ["headers": ["apns-priority": "5", "apns-collapse-id": "news"]], "webpush": ["headers": ["Urgency": "high"]]]) == nil)
    }

    @Test func tokensWithControlCharactersAreNoAddress() throws {
        let good = registrationToken()
        #expect(try FCMAddress.registrationToken(.token(good)) == good)
        for bad in [good + "\r\nx", good + "\u{0}", String(good.dropLast()) + "\n"] {
            #expect(throws: AddressProblem.self) { try FCMAddress.registrationToken(.token(bad)) }
            do { _ = try FCMAddress.registrationToken(.token(bad)) } catch { #expect(error.field == "token") }
        }
    }
}
