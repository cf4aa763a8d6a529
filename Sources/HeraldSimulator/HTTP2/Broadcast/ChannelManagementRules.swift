import FoundationEssentials
import HeraldCore

/// APNs' channel management API (iOS 18 broadcast channels) as a request → response function,
/// served on the simulator's management port.
///
/// From "Sending channel management requests to APNs":
/// - `POST /1/apps/{bundle}/channels` with `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`
///   → 201 and the new channel's `apns-channel-id`;
/// - `GET /1/apps/{bundle}/channels` with `apns-channel-id` → 200 and the channel's settings;
/// - `DELETE /1/apps/{bundle}/channels` with `apns-channel-id` → 204;
/// - `GET /1/apps/{bundle}/all-channels` → 200 and `{"channels": [...]}`.
///
/// Every answer carries `apns-request-id` (the request's when it is a UUID, else a new one).
/// Refusals: 405 `MethodNotAllowed`, 404 `BadPath`, 403 (provider token), 400 `TopicDisallowed`,
/// 400 `MissingPushType` / `InvalidPushType` / ``APNsHTTP2Reason/badMessageStoragePolicy``,
/// 400 `CannotCreateChannelConfig` past the store's limit, 400 `MissingChannelId` /
/// `BadChannelId`, and 404 `ChannelNotRegistered`.
struct ChannelManagementRules: Sendable {
    let store: APNsChannelStore
    /// Bundle ids providers may manage; empty means any.
    let bundles: [String]
    /// Checks `authorization` (token auth); `nil` with certificate auth (TLS checked the client).
    let authenticate: (@Sendable (String?) -> APNsHTTP2Reason?)?

    func respond(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let requestID = request.header("apns-request-id").flatMap { UUID(uuidString: $0) }.map { $0.uuidString.lowercased() }
            ?? UUID().uuidString.lowercased()
        func fail(_ reason: APNsHTTP2Reason) -> SimulatorHTTP2Response {
            .json(reason.status, #"{"reason":"\#(reason.rawValue)"}"#, headers: [SimulatorHTTP2Header("apns-request-id", requestID)])
        }
        let parts = request.pathWithoutQuery.split(separator: "/", omittingEmptySubsequences: false)
        // "", "1", "apps", bundle, "channels" | "all-channels"
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty,
              parts[4] == "channels" || parts[4] == "all-channels" else { return fail(.badPath) }
        let bundle = String(parts[3])
        let all = parts[4] == "all-channels"
        let allowed = all ? ["GET"] : ["POST", "GET", "DELETE"]
        guard allowed.contains(request.method) else { return fail(.methodNotAllowed) }
        if let authenticate, let reason = authenticate(request.header("authorization")) { return fail(reason) }
        guard bundles.isEmpty || bundles.contains(bundle) else { return fail(.topicDisallowed) }
        let idHeader = [SimulatorHTTP2Header("apns-request-id", requestID)]

        if all {
            let ids = store.channelIDs(bundle: bundle)
            return .json(200, JSONValue.object(["channels": .array(ids.map { .string($0) })]).jsonString, headers: idHeader)
        }
        if request.method == "POST" {
            guard let body = try? JSONValue.parse(request.body), body.objectValue != nil else { return fail(.badMessageStoragePolicy) }
            guard let type = body["push-type"] else { return fail(.missingPushType) }
            guard type.stringValue == "LiveActivity" else { return fail(.invalidPushType) }
            guard let policy = body["message-storage-policy"]?.intValue, policy == 0 || policy == 1 else {
                return fail(.badMessageStoragePolicy)
            }
            switch store.create(bundle: bundle, storagePolicy: policy) {
            case .success(let channel):
                return SimulatorHTTP2Response(status: 201, headers: idHeader + [SimulatorHTTP2Header("apns-channel-id", channel.id)])
            case .failure:
                return fail(.cannotCreateChannelConfig)
            }
        }
        guard let id = request.header("apns-channel-id") else { return fail(.missingChannelId) }
        guard APNsChannelStore.isWellFormedID(id) else { return fail(.badChannelId) }
        if request.method == "DELETE" {
            return store.delete(bundle: bundle, id: id) ? SimulatorHTTP2Response(status: 204, headers: idHeader) : fail(.channelNotRegistered)
        }
        guard let channel = store.channel(bundle: bundle, id: id) else { return fail(.channelNotRegistered) }
        let settings: JSONValue = ["message-storage-policy": .number(Double(channel.storagePolicy)), "push-type": "LiveActivity"]
        return .json(200, settings.jsonString, headers: idHeader + [SimulatorHTTP2Header("apns-channel-id", channel.id)])
    }
}
