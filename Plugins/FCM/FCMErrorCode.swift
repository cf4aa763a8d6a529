import FoundationEssentials
import HeraldCore

/// FCM v1's error codes (`error.details[].errorCode` of the `FcmError` detail), with the ones
/// Herald does not know kept as they came.
public enum FCMErrorCode: Sendable, Hashable, CustomStringConvertible {
    case unspecified
    /// 400: a bad request; or a bad token when the message names the registration token.
    case invalidArgument
    /// 404: the app was uninstalled or the token is no longer valid.
    case unregistered
    /// 403: the token belongs to another Firebase project.
    case senderIDMismatch
    /// 429: the project, the device or the topic is over its quota.
    case quotaExceeded
    /// 503: FCM is overloaded.
    case unavailable
    /// 500: FCM failed.
    case `internal`
    /// 401: the APNs certificate or key, or the Web Push credentials, uploaded to Firebase were refused.
    case thirdPartyAuthError
    case unknown(String)

    public init(_ raw: String) {
        switch raw {
        case "UNSPECIFIED_ERROR": self = .unspecified
        case "INVALID_ARGUMENT": self = .invalidArgument
        case "UNREGISTERED": self = .unregistered
        case "SENDER_ID_MISMATCH": self = .senderIDMismatch
        case "QUOTA_EXCEEDED": self = .quotaExceeded
        case "UNAVAILABLE": self = .unavailable
        case "INTERNAL": self = .internal
        case "THIRD_PARTY_AUTH_ERROR": self = .thirdPartyAuthError
        default: self = .unknown(raw)
        }
    }

    /// The code as FCM writes it.
    public var rawValue: String {
        switch self {
        case .unspecified: return "UNSPECIFIED_ERROR"
        case .invalidArgument: return "INVALID_ARGUMENT"
        case .unregistered: return "UNREGISTERED"
        case .senderIDMismatch: return "SENDER_ID_MISMATCH"
        case .quotaExceeded: return "QUOTA_EXCEEDED"
        case .unavailable: return "UNAVAILABLE"
        case .internal: return "INTERNAL"
        case .thirdPartyAuthError: return "THIRD_PARTY_AUTH_ERROR"
        case .unknown(let raw): return raw
        }
    }

    public var description: String { rawValue }
}

/// Google's error body: `{"error":{"code","message","status","details":[…]}}`.
public struct FCMErrorResponse: Sendable, Equatable {
    /// One `google.rpc.BadRequest` field violation.
    public struct FieldViolation: Sendable, Equatable {
        public var field: String?
        public var description: String
    }

    public var code: Int?
    /// The canonical status (`INVALID_ARGUMENT`, `UNAUTHENTICATED`…).
    public var status: String?
    public var message: String?
    /// The `FcmError` detail's code, when there is one.
    public var errorCode: FCMErrorCode?
    public var violations: [FieldViolation]

    /// Reads the body; `nil` when it is not Google's error JSON.
    public init?(body: [UInt8]) {
        guard !body.isEmpty, let json = try? JSONValue.parse(body), let error = json["error"], case .object = error else { return nil }
        code = error["code"]?.intValue
        status = error["status"]?.stringValue
        message = error["message"]?.stringValue
        errorCode = nil
        violations = []
        for detail in error["details"]?.arrayValue ?? [] {
            let type = detail["@type"]?.stringValue ?? ""
            if type.hasSuffix("google.firebase.fcm.v1.FcmError"), let raw = detail["errorCode"]?.stringValue {
                errorCode = FCMErrorCode(raw)
            } else if type.hasSuffix("google.rpc.BadRequest") {
                for v in detail["fieldViolations"]?.arrayValue ?? [] {
                    violations.append(FieldViolation(field: v["field"]?.stringValue, description: v["description"]?.stringValue ?? ""))
                }
            }
        }
    }

    /// Whether the error is about the registration token (a bad token, not a bad payload):
    /// FcmError INVALID_ARGUMENT whose message names the registration token, or a violation on `message.token`.
    public var namesTheToken: Bool {
        if violations.contains(where: { $0.field == "message.token" }) { return true }
        guard errorCode == .invalidArgument, let message else { return false }
        return message.lowercased().contains("registration token")
    }
}
