import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldHTTP2

/// How APNs keeps a broadcast channel's messages for devices that are offline (`message-storage-policy`).
public enum APNsChannelStoragePolicy: Int, Sendable, CaseIterable {
    /// 0: no message is stored (right for frequent updates such as a score).
    case noMessageStored = 0
    /// 1: the most recent message is stored and delivered when the device is back.
    case mostRecentMessageStored = 1
}

/// A broadcast channel as APNs describes it.
public struct APNsChannel: Sendable, Equatable {
    /// The `apns-channel-id` (base64).
    public var id: String
    /// Its storage policy.
    public var storagePolicy: APNsChannelStoragePolicy

    /// A channel id and its policy.
    public init(id: String, storagePolicy: APNsChannelStoragePolicy) {
        self.id = id
        self.storagePolicy = storagePolicy
    }
}

/// What APNs answered to a broadcast it accepted.
public struct APNsBroadcastReceipt: Sendable, Equatable {
    /// `apns-request-id` as APNs answered it (the request's own: Herald sends one).
    public var requestID: String?
    /// `apns-unique-id` (development environment only): look the broadcast up in Apple's
    /// Push Notifications Console.
    public var uniqueID: String?
}

/// Why a channel request or a broadcast failed.
public enum APNsChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    /// APNs answered with an error status; `reason` is Apple's (``APNsErrorReason/unknown(_:)`` keeps new ones).
    case refused(status: Int, reason: APNsErrorReason?, requestID: String?)
    /// No answer (connection lost, deadline passed); trying again later may work.
    case noAnswer(String)
    /// The transport cannot make the request: credentials, HTTP/2, or not started.
    case setup(String)
    /// APNs answered success without what the API promises (such as no `apns-channel-id` on 201).
    case malformedAnswer(String)

    /// Whether trying again later may work (no answer, 429, 5xx).
    public var isTemporary: Bool {
        switch self {
        case .noAnswer: true
        case .refused(let status, _, _): status == 429 || status >= 500
        case .setup, .malformedAnswer: false
        }
    }

    /// What the failure means for the notification a broadcast carried, in the core's one
    /// vocabulary: no answer, 429 and 5xx are retried; a channel APNs no longer holds
    /// (`ChannelNotRegistered`, `BadChannelId`) is the broadcast's ``DeliveryOutcome/tokenInvalid(since:reason:)``
    /// (its address is dead); refused credentials or a feature not enabled are setup failures; anything else is rejected.
    public var outcome: DeliveryOutcome {
        switch self {
        case .noAnswer(let why): return .retry(after: nil, reason: why)
        case .setup(let why): return .setupFailure(reason: why)
        case .malformedAnswer: return .retry(after: nil, reason: description)
        case .refused(let status, let reason, _):
            let text = reason?.rawValue ?? "HTTP \(status)"
            if status == 429 || status >= 500 { return .retry(after: nil, reason: text) }
            switch reason {
            case .channelNotRegistered?, .badChannelId?: return .tokenInvalid(since: nil, reason: text)
            case .featureNotEnabled?: return .setupFailure(reason: "\(text): enable the Broadcast capability of the App ID")
            case let r? where status == 403:
                return .setupFailure(reason: ResponseMapping.credentialHint(r).map { "\(text): \($0)" } ?? text)
            default: return .rejected(reason: text)
            }
        }
    }

    public var description: String {
        switch self {
        case .refused(let status, let reason, _): "APNs answered \(status)\(reason.map { " \($0.rawValue)" } ?? "")"
        case .noAnswer(let why): "no answer from APNs: \(why)"
        case .setup(let why): why
        case .malformedAnswer(let why): "unexpected answer from APNs: \(why)"
        }
    }
}

