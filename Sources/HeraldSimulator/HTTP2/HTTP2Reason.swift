/// The `reason` strings the APNs HTTP/2 simulator answers with, each with Apple's status code.
///
/// Apple's table ("Handling notification responses from APNs", with the channel and broadcast
/// reasons of "Sending channel management requests to APNs"). Two reasons are the simulator's
/// own, for requests Apple documents no answer to: ``badLiveActivityPayload`` and
/// ``badMessageStoragePolicy``.
public enum APNsHTTP2Reason: String, CaseIterable, Sendable {
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case badTopic = "BadTopic"
    case deviceTokenNotForTopic = "DeviceTokenNotForTopic"
    case duplicateHeaders = "DuplicateHeaders"
    case idleTimeout = "IdleTimeout"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case topicDisallowed = "TopicDisallowed"
    case badCertificate = "BadCertificate"
    case badCertificateEnvironment = "BadCertificateEnvironment"
    case expiredProviderToken = "ExpiredProviderToken"
    case forbidden = "Forbidden"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    case unregistered = "Unregistered"
    case expiredToken = "ExpiredToken"
    case payloadTooLarge = "PayloadTooLarge"
    case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
    case tooManyRequests = "TooManyRequests"
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case shutdown = "Shutdown"
    // Channels and broadcasts (iOS 18).
    case missingChannelId = "MissingChannelId"
    case badChannelId = "BadChannelId"
    case channelNotRegistered = "ChannelNotRegistered"
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"
    case missingPushType = "MissingPushType"
    case featureNotEnabled = "FeatureNotEnabled"
    /// The simulator's own: a `liveactivity` payload that breaks Apple's payload rules
    /// (``LiveActivityPayloadRules``). APNs itself accepts it and the device discards it.
    case badLiveActivityPayload = "BadLiveActivityPayload"
    /// The simulator's own: a channel request whose `message-storage-policy` is not 0 or 1.
    case badMessageStoragePolicy = "BadMessageStoragePolicy"

    /// The HTTP status Apple sends with this reason.
    public var status: Int {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
             .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
             .missingTopic, .payloadEmpty, .topicDisallowed, .missingChannelId, .badChannelId, .cannotCreateChannelConfig,
             .missingPushType, .featureNotEnabled, .badLiveActivityPayload, .badMessageStoragePolicy:
            return 400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
             .missingProviderToken, .unrelatedKeyIdInToken:
            return 403
        case .badPath, .channelNotRegistered: return 404
        case .methodNotAllowed: return 405
        case .unregistered, .expiredToken: return 410
        case .payloadTooLarge: return 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: return 429
        case .internalServerError: return 500
        case .serviceUnavailable, .shutdown: return 503
        }
    }

    /// Dense index for counters.
    var index: Int { Self.allCases.firstIndex(of: self)! }
    static let indexed: [APNsHTTP2Reason] = allCases
}
