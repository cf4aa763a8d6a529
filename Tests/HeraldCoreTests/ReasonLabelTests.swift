import HeraldCore
import Testing

/// ``DeliveryMetrics/reasonLabel(_:)``: the `reason` label is the reason's first word (letters,
/// digits, `_`, at most 40), the same on its ASCII fast path as through Unicode properties.
@Suite struct ReasonLabelTests {
    @Test func theLabelIsTheFirstWord() {
        #expect(DeliveryMetrics.reasonLabel(nil) == "")
        #expect(DeliveryMetrics.reasonLabel("") == "")
        #expect(DeliveryMetrics.reasonLabel("BadDeviceToken") == "BadDeviceToken")
        #expect(DeliveryMetrics.reasonLabel("written to the device’s stream as event 2") == "written")
        #expect(DeliveryMetrics.reasonLabel("UNREGISTERED: the token is gone") == "UNREGISTERED")
        #expect(DeliveryMetrics.reasonLabel("too_many_requests 429") == "too_many_requests")
        #expect(DeliveryMetrics.reasonLabel(" leading space") == "")
        #expect(DeliveryMetrics.reasonLabel(String(repeating: "a", count: 50)) == String(repeating: "a", count: 40))
        // Non-ASCII letters in the first word count as letters, as Character.isLetter says.
        #expect(DeliveryMetrics.reasonLabel("Zustellung_verzögert: später") == "Zustellung_verzögert")
        #expect(DeliveryMetrics.reasonLabel("e\u{301}chec") == "e\u{301}chec")
        #expect(DeliveryMetrics.reasonLabel("\r\nx") == "")
    }
}
