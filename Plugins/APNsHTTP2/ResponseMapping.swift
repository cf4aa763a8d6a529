import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// What an APNs answer means for the delivery, from Apple's status codes and reasons (``APNsErrorReason``).
///
/// Pure: unit-tested directly against Apple's table (the README's "Apple's answers become outcomes", under `apns-http2`).
enum ResponseMapping {
    /// The outcome of a request that got an HTTP answer.
    /// - Parameters:
    ///   - body: the JSON error body (`{"reason":…, "timestamp":…}`), empty on 200.
    ///   - apnsID: the `apns-id` of the request (APNs echoes it).
    static func outcome(status: Int, body: [UInt8], apnsID: String?, retryAfter: TimeInterval? = nil) -> Mapped {
        if status == 200 { return .outcome(.delivered(receipt: apnsID)) }
        let parsed = try? JSONValue.parse(Data(body))
        let raw = parsed?["reason"]?.stringValue
        let reason = raw.map(APNsErrorReason.init(rawValue:))
        let text = raw ?? "HTTP \(status)"
        let timestamp = parsed?["timestamp"]?.doubleValue.map { Date(timeIntervalSince1970: $0 / 1000) }
        switch (status, reason) {
        case (410, _):
            // Unregistered, ExpiredToken: the token is dead since Apple's timestamp.
            return .outcome(.tokenInvalid(since: timestamp, reason: text))
        case (400, .badDeviceToken?), (400, .deviceTokenNotForTopic?):
            return .outcome(.tokenInvalid(since: nil, reason: text))
        case (403, .expiredProviderToken?):
            return .refreshProviderToken(reason: text)
        case (403, let r?) where credentialHint(r) != nil:
            // The transport's credentials are wrong: not the notification's fault, and retrying
            // will not help until the configuration is fixed.
            return .outcome(.setupFailure(reason: "\(text): \(credentialHint(r)!)"))
        case (429, _):
            // TooManyRequests; TooManyProviderTokenUpdates: our token cache refreshed too often,
            // and the next attempt uses the settled token.
            return .outcome(.retry(after: retryAfter, reason: text))
        case (400, .idleTimeout?):
            return .outcome(.retry(after: nil, reason: text))
        case (500..., _):
            // InternalServerError, ServiceUnavailable, Shutdown, and unknown 5xx.
            return .outcome(.retry(after: retryAfter, reason: text))
        default:
            // PayloadTooLarge, BadTopic, TopicDisallowed, Forbidden, BadPriority, …, and unknown
            // reasons verbatim: the notification as sent will never be accepted.
            return .outcome(.rejected(reason: text))
        }
    }

    enum Mapped: Equatable {
        case outcome(DeliveryOutcome)
        /// 403 ExpiredProviderToken: refresh the JWT once and resend.
        case refreshProviderToken(reason: String)
    }

    /// What to check for a 403 about the transport's credentials; `nil` for other reasons.
    static func credentialHint(_ reason: APNsErrorReason) -> String? {
        switch reason {
        case .invalidProviderToken: "APNs refused the provider token; check keyId, teamId and keyFile"
        case .missingProviderToken: "no provider token or client certificate was accepted; check the transport's credentials"
        case .badCertificate: "APNs refused the client certificate"
        case .badCertificateEnvironment: "the certificate is for the other APNs environment; check environment"
        case .unrelatedKeyIdInToken: "the key id does not match the key first used on this connection"
        case .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken: "the key does not match the APNs environment; check environment and keyId"
        default: nil
        }
    }
}
