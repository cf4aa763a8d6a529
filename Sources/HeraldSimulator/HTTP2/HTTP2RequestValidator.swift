import FoundationEssentials
import HeraldAPNs
import HeraldCore

/// Which topics a connection may push to.
struct HTTP2TopicPolicy: Sendable {
    /// `apns-topic` must be present (token auth, or a certificate covering several topics).
    var required: Bool
    /// The bundle ids (and MDM topics) allowed; empty means any.
    var allowed: [[UInt8]]
    /// The bundle to use when `apns-topic` is absent and not required (a single-topic certificate).
    var defaultBundle: String?

    init(required: Bool, allowed: [String], defaultBundle: String? = nil) {
        self.required = required
        self.allowed = allowed.map { Array($0.utf8) }
        self.defaultBundle = defaultBundle
    }

    func allows(_ bundle: UnsafeRawBufferPointer) -> Bool {
        if allowed.isEmpty { return true }
        for a in allowed where a.count == bundle.count {
            if a.withUnsafeBytes({ memcmp($0.baseAddress!, bundle.baseAddress!, bundle.count) == 0 }) { return true }
        }
        return false
    }
}

/// The simulator's answer to one request.
struct HTTP2Verdict: Sendable {
    /// `nil` when the notification is accepted (200).
    var reason: APNsHTTP2Reason?
    /// For 410: the time APNs last confirmed the token invalid, in ms since 1970.
    var timestamp: Int64? = nil
    /// The device token's range in the request's storage (when the path held one).
    var token: Range<Int>? = nil
    /// The push type (from `apns-push-type`, else inferred from the topic's suffix, else `alert`).
    var pushType: PushType = .alert
    /// The topic, when `apns-topic` was absent and the certificate's single topic was used.
    var defaultTopic: String? = nil
    /// Whether the request's `apns-id` is a valid UUID and is echoed (on every answer).
    /// For a broadcast: its `apns-request-id`.
    var echoesAPNsID = false
    /// A broadcast (`/4/broadcasts/apps/…`): answered with `apns-request-id` instead of `apns-id`.
    var isBroadcast = false

    var status: Int { reason?.status ?? 200 }

    static func reject(_ reason: APNsHTTP2Reason) -> HTTP2Verdict { HTTP2Verdict(reason: reason) }
}

/// APNs' request rules as a pure function: request head (+ an authentication step) → verdict.
///
/// Checks, in this order (Apple documents the reasons, not their order; this order puts what
/// makes a request unroutable first and authentication before anything about its content):
/// 1. `:method` is `POST` — else 405 `MethodNotAllowed`.
/// 2. `:path` is `/3/device/<token>` — `/3/device/` alone → 400 `MissingDeviceToken`; any other
///    path → 404 `BadPath`.
/// 3. No APNs header (or `authorization`) repeated — else 400 `DuplicateHeaders`.
/// 4. Authentication (token rules, see ``HTTP2TokenAuthenticator``; nothing for certificates).
/// 5. `apns-id` is a canonical UUID — else 400 `BadMessageId`.
/// 6. `apns-push-type` is one of the 11 types — else 400 `InvalidPushType`.
/// 7. `apns-topic`: present when required — else 400 `MissingTopic`; well-formed and carrying
///    exactly the suffix the push type needs (`.voip`, `.complication`, …) — else 400 `BadTopic`;
///    a bundle this connection may push to — else 400 `TopicDisallowed`.
/// 8. `apns-priority` is 10, 5 or 1, and not 10 for `background` — else 400 `BadPriority`.
/// 9. `apns-expiration` is a non-negative whole number of seconds — else 400 `BadExpirationDate`.
/// 10. `apns-collapse-id` is at most 64 bytes — else 400 `BadCollapseId`.
/// 11. The token is hex, an even number of digits, 1–100 bytes — else 400 `BadDeviceToken`.
/// 12. The body is not empty — else 400 `PayloadEmpty`; at most 4096 bytes (5120 for `voip`) —
///     else 413 `PayloadTooLarge`.
/// 13. A `liveactivity` payload keeps Apple's rules (``LiveActivityPayloadRules``) — else 400
///     ``APNsHTTP2Reason/badLiveActivityPayload`` (the simulator's own reason).
struct HTTP2RequestValidator: Sendable {
    static let pathPrefix: StaticString = "/3/device/"
    static let maxCollapseIDBytes = 64
    static let maxTokenBytes = 100

