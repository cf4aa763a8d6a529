@testable import HeraldHTTP2
import Testing

/// A header list shared by many requests is checked once, and only a list that passed is
/// remembered: a bad list fails every request that carries it.
@Suite struct SharedHeadersTests {
    @Test func aListThatPassedIsNotScannedAgainAndABadOneAlwaysFails() {
        var shared = SharedHeaders()
        let good = [HTTP2Header("apns-topic", "com.example.app"), HTTP2Header("apns-push-type", "alert")]
        let bad = [HTTP2Header("apns-collapse-id", "a\r\nx-evil: 1")]
        #expect(shared.problem(good) == nil && shared.isChecked(good))
        let copy = good  // the same storage
        #expect(shared.isChecked(copy))
        var changed = good
        changed[0] = HTTP2Header("apns-topic", "com.example.app\r\nx-evil: 1")  // copied on write: new storage
        #expect(!shared.isChecked(changed))
        #expect(shared.problem(changed) == "header apns-topic: its value contains CR (0x0D) (RFC 9113 §8.2.1)")
        for _ in 0..<2 { #expect(shared.problem(bad) == "header apns-collapse-id: its value contains CR (0x0D) (RFC 9113 §8.2.1)") }
        #expect(shared.isChecked(good) && !shared.isChecked(bad))
        // An equal list in other storage is checked on its own.
        let equal = [HTTP2Header("apns-topic", "com.example.app"), HTTP2Header("apns-push-type", "alert")]
        #expect(!shared.isChecked(equal) && shared.problem(equal) == nil && shared.isChecked(equal))
    }

    @Test func fieldRulesOfRFC9113() {
        #expect(HTTP2FieldCheck.problem(HTTP2Header(lowercased: "X-Up", "1"))?.contains("upper-case") == true)
        #expect(HTTP2FieldCheck.problem(HTTP2Header("te", "trailers")) == nil)
        #expect(HTTP2FieldCheck.problem(HTTP2Header("te", "gzip"))?.contains("connection-specific") == true)
        #expect(HTTP2FieldCheck.problem(HTTP2Header("x-ok", "tab\tinside and ünïcode")) == nil)
        #expect(HTTP2FieldCheck.problem(HTTP2Header("x-end", "value\t"))?.contains("ends with whitespace") == true)
        #expect(HTTP2FieldCheck.problem(HTTP2Request(method: "PO ST", path: "/", headers: [], body: .empty)) == "the method is not an HTTP token")
        #expect(HTTP2FieldCheck.problem(HTTP2Request(path: "relative", headers: [], body: .empty)) == ":path: must start with \"/\"")
        #expect(HTTP2FieldCheck.problem(HTTP2Request(path: "/a b", headers: [], body: .empty)) == ":path: contains a space")
    }
}
