/// The `reason` of an APNs HTTP/2 error answer (`{"reason": "BadDeviceToken"}`), typed, with
/// the raw string kept for reasons Apple adds later (``unknown(_:)``).
///
/// Apple's table: "Handling notification responses from APNs" (status codes 400, 403, 404, 405,
/// 410, 413, 429, 500, 503), with the reasons of the iOS 18 channel management API and
/// broadcasts (``missingChannelId`` … ``featureNotEnabled``). Modelled on APNSwift's
/// `APNSError.ErrorReason`.
public enum APNsErrorReason: Sendable, Hashable, CustomStringConvertible {
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken
    case missingProviderToken, unrelatedKeyIdInToken, badEnvironmentKeyIdInToken, badEnvironmentKeyInToken
    case badPath, methodNotAllowed, expiredToken, unregistered, payloadTooLarge
    case tooManyProviderTokenUpdates, tooManyRequests, internalServerError, serviceUnavailable, shutdown
    /// Channels and broadcasts: no `apns-channel-id`; a malformed one; a channel APNs does not
    /// hold; the channel limit (10,000 per environment) reached; no push type; broadcast not
    /// enabled for the app.
    case missingChannelId, badChannelId, channelNotRegistered, cannotCreateChannelConfig, missingPushType, featureNotEnabled
    /// A reason this list does not know, verbatim.
    case unknown(String)

    /// Every reason Apple documents (not ``unknown(_:)``).
    public static let known: [APNsErrorReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed,
        .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
        .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken,
        .badPath, .methodNotAllowed, .expiredToken, .unregistered, .payloadTooLarge,
        .tooManyProviderTokenUpdates, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
        .missingChannelId, .badChannelId, .channelNotRegistered, .cannotCreateChannelConfig, .missingPushType, .featureNotEnabled,
    ]

    private static let byRawValue: [String: APNsErrorReason] = Dictionary(uniqueKeysWithValues: known.map { ($0.rawValue, $0) })

    /// The reason Apple's string names, or ``unknown(_:)`` with it.
    public init(rawValue: String) {
        self = Self.byRawValue[rawValue] ?? .unknown(rawValue)
    }

    /// Apple's string, such as `BadDeviceToken`.
    public var rawValue: String {
        switch self {
        case .badCollapseId: "BadCollapseId"
        case .badDeviceToken: "BadDeviceToken"
        case .badExpirationDate: "BadExpirationDate"
        case .badMessageId: "BadMessageId"
        case .badPriority: "BadPriority"
        case .badTopic: "BadTopic"
        case .deviceTokenNotForTopic: "DeviceTokenNotForTopic"
        case .duplicateHeaders: "DuplicateHeaders"
        case .idleTimeout: "IdleTimeout"
        case .invalidPushType: "InvalidPushType"
        case .missingDeviceToken: "MissingDeviceToken"
        case .missingTopic: "MissingTopic"
        case .payloadEmpty: "PayloadEmpty"
        case .topicDisallowed: "TopicDisallowed"
        case .badCertificate: "BadCertificate"
        case .badCertificateEnvironment: "BadCertificateEnvironment"
        case .expiredProviderToken: "ExpiredProviderToken"
        case .forbidden: "Forbidden"
        case .invalidProviderToken: "InvalidProviderToken"
        case .missingProviderToken: "MissingProviderToken"
        case .unrelatedKeyIdInToken: "UnrelatedKeyIdInToken"
        case .badEnvironmentKeyIdInToken: "BadEnvironmentKeyIdInToken"
        case .badEnvironmentKeyInToken: "BadEnvironmentKeyInToken"
        case .badPath: "BadPath"
        case .methodNotAllowed: "MethodNotAllowed"
        case .expiredToken: "ExpiredToken"
        case .unregistered: "Unregistered"
        case .payloadTooLarge: "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: "TooManyProviderTokenUpdates"
        case .tooManyRequests: "TooManyRequests"
        case .internalServerError: "InternalServerError"
        case .serviceUnavailable: "ServiceUnavailable"
        case .shutdown: "Shutdown"
        case .missingChannelId: "MissingChannelId"
        case .badChannelId: "BadChannelId"
        case .channelNotRegistered: "ChannelNotRegistered"
        case .cannotCreateChannelConfig: "CannotCreateChannelConfig"
        case .missingPushType: "MissingPushType"
        case .featureNotEnabled: "FeatureNotEnabled"
        case .unknown(let raw): raw
        }
    }

    public var description: String { rawValue }
}
