import FoundationEssentials
import HeraldCore
@testable import HeraldGorush
import Testing

/// Values that become a platform's headers are refused with a 400 naming gorush's field.
@Suite struct GorushHeaderValueTests {
    static let target = GorushPushTests.target

    func refusal(_ body: String) -> GorushError? {
        do { _ = try GorushPush.parse(Array(body.utf8), for: Self.target); return nil } catch { return error }
    }

    @Test func aCollapseIDOrKeyThatWouldBreakAHeaderIsA400NamingIt() {
        for (escaped, name) in [(#"a\r\nx-evil: 1"#, "CR"), (#"a\napns-priority: 5"#, "LF"), (#"cut\u0000short"#, "NUL"), (#"a\u001b[0m"#, "U+001B")] {
            let ios = refusal(#"{"notifications": [{"tokens": ["t"], "platform": 1, "message": "m", "collapse_id": "\#(escaped)"}]}"#)
            #expect(ios == GorushError(status: 400, "notifications[0].collapse_id: contains a control character (\(name))"), "\(String(describing: ios))")
            let android = refusal(#"{"notifications": [{"tokens": ["t"], "platform": 2, "message": "ok"}, {"tokens": ["t"], "platform": 2, "message": "m", "collapse_key": "\#(escaped)"}]}"#)
            #expect(android == GorushError(status: 400, "notifications[1].collapse_key: contains a control character (\(name))"), "\(String(describing: android))")
        }
        #expect(refusal(#"{"notifications": [{"tokens": ["t"], "platform": 1, "message": "m", "collapse_id": "score"}]}"#) == nil)
        // Headers FCM sends on.
        let webpush = refusal(#"{"notifications": [{"tokens": ["t"], "platform": 2, "message": "m", "webpush": {"headers": {"Topic": "a\r\nx-evil: 1"}}}]}"#)
        #expect(webpush == GorushError(status: 400, "notifications[0].webpush.headers.Topic: contains a control character (CR)"), "\(String(describing: webpush))")
        let apns = refusal(#"{"notifications": [{"tokens": ["t"], "platform": 2, "message": "m", "apns": {"headers": {"apns-collapse-id": "a\u0000b"}}}]}"#)
        #expect(apns == GorushError(status: 400, "notifications[0].apns.headers.apns-collapse-id: contains a control character (NUL)"), "\(String(describing: apns))")
    }
}
