import HeraldAPNs
import HeraldCore
import Testing
@testable import HeraldSimulator

/// The request rules as a pure function: every rule, with Apple's status and reason.
@Suite("HTTP/2 request validator")
struct HTTP2ValidatorTests {
    static let token = String(repeating: "ab", count: 32)
    static let tokenPolicy = HTTP2TopicPolicy(required: true, allowed: ["com.example.app"])
    /// A payload that keeps Apple's Live Activity rules.
    static let liveActivityUpdate = #"{"aps":{"event":"update","timestamp":1790000000,"content-state":{"score":1}}}"#

    /// Validates a request made of `headers` (a valid alert by default) with no authentication step.
    func check(method: String = "POST", path: String = "/3/device/\(token)", _ headers: [(String, String)] = [("apns-topic", "com.example.app")],
               body: String = #"{"aps":{"alert":"hi"}}"#, topics: HTTP2TopicPolicy = tokenPolicy,
               auth: APNsHTTP2Reason? = nil) -> HTTP2Verdict {
        let request = HTTP2RequestHead(method: method, path: path, headers: headers, body: body)
        return HTTP2RequestValidator().validate(request, topics: topics) { _ in auth }
    }

    func reason(method: String = "POST", path: String = "/3/device/\(token)", _ headers: [(String, String)] = [("apns-topic", "com.example.app")],
                body: String = #"{"aps":{"alert":"hi"}}"#, topics: HTTP2TopicPolicy = tokenPolicy) -> String? {
        check(method: method, path: path, headers, body: body, topics: topics).reason?.rawValue
    }

    @Test func acceptsAValidAlert() {
        let v = check()
        #expect(v.reason == nil)
        #expect(v.status == 200)
        #expect(v.pushType == .alert)
    }

    @Test func methodMustBePOST() {
        let v = check(method: "GET")
        #expect(v.reason == .methodNotAllowed)
        #expect(v.status == 405)
        #expect(reason(method: "PUT") == "MethodNotAllowed")
        // The method is checked first.
        #expect(reason(method: "GET", path: "/nowhere") == "MethodNotAllowed")
    }

    @Test func pathMustBeTheDeviceEndpoint() {
        let v = check(path: "/3/devices/\(Self.token)")
        #expect(v.reason == .badPath)
        #expect(v.status == 404)
        #expect(reason(path: "/4/device/\(Self.token)") == "BadPath")
        #expect(reason(path: "/") == "BadPath")
        #expect(reason(path: "/3/device/") == "MissingDeviceToken")
        #expect(reason(path: "/3/device") == "MissingDeviceToken")
        #expect(check(path: "/3/device/").status == 400)
    }

    @Test func deviceTokenMustBeHex() {
        #expect(reason(path: "/3/device/zz\(Self.token.dropFirst(2))") == "BadDeviceToken")
        #expect(reason(path: "/3/device/abc") == "BadDeviceToken")                       // odd length
        #expect(reason(path: "/3/device/" + String(repeating: "ab", count: 101)) == "BadDeviceToken")  // > 100 bytes
        #expect(reason(path: "/3/device/\(Self.token)?x=1") == "BadDeviceToken")
        #expect(reason(path: "/3/device/" + String(repeating: "AB", count: 32)) == nil)  // either case
        #expect(reason(path: "/3/device/" + String(repeating: "ab", count: 80)) == nil)  // Live Activity tokens are longer
        #expect(check(path: "/3/device/abc").status == 400)
    }

    @Test func apnsIDMustBeACanonicalUUID() {
        let good = "123e4567-e89b-12d3-a456-426655440000"
        let accepted = check([("apns-topic", "com.example.app"), ("apns-id", good)])
        #expect(accepted.reason == nil)
        #expect(accepted.echoesAPNsID)
        #expect(reason([("apns-topic", "com.example.app"), ("apns-id", good.uppercased())]) == nil)
        for bad in ["not-a-uuid", "123e4567e89b12d3a456426655440000", "123e4567-e89b-12d3-a456-42665544000g", ""] {
            let v = check([("apns-topic", "com.example.app"), ("apns-id", bad)])
            #expect(v.reason == .badMessageId, "\(bad)")
            #expect(!v.echoesAPNsID)
        }
        // A valid apns-id is echoed even when the request fails for another reason.
        let failed = check(method: "GET", [("apns-id", good)])
        #expect(failed.reason == .methodNotAllowed)
        #expect(failed.echoesAPNsID)
    }