/// The iOS 18 broadcast API of one `apns-http2` transport: channel management on Apple's
/// management host (``APNsHTTP2Configuration/managementEndpoint``) and broadcast sends on the
/// provider host, with the transport's own authentication (the same provider token or client
/// certificate).
///
/// Apple's API ("Sending channel management requests to APNs", "Sending broadcast push
/// notification requests to APNs"):
/// - create: `POST /1/apps/{bundle}/channels` `{"message-storage-policy": 0|1, "push-type": "LiveActivity"}` → 201, `apns-channel-id`;
/// - read: `GET /1/apps/{bundle}/channels` with `apns-channel-id` → 200 and the settings;
/// - delete: `DELETE /1/apps/{bundle}/channels` with `apns-channel-id` → 204;
/// - list: `GET /1/apps/{bundle}/all-channels` → 200 `{"channels": [...]}`;
/// - broadcast: `POST /4/broadcasts/apps/{bundle}` with `apns-channel-id`, `apns-push-type: liveactivity`,
///   `apns-priority`, `apns-expiration` (and an optional `apns-request-id`) → 200.
public final class APNsChannelClient: Sendable {
    private let management: HTTP2Client
    private let provider: HTTP2Client

    init(management: HTTP2Client, provider: HTTP2Client) {
        self.management = management
        self.provider = provider
    }

    /// Creates a channel for `bundleID`.
    public func create(bundleID: String, storagePolicy: APNsChannelStoragePolicy) async -> Result<APNsChannel, APNsChannelError> {
        let body: JSONValue = ["message-storage-policy": .number(Double(storagePolicy.rawValue)), "push-type": "LiveActivity"]
        let request = HTTP2Request(method: "POST", path: Self.channelsPath(bundleID),
                                   headers: [HTTP2Header("content-type", "application/json")],
                                   ownHeaders: [Self.requestID()], body: HTTP2Body(Array(body.jsonString.utf8)))
        switch await answer(management, request, bundleID: bundleID, expecting: [201, 200]) {
        case .failure(let e): return .failure(e)
        case .success(let response):
            guard let id = response.header("apns-channel-id"), !id.isEmpty else {
                return .failure(.malformedAnswer("no apns-channel-id in the answer to a channel creation"))
            }
            return .success(APNsChannel(id: id, storagePolicy: storagePolicy))
        }
    }

    /// Reads a channel's settings.
    public func read(bundleID: String, channelID: String) async -> Result<APNsChannel, APNsChannelError> {
        let request = HTTP2Request(method: "GET", path: Self.channelsPath(bundleID), headers: [],
                                   ownHeaders: [HTTP2Header("apns-channel-id", channelID), Self.requestID()], body: .empty)
        switch await answer(management, request, bundleID: bundleID, expecting: [200]) {
        case .failure(let e): return .failure(e)
        case .success(let response):
            let json = try? JSONValue.parse(response.body)
            guard let raw = json?["message-storage-policy"]?.intValue, let policy = APNsChannelStoragePolicy(rawValue: raw) else {
                return .failure(.malformedAnswer("no message-storage-policy 0 or 1 in a channel's settings"))
            }
            return .success(APNsChannel(id: channelID, storagePolicy: policy))
        }
    }

    /// Deletes a channel.
    public func delete(bundleID: String, channelID: String) async -> Result<Void, APNsChannelError> {
        let request = HTTP2Request(method: "DELETE", path: Self.channelsPath(bundleID), headers: [],
                                   ownHeaders: [HTTP2Header("apns-channel-id", channelID), Self.requestID()], body: .empty)
        return await answer(management, request, bundleID: bundleID, expecting: [204, 200]).map { _ in () }
    }

    /// The ids of every channel APNs holds for `bundleID` in this environment.
    public func list(bundleID: String) async -> Result<[String], APNsChannelError> {
        let request = HTTP2Request(method: "GET", path: "/1/apps/\(bundleID)/all-channels", headers: [],
                                   ownHeaders: [Self.requestID()], body: .empty)
        switch await answer(management, request, bundleID: bundleID, expecting: [200]) {
        case .failure(let e): return .failure(e)
        case .success(let response):
            guard let items = (try? JSONValue.parse(response.body))?["channels"]?.arrayValue else {
                return .failure(.malformedAnswer("no \"channels\" array in the list of channels"))
            }
            return .success(items.compactMap(\.stringValue))
        }
    }

