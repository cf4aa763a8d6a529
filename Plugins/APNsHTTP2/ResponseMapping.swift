import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// What an APNs answer means for the delivery, from Apple's status codes and reasons.
///
/// Pure: unit-tested directly against Apple's table (the README's "Apple's answers become outcomes", under `apns-http2`).
enum ResponseMapping {
    /// The outcome of a request that got an HTTP answer.
    /// - Parameters:
    ///   - body: the JSON error body (`{"reason":…, "timestamp":…}`), empty on 200.
    ///   - apnsID: the `apns-id` response header.
    static func outcome(status: Int, body: [UInt8], apnsID: String?, retryAfter: TimeInterval? = nil) -> Mapped {
        if status == 200 { return .outcome(.delivered(receipt: apnsID)) }
        let parsed = try? JSONValue.parse(Data(body))
        let reason = parsed?["reason"]?.stringValue ?? "HTTP \(status)"
        let timestamp = parsed?["timestamp"]?.doubleValue.map { Date(timeIntervalSince1970: $0 / 1000) }
        switch (status, reason) {
        case (410, _):
            // Unregistered, ExpiredToken: the token is dead since Apple's timestamp.
            return .outcome(.tokenInvalid(since: timestamp, reason: reason))
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
            return .outcome(.tokenInvalid(since: nil, reason: reason))
        case (403, "ExpiredProviderToken"):
            return .refreshProviderToken(reason: reason)
        case (403, "InvalidProviderToken"), (403, "MissingProviderToken"), (403, "BadCertificate"),
             (403, "BadCertificateEnvironment"), (403, "UnrelatedKeyIdInToken"), (403, "BadEnvironmentKeyIdInToken"),
             (403, "BadEnvironmentKeyInToken"):
            // The transport's credentials are wrong: not the notification's fault, and retrying
            // will not help until the configuration is fixed.
            return .outcome(.setupFailure(reason: "\(reason): \(credentialHint(reason))"))
        case (429, "TooManyRequests"):
            return .outcome(.retry(after: retryAfter, reason: reason))
        case (429, _):
            // TooManyProviderTokenUpdates: our token cache refreshed too often; the next attempt
            // uses the settled token.
            return .outcome(.retry(after: retryAfter, reason: reason))
        case (400, "IdleTimeout"):
            return .outcome(.retry(after: nil, reason: reason))
        case (500..., _):
            // InternalServerError, ServiceUnavailable, Shutdown, and unknown 5xx.
            return .outcome(.retry(after: retryAfter, reason: reason))
        default:
            // PayloadTooLarge, BadTopic, TopicDisallowed, Forbidden, BadPriority, …, and unknown
            // reasons verbatim: the notification as sent will never be accepted.
            return .outcome(.rejected(reason: reason))
        }
    }

    /// The outcome of a request that got no answer (libcurl error).
    static func transportFailure(curlCode: Int32, message: String) -> DeliveryOutcome {
        noAnswer("\(message) (curl error \(curlCode))")
    }

    /// The outcome of a request that got no answer (`message` says why): sent again later.
    static func noAnswer(_ message: String) -> DeliveryOutcome {
        .retry(after: nil, reason: "no answer: \(message)")
    }

    enum Mapped: Equatable {
        case outcome(DeliveryOutcome)
        /// 403 ExpiredProviderToken: refresh the JWT once and resend.
        case refreshProviderToken(reason: String)
    }

    static func credentialHint(_ reason: String) -> String {
        switch reason {
        case "InvalidProviderToken": return "APNs refused the provider token; check keyId, teamId and keyFile"
        case "MissingProviderToken": return "no provider token or client certificate was accepted; check the transport's credentials"
        case "BadCertificate": return "APNs refused the client certificate"
        case "BadCertificateEnvironment": return "the certificate is for the other APNs environment; check environment"
        case "UnrelatedKeyIdInToken": return "the key id does not match the key first used on this connection"
        default: return "the key does not match the APNs environment; check environment and keyId"
        }
    }
}