    @Test(arguments: PushType.allCases)
    func everyPushTypeWithItsTopic(type: PushType) {
        let topic = type == .mdm ? "com.example.app" : type.topic(forBundleID: "com.example.app")
        let priority = type == .background ? "5" : "10"
        let body = type == .voip ? String(repeating: "x", count: 5000) : type == .liveactivity ? Self.liveActivityUpdate : #"{"aps":{}}"#
        let v = check([("apns-topic", topic), ("apns-push-type", type.rawValue), ("apns-priority", priority)], body: body)
        #expect(v.reason == nil, "\(type) on \(topic)")
        #expect(v.pushType == type)
    }

    @Test func pushTypeMustBeKnown() {
        for bad in ["Alert", "banana", "", "voip "] {
            #expect(reason([("apns-topic", "com.example.app"), ("apns-push-type", bad)]) == "InvalidPushType", "\(bad)")
        }
        #expect(check([("apns-topic", "com.example.app"), ("apns-push-type", "x")]).status == 400)
    }

    @Test(arguments: [
        (PushType.voip, ".voip"), (.complication, ".complication"), (.fileprovider, ".pushkit.fileprovider"),
        (.location, ".location-query"), (.liveactivity, ".push-type.liveactivity"), (.pushtotalk, ".voip-ptt"),
        (.widgets, ".push-type.widgets"), (.controls, ".push-type.controls"),
    ])
    func topicSuffixRules(type: PushType, suffix: String) {
        let body = type == .liveactivity ? Self.liveActivityUpdate : #"{"aps":{"alert":"hi"}}"#
        func reason(_ headers: [(String, String)]) -> String? { self.reason(headers, body: body) }
        func check(_ headers: [(String, String)]) -> HTTP2Verdict { self.check(headers, body: body) }
        // The bundle alone is a bad topic for this type…
        #expect(reason([("apns-topic", "com.example.app"), ("apns-push-type", type.rawValue)]) == "BadTopic")
        // …and the suffixed topic is bad for an alert…
        #expect(reason([("apns-topic", "com.example.app" + suffix), ("apns-push-type", "alert")]) == "BadTopic")
        // …and right for the type.
        #expect(reason([("apns-topic", "com.example.app" + suffix), ("apns-push-type", type.rawValue)]) == nil)
        // Without apns-push-type the suffix decides the type.
        #expect(check([("apns-topic", "com.example.app" + suffix)]).pushType == type)
        // Another type's suffix is bad.
        let other = type == .voip ? ".complication" : ".voip"
        #expect(reason([("apns-topic", "com.example.app" + other), ("apns-push-type", type.rawValue)]) == "BadTopic")
    }

    @Test func topicRules() {
        #expect(reason([]) == "MissingTopic")
        #expect(reason([("apns-topic", "")]) == "MissingTopic")
        #expect(check([]).status == 400)
        #expect(reason([("apns-topic", "com.example app")]) == "BadTopic")
        #expect(reason([("apns-topic", ".com.example.app")]) == "BadTopic")
        #expect(reason([("apns-topic", "com.example.app.voip"), ("apns-push-type", "alert")]) == "BadTopic")
        #expect(reason([("apns-topic", "com.other.app")]) == "TopicDisallowed")
        #expect(reason([("apns-topic", "com.other.app.voip")]) == "TopicDisallowed")
        #expect(check([("apns-topic", "com.other.app")]).status == 400)
        // No configured topics: any bundle.
        let any = HTTP2TopicPolicy(required: true, allowed: [])
        #expect(reason([("apns-topic", "com.other.app")], topics: any) == nil)
    }

    @Test func certificateTopicDefaults() {
        // A certificate for one topic: apns-topic may be omitted.
        let single = HTTP2TopicPolicy(required: false, allowed: ["com.example.app"], defaultBundle: "com.example.app")
        let v = check([], topics: single)
        #expect(v.reason == nil)
        #expect(v.defaultTopic == "com.example.app")
        let voip = check([("apns-push-type", "voip")], topics: single)
        #expect(voip.reason == nil)
        #expect(voip.defaultTopic == "com.example.app.voip")
        // A certificate covering several topics: apns-topic is required.
        let multi = HTTP2TopicPolicy(required: true, allowed: ["com.example.app"])
        #expect(reason([], topics: multi) == "MissingTopic")
    }