    func validate(_ request: HTTP2RequestHead, topics: HTTP2TopicPolicy,
                  authenticate: (UnsafeRawBufferPointer?) -> APNsHTTP2Reason?) -> HTTP2Verdict {
        var verdict = check(request, topics: topics, authenticate: authenticate)
        // Apple answers with the request's apns-id whenever it is one, whatever the outcome.
        if let id = request.value(.apnsID), Self.isUUID(id) { verdict.echoesAPNsID = true }
        return verdict
    }

    private func check(_ request: HTTP2RequestHead, topics: HTTP2TopicPolicy,
                       authenticate: (UnsafeRawBufferPointer?) -> APNsHTTP2Reason?) -> HTTP2Verdict {
        let storage = UnsafeRawBufferPointer(request.storage)
        func value(_ k: HTTP2RequestHead.Known) -> UnsafeRawBufferPointer? { request.value(k) }
        // 1. Method.
        guard let method = value(.method), Self.equals(method, "POST") else { return .reject(.methodNotAllowed) }
        // 2. Path.
        guard let pathRange = request.valueRange(.path) else { return .reject(.badPath) }
        let prefix = Self.pathPrefix
        let path = UnsafeRawBufferPointer(rebasing: storage[pathRange])
        if Self.equals(path, "/3/device") { return .reject(.missingDeviceToken) }
        guard path.count >= prefix.utf8CodeUnitCount,
              memcmp(path.baseAddress!, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0 else { return .reject(.badPath) }
        let tokenRange = (pathRange.lowerBound + prefix.utf8CodeUnitCount)..<pathRange.upperBound
        if tokenRange.isEmpty { return .reject(.missingDeviceToken) }
        // 3. Duplicates.
        if request.duplicate != nil { return .reject(.duplicateHeaders) }
        // 4. Authentication.
        if let reason = authenticate(value(.authorization)) { return .reject(reason) }
        var verdict = HTTP2Verdict(reason: nil, token: tokenRange)
        // 5. apns-id.
        if let id = value(.apnsID), !Self.isUUID(id) { return .reject(.badMessageId) }
        // 6. Push type.
        var explicitType: PushType? = nil
        if let type = value(.apnsPushType) {
            guard let t = Self.pushType(type) else { return .reject(.invalidPushType) }
            explicitType = t
        }
        // 7. Topic.
        let topic = value(.apnsTopic)
        if let topic, !topic.isEmpty {
            guard Self.isWellFormedTopic(topic) else { return .reject(.badTopic) }
            let suffixType = Self.suffixType(topic)
            let type = explicitType ?? suffixType ?? .alert
            verdict.pushType = type
            let bundle: UnsafeRawBufferPointer
            if type == .mdm {
                bundle = topic
            } else {
                let wanted = type.topicSuffix.utf8.count
                // The topic must carry this type's suffix and no other type's.
                guard suffixType == (wanted == 0 ? nil : type), topic.count > wanted else { return .reject(.badTopic) }
                bundle = UnsafeRawBufferPointer(rebasing: topic[0..<(topic.count - wanted)])
            }
            guard topics.allows(bundle) else { return .reject(.topicDisallowed) }
        } else {
            guard !topics.required, let bundle = topics.defaultBundle else { return .reject(.missingTopic) }
            let type = explicitType ?? .alert
            verdict.pushType = type
            verdict.defaultTopic = type == .mdm ? bundle : type.topic(forBundleID: bundle)
        }
        // 8. Priority.
        if let priority = value(.apnsPriority) {
            let p: Int
            if Self.equals(priority, "10") { p = 10 } else if Self.equals(priority, "5") { p = 5 }
            else if Self.equals(priority, "1") { p = 1 } else { return .reject(.badPriority) }
            if p == 10 && verdict.pushType == .background { return .reject(.badPriority) }
        }
        // 9. Expiration.
        if let expiration = value(.apnsExpiration) {
            guard Self.parseSeconds(expiration) != nil else { return .reject(.badExpirationDate) }
        }
        // 10. Collapse id.
        if let collapse = value(.apnsCollapseID), collapse.count > Self.maxCollapseIDBytes {
            return .reject(.badCollapseId)
        }
        // 11. Device token.
        let token = UnsafeRawBufferPointer(rebasing: storage[tokenRange])
        guard token.count % 2 == 0, token.count <= 2 * Self.maxTokenBytes, Self.isHex(token) else {
            return .reject(.badDeviceToken)
        }
        // 12. Payload.
        if request.bodyLength == 0 { return .reject(.payloadEmpty) }
        if request.bodyLength > verdict.pushType.maxPayloadBytes { return .reject(.payloadTooLarge) }
        // 13. Live Activity payload rules.
        if verdict.pushType == .liveactivity, LiveActivityPayloadRules.problem(request.body) != nil {
            return .reject(.badLiveActivityPayload)
        }
        return verdict
    }

    // MARK: Byte-level checks

    static func equals(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        bytes.count == literal.utf8CodeUnitCount && memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0
    }

    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x66)
    }

    static func isHex(_ bytes: UnsafeRawBufferPointer) -> Bool {
        for c in bytes where !isHexDigit(c) { return false }
        return true
    }

    /// A canonical UUID: 8-4-4-4-12 hex digits (either case).
    static func isUUID(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count == 36 else { return false }
        for i in 0..<36 {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if bytes[i] != UInt8(ascii: "-") { return false }
            } else if !isHexDigit(bytes[i]) {
                return false
            }
        }
        return true
    }

    /// Decimal seconds (digits only, at most 18 of them); `nil` otherwise.
    static func parseSeconds(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
        var n: Int64 = 0
        for c in bytes {
            guard c >= 0x30 && c <= 0x39 else { return nil }
            n = n * 10 + Int64(c - 0x30)
        }
        return n
    }

    /// Letters, digits, `.`, `-` and `_`, not starting or ending with a dot, at most 255 bytes.
    static func isWellFormedTopic(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= 255, bytes.first != UInt8(ascii: "."), bytes.last != UInt8(ascii: ".") else { return false }
        for c in bytes {
            let l = c | 0x20
            if (l >= 0x61 && l <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: ".") || c == UInt8(ascii: "-")
                || c == UInt8(ascii: "_") { continue }
            return false
        }
        return true
    }

    /// The push type whose suffix ends `topic`, if any (dispatching on the last byte).
    static func suffixType(_ topic: UnsafeRawBufferPointer) -> PushType? {
        guard let last = topic.last else { return nil }
        func ends(_ suffix: StaticString) -> Bool {
            let n = suffix.utf8CodeUnitCount
            return topic.count > n && memcmp(topic.baseAddress! + (topic.count - n), suffix.utf8Start, n) == 0
        }
        switch last {
        case UInt8(ascii: "p"): return ends(".voip") ? .voip : nil
        case UInt8(ascii: "n"): return ends(".complication") ? .complication : nil
        case UInt8(ascii: "r"): return ends(".pushkit.fileprovider") ? .fileprovider : nil
        case UInt8(ascii: "y"):
            if ends(".location-query") { return .location }
            return ends(".push-type.liveactivity") ? .liveactivity : nil
        case UInt8(ascii: "t"): return ends(".voip-ptt") ? .pushtotalk : nil
        case UInt8(ascii: "s"):
            if ends(".push-type.widgets") { return .widgets }
            return ends(".push-type.controls") ? .controls : nil
        default: return nil
        }
    }

    /// The push type named exactly (lower case) by `bytes`.
    static func pushType(_ bytes: UnsafeRawBufferPointer) -> PushType? {
        switch bytes.count {
        case 3: return equals(bytes, "mdm") ? .mdm : nil
        case 4: return equals(bytes, "voip") ? .voip : nil
        case 5: return equals(bytes, "alert") ? .alert : nil
        case 7: return equals(bytes, "widgets") ? .widgets : nil
        case 8:
            if equals(bytes, "location") { return .location }
            return equals(bytes, "controls") ? .controls : nil
        case 10:
            if equals(bytes, "background") { return .background }
            return equals(bytes, "pushtotalk") ? .pushtotalk : nil
        case 12:
            if equals(bytes, "complication") { return .complication }
            if equals(bytes, "fileprovider") { return .fileprovider }
            return equals(bytes, "liveactivity") ? .liveactivity : nil
        default: return nil
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
