import Foundation
import HeraldCore
import HeraldCrypto
import HeraldWebPush
import Testing

/// Subscriptions as device addresses: what is accepted, the stored form, and each refusal
/// naming its field.
@Suite struct SubscriptionTests {
    func problem(_ c: WebPushConfiguration, _ input: DeviceAddressInput) -> AddressProblem? {
        do { _ = try c.address(input, attributes: DeviceAttributes()); return nil } catch { return error }
    }

    @Test func aBrowsersSubscriptionIsStoredWholeAsCanonicalJSON() throws {
        let c = try configuration()
        let address = try c.address(.subscription(subscriptionJSON()), attributes: DeviceAttributes())
        let parsed = try JSONValue.parse(address.token)
        #expect(parsed["endpoint"]?.stringValue == "https://fcm.googleapis.com/fcm/send/abc")
        #expect(parsed["expirationTime"] == nil)
        #expect(address.token.hasPrefix(#"{"endpoint":"https://fcm.googleapis.com/fcm/send/abc","keys":{"auth":"#))
        #expect(address.attributes.isEmpty)
        // The same subscription spelled with padding and standard base64 is the same device; so is its stored text.
        let s = subscriptionJSON()
        let p = s["keys"]!["p256dh"]!.stringValue!, a = s["keys"]!["auth"]!.stringValue!
        let std = { (t: String) in String(t.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 }) + String(repeating: "=", count: (4 - t.count % 4) % 4) }
        let again = try c.address(.subscription(subscriptionJSON(p256dh: std(p), auth: std(a))), attributes: DeviceAttributes())
        #expect(again.token == address.token)
        #expect(try c.address(.token(address.token), attributes: DeviceAttributes()).token == address.token)
    }

    @Test func eachBadPartIsRefusedNamingItsField() throws {
        let c = try configuration()
        #expect(problem(c, .subscription(subscriptionJSON(endpoint: "http://fcm.googleapis.com/fcm/send/abc")))?.field == "subscription.endpoint")
        #expect(problem(c, .subscription(subscriptionJSON(endpoint: "http://fcm.googleapis.com/x")))?.message.contains("https") == true)
        let short = Base64URL.encode([UInt8](repeating: 4, count: 33))
        let p = problem(c, .subscription(subscriptionJSON(p256dh: short)))
        #expect(p?.field == "subscription.keys.p256dh" && p?.message.contains("33 bytes") == true, "\(String(describing: p))")
        // 65 bytes starting 0x04 but not on the curve.
        let offCurve = Base64URL.encode([4] + [UInt8](repeating: 1, count: 64))
        let q = problem(c, .subscription(subscriptionJSON(p256dh: offCurve)))
        #expect(q?.field == "subscription.keys.p256dh" && q?.message.contains("not a point on the P-256 curve") == true, "\(String(describing: q))")
        let r = problem(c, .subscription(subscriptionJSON(auth: Base64URL.encode([UInt8](repeating: 7, count: 15)))))
        #expect(r?.field == "subscription.keys.auth" && r?.message.contains("15 bytes") == true)
        #expect(problem(c, .subscription(subscriptionJSON(auth: "not base64!")))?.field == "subscription.keys.auth")
        var extra = subscriptionJSON().objectValue!
        extra["endpointURL"] = .string("x")
        #expect(problem(c, .subscription(.object(extra)))?.field == "subscription.endpointURL")
        var noKeys = subscriptionJSON().objectValue!
        noKeys["keys"] = nil
        #expect(problem(c, .subscription(.object(noKeys)))?.field == "subscription.keys")
        #expect(problem(c, .token("0123abcd"))?.field == "token")
        #expect(problem(c, .subscription(.string("x")))?.field == "subscription")
    }

    @Test func theAllowListRefusesHostsOutsideItAndLoopbackUnlessListed() throws {
        let browsers = try configuration()
        for endpoint in ["https://fcm.googleapis.com/fcm/send/a", "https://updates.push.services.mozilla.com/wpush/v2/a",
                         "https://wns2-par02p.notify.windows.com/w/?token=a", "https://web.push.apple.com/a", "https://api.push.apple.com/a"] {
            #expect(problem(browsers, .subscription(subscriptionJSON(endpoint: endpoint))) == nil, "\(endpoint)")
        }
        for endpoint in ["https://evil.example.com/a", "https://fcm.googleapis.com.evil.example/a", "https://127.0.0.1:8443/push/a",
                         "https://localhost/a", "https://[::1]:8443/a", "https://notify.windows.com.evil/a"] {
            let p = problem(browsers, .subscription(subscriptionJSON(endpoint: endpoint)))
            #expect(p?.field == "subscription.endpoint" && p?.message.contains("allowedEndpoints") == true, "\(endpoint): \(String(describing: p))")
        }
        // A wildcard admits names, never loopback or IP literals.
        let any = try configuration(allowed: ["*"])
        #expect(problem(any, .subscription(subscriptionJSON(endpoint: "https://push.example.org/a"))) == nil)
        #expect(problem(any, .subscription(subscriptionJSON(endpoint: "https://127.0.0.1:8443/a")))?.field == "subscription.endpoint")
        #expect(problem(any, .subscription(subscriptionJSON(endpoint: "https://localhost:8443/a")))?.field == "subscription.endpoint")
        // Listed loopback is allowed, on any port or on the one listed.
        let local = try configuration(allowed: ["127.0.0.1", "localhost:9443"])
        #expect(problem(local, .subscription(subscriptionJSON(endpoint: "https://127.0.0.1:8443/push/a"))) == nil)
        #expect(problem(local, .subscription(subscriptionJSON(endpoint: "https://localhost:9443/a"))) == nil)
        #expect(problem(local, .subscription(subscriptionJSON(endpoint: "https://localhost:9444/a")))?.field == "subscription.endpoint")
        #expect(problem(local, .subscription(subscriptionJSON(endpoint: "https://127.0.0.2/a")))?.field == "subscription.endpoint")
    }
}