    @Test func priorityRules() {
        for p in ["10", "5", "1"] { #expect(reason([("apns-topic", "com.example.app"), ("apns-priority", p)]) == nil, "\(p)") }
        for p in ["3", "0", "high", "", "10 ", "05"] {
            #expect(reason([("apns-topic", "com.example.app"), ("apns-priority", p)]) == "BadPriority", "\(p)")
        }
        // Background pushes must not use 10.
        #expect(reason([("apns-topic", "com.example.app"), ("apns-push-type", "background"), ("apns-priority", "10")]) == "BadPriority")
        #expect(reason([("apns-topic", "com.example.app"), ("apns-push-type", "background"), ("apns-priority", "5")]) == nil)
        #expect(reason([("apns-topic", "com.example.app"), ("apns-push-type", "background")]) == nil)
        #expect(check([("apns-topic", "com.example.app"), ("apns-priority", "7")]).status == 400)
    }

    @Test func expirationRules() {
        for e in ["0", "1767225600", "4102444800"] {
            #expect(reason([("apns-topic", "com.example.app"), ("apns-expiration", e)]) == nil, "\(e)")
        }
        for e in ["-1", "soon", "", "1.5", "99999999999999999999"] {
            #expect(reason([("apns-topic", "com.example.app"), ("apns-expiration", e)]) == "BadExpirationDate", "\(e)")
        }
        #expect(check([("apns-topic", "com.example.app"), ("apns-expiration", "x")]).status == 400)
    }

    @Test func collapseIDIsAtMost64Bytes() {
        #expect(reason([("apns-topic", "com.example.app"), ("apns-collapse-id", String(repeating: "c", count: 64))]) == nil)
        #expect(reason([("apns-topic", "com.example.app"), ("apns-collapse-id", String(repeating: "c", count: 65))]) == "BadCollapseId")
        // Bytes, not characters: 33 × "é" is 66 bytes.
        #expect(reason([("apns-topic", "com.example.app"), ("apns-collapse-id", String(repeating: "é", count: 33))]) == "BadCollapseId")
        #expect(check([("apns-topic", "com.example.app"), ("apns-collapse-id", String(repeating: "c", count: 65))]).status == 400)
    }

    @Test func repeatedHeadersAreRefused() {
        #expect(reason([("apns-topic", "com.example.app"), ("apns-topic", "com.example.app")]) == "DuplicateHeaders")
        #expect(reason([("apns-topic", "com.example.app"), ("apns-priority", "10"), ("apns-priority", "5")]) == "DuplicateHeaders")
        #expect(reason([("apns-topic", "com.example.app"), ("authorization", "bearer a"), ("authorization", "bearer b")]) == "DuplicateHeaders")
        #expect(check([("apns-topic", "com.example.app"), ("apns-id", "x"), ("apns-id", "y")]).status == 400)
        // Headers APNs does not define may repeat.
        #expect(reason([("apns-topic", "com.example.app"), ("x-custom", "1"), ("x-custom", "2")]) == nil)
    }

    @Test func payloadRules() {
        #expect(reason(body: "") == "PayloadEmpty")
        #expect(check(body: "").status == 400)
        #expect(reason(body: String(repeating: "x", count: 4096)) == nil)
        let tooLarge = check(body: String(repeating: "x", count: 4097))
        #expect(tooLarge.reason == .payloadTooLarge)
        #expect(tooLarge.status == 413)
        let voip = [("apns-topic", "com.example.app.voip"), ("apns-push-type", "voip")]
        #expect(reason(voip, body: String(repeating: "x", count: 5120)) == nil)
        #expect(reason(voip, body: String(repeating: "x", count: 5121)) == "PayloadTooLarge")
        #expect(reason(voip, body: String(repeating: "x", count: 20000)) == "PayloadTooLarge")
    }

    @Test func authenticationComesAfterRoutingAndBeforeContent() {
        let request = HTTP2RequestHead(path: "/3/device/\(Self.token)",
                                       headers: [("authorization", "bearer abc"), ("apns-priority", "99")], body: "")
        var seen: String? = nil
        let v = HTTP2RequestValidator().validate(request, topics: Self.tokenPolicy) { header in
            seen = header.map { String(decoding: $0, as: UTF8.self) }
            return .invalidProviderToken
        }
        #expect(seen == "bearer abc")
        #expect(v.reason == .invalidProviderToken)
        #expect(v.status == 403)
        #expect(check(method: "GET", auth: .missingProviderToken).reason == .methodNotAllowed)
        #expect(check(auth: .expiredProviderToken).reason == .expiredProviderToken)
    }

    @Test func reasonsCarryApplesStatusCodes() {
        #expect(APNsHTTP2Reason.unregistered.status == 410)
        #expect(APNsHTTP2Reason.tooManyProviderTokenUpdates.status == 429)
        #expect(APNsHTTP2Reason.tooManyRequests.status == 429)
        #expect(APNsHTTP2Reason.internalServerError.status == 500)
        #expect(APNsHTTP2Reason.serviceUnavailable.status == 503)
        #expect(APNsHTTP2Reason.missingProviderToken.status == 403)
    }
}
