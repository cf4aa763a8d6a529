import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// APNs' broadcast send (iOS 18) as a pure check: `POST /4/broadcasts/apps/{bundle}` on the
/// provider port, from "Sending broadcast push notification requests to APNs".
///
/// Checks, in this order:
/// 1. `:method` is `POST` — else 405 `MethodNotAllowed`; the path names one bundle — else 404 `BadPath`.
/// 2. No APNs header repeated — else 400 `DuplicateHeaders`.
/// 3. Authentication (as for device sends).
/// 4. The bundle is one this connection may push to — else 400 `TopicDisallowed`.
/// 5. `apns-request-id`, when sent, is a canonical UUID — else 400 `BadMessageId`.
/// 6. `apns-push-type` is present — else 400 `MissingPushType`; and is `liveactivity` — else 400 `InvalidPushType`.
/// 7. `apns-channel-id` is present — else 400 `MissingChannelId`; well-formed — else 400 `BadChannelId`;
///    a channel of this bundle — else 404 `ChannelNotRegistered`.
/// 8. `apns-priority` is 10, 5 or 1 — else 400 `BadPriority`; `apns-expiration` whole seconds — else 400 `BadExpirationDate`.
/// 9. The body is not empty — else 400 `PayloadEmpty`; at most 5120 bytes — else 413 `PayloadTooLarge`;
///    a Live Activity update or end (``LiveActivityPayloadRules``) — else 400 ``APNsHTTP2Reason/badLiveActivityPayload``.
struct HTTP2BroadcastRules: Sendable {
    static let pathPrefix: StaticString = "/4/broadcasts/apps/"
    /// Apple: a broadcast payload may be 5 KB.
    static let maxPayloadBytes = 5120

    let store: APNsChannelStore

    /// Whether the request's path is a broadcast path (the `/4/` family).
    static func isBroadcast(_ request: HTTP2RequestHead) -> Bool {
        guard let path = request.value(.path) else { return false }
        let n = 3
        return path.count >= n && memcmp(path.baseAddress!, "/4/", n) == 0
    }

    func validate(_ request: HTTP2RequestHead, topics: HTTP2TopicPolicy,
                  authenticate: (UnsafeRawBufferPointer?) -> APNsHTTP2Reason?) -> HTTP2Verdict {
        var verdict = check(request, topics: topics, authenticate: authenticate)
        verdict.isBroadcast = true
        if let id = request.value(.apnsRequestID), HTTP2RequestValidator.isUUID(id) { verdict.echoesAPNsID = true }
        return verdict
    }

    private func check(_ request: HTTP2RequestHead, topics: HTTP2TopicPolicy,
                       authenticate: (UnsafeRawBufferPointer?) -> APNsHTTP2Reason?) -> HTTP2Verdict {
        guard let method = request.value(.method), HTTP2RequestValidator.equals(method, "POST") else { return .reject(.methodNotAllowed) }
        guard let path = request.string(.path) else { return .reject(.badPath) }
        let prefix = "/4/broadcasts/apps/"
        guard path.hasPrefix(prefix) else { return .reject(.badPath) }
        let bundle = String(path.dropFirst(prefix.count))
        guard !bundle.isEmpty, !bundle.contains("/"), !bundle.contains("?") else { return .reject(.badPath) }
        if request.duplicate != nil { return .reject(.duplicateHeaders) }
        if let reason = authenticate(request.value(.authorization)) { return .reject(reason) }
        let allowed = Array(bundle.utf8).withUnsafeBytes { topics.allows($0) }
        guard allowed else { return .reject(.topicDisallowed) }
        if let id = request.value(.apnsRequestID), !HTTP2RequestValidator.isUUID(id) { return .reject(.badMessageId) }
        guard let type = request.value(.apnsPushType) else { return .reject(.missingPushType) }
        guard HTTP2RequestValidator.equals(type, "liveactivity") else { return .reject(.invalidPushType) }
        guard let channel = request.string(.apnsChannelID) else { return .reject(.missingChannelId) }
        guard APNsChannelStore.isWellFormedID(channel) else { return .reject(.badChannelId) }
        guard store.channel(bundle: bundle, id: channel) != nil else { return .reject(.channelNotRegistered) }
        if let priority = request.value(.apnsPriority) {
            guard HTTP2RequestValidator.equals(priority, "10") || HTTP2RequestValidator.equals(priority, "5")
                || HTTP2RequestValidator.equals(priority, "1") else { return .reject(.badPriority) }
        }
        if let expiration = request.value(.apnsExpiration), HTTP2RequestValidator.parseSeconds(expiration) == nil {
            return .reject(.badExpirationDate)
        }
        if request.bodyLength == 0 { return .reject(.payloadEmpty) }
        if request.bodyLength > Self.maxPayloadBytes { return .reject(.payloadTooLarge) }
        if LiveActivityPayloadRules.problem(request.body, broadcast: true) != nil { return .reject(.badLiveActivityPayload) }
        var verdict = HTTP2Verdict(reason: nil)
        verdict.pushType = .liveactivity
        return verdict
    }

    /// The record of an accepted broadcast.
    func broadcast(_ request: HTTP2RequestHead, requestID: String, uniqueID: String?, time: Date) -> ReceivedBroadcast {
        let path = request.string(.path) ?? ""
        return ReceivedBroadcast(time: time, bundleID: String(path.dropFirst("/4/broadcasts/apps/".count)),
                                 channelID: request.string(.apnsChannelID) ?? "",
                                 priority: request.string(.apnsPriority).flatMap { Int($0) } ?? 10,
                                 expiration: request.string(.apnsExpiration).flatMap { Int64($0) },
                                 requestID: requestID, uniqueID: uniqueID, payload: Array(request.body))
    }
}