    /// Sends one Live Activity payload to every device subscribed to the channel.
    /// - Parameters:
    ///   - priority: 10 (immediate), 5 or 1.
    ///   - expiration: seconds since 1970 until which APNs may store it (with a storing channel); `nil` sends none.
    public func broadcast(bundleID: String, channelID: String, payload: [UInt8], priority: Int,
                          expiration: Int64? = nil) async -> Result<APNsBroadcastReceipt, APNsChannelError> {
        var headers = [HTTP2Header("apns-push-type", "liveactivity"), HTTP2Header("apns-channel-id", channelID),
                       HTTP2Header("apns-priority", String(priority))]
        if let expiration { headers.append(HTTP2Header("apns-expiration", String(expiration))) }
        let id = Self.requestID()
        let request = HTTP2Request(method: "POST", path: "/4/broadcasts/apps/\(bundleID)", headers: headers,
                                   ownHeaders: [id], body: HTTP2Body(payload))
        return await answer(provider, request, bundleID: bundleID, expecting: [200]).map { response in
            APNsBroadcastReceipt(requestID: response.header("apns-request-id"), uniqueID: response.header("apns-unique-id"))
        }
    }

    private static func channelsPath(_ bundleID: String) -> String { "/1/apps/\(bundleID)/channels" }
    private static func requestID() -> HTTP2Header { HTTP2Header("apns-request-id", UUID().uuidString.lowercased()) }

    /// Whether `bundleID` can go into a path: letters, digits, `.`, `-` and `_`, 1–155 bytes.
    static func isBundleID(_ bundleID: String) -> Bool {
        !bundleID.isEmpty && bundleID.utf8.count <= 155 && bundleID.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || c == 0x2E || c == 0x2D || c == 0x5F
        }
    }

    /// Whether `channelID` has the form of Apple's channel ids (base64, at most 88 characters).
    static func isChannelID(_ channelID: String) -> Bool {
        !channelID.isEmpty && channelID.utf8.count <= 88 && channelID.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || c == 0x2B || c == 0x2F || c == 0x3D
        }
    }

    private func answer(_ client: HTTP2Client, _ request: HTTP2Request, bundleID: String, expecting: [Int]) async -> Result<HTTP2Response, APNsChannelError> {
        guard Self.isBundleID(bundleID) else {
            return .failure(.setup("bundle id: expected letters, digits, '.', '-' and '_'"))
        }
        if let channel = request.ownHeaders.first(where: { $0.name == "apns-channel-id" })?.value
            ?? request.headers.first(where: { $0.name == "apns-channel-id" })?.value, !Self.isChannelID(channel) {
            return .failure(.setup("channel id: expected Apple's base64 channel id"))
        }
        guard client.isRunning else { return .failure(.setup("the apns-http2 transport was not started")) }
        guard let result = await client.send([request]).first else { return .failure(.noAnswer("no result")) }
        switch result {
        case .answered(let response):
            if expecting.contains(response.status) { return .success(response) }
            let raw = (try? JSONValue.parse(response.body))?["reason"]?.stringValue
            return .failure(.refused(status: response.status, reason: raw.map(APNsErrorReason.init(rawValue:)),
                                     requestID: response.header("apns-request-id")))
        case .noAnswer(let reason):
            return .failure(.noAnswer(reason))
        case .failed(let error):
            return .failure(.setup(error.description))
        case .endedByHooks(let verdict):
            switch verdict as? DeliveryOutcome {
            case .setupFailure(let reason)?: return .failure(.setup(reason))
            case .retry(_, let reason)?: return .failure(.noAnswer(reason))
            default: return .failure(.noAnswer("the request ended without an answer"))
            }
        }
    }
}
