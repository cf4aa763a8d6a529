import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// FCM's answer to one send, as the transport acts on it (pure; the answers table of issue 21).
enum FCMAnswer: Equatable {
    /// An outcome for the dispatcher.
    case outcome(DeliveryOutcome)
    /// 401 UNAUTHENTICATED: the access token was refused; refresh it and send again (once).
    case unauthenticated
}

enum FCMResponseMapping {
    /// The least wait after a 429 without `Retry-After` (FCM asks for at least a minute).
    static let quotaBackoff: TimeInterval = 60

    /// Maps one result; `now` is the answer's time (FCM gives no timestamp for a dead token).
    static func map(_ result: HTTP2Result, now: Date) -> FCMAnswer {
        switch result {
        case .answered(let response): return map(response, now: now)
        case .noAnswer(let reason): return .outcome(.retry(after: nil, reason: "no answer from FCM: \(reason)"))
        case .failed(let error):
            switch error {
            case .invalidRequest: return .outcome(.rejected(reason: error.description))
            default: return .outcome(.setupFailure(reason: error.description))
            }
        case .endedByHooks: return .outcome(.retry(after: nil, reason: "ended by the HTTP/2 client's hooks"))
        }
    }

    static func map(_ response: HTTP2Response, now: Date) -> FCMAnswer {
        let status = response.status
        if status == 200 {
            let name = (try? JSONValue.parse(response.body))?["name"]?.stringValue
            return .outcome(.delivered(receipt: name))
        }
        let error = FCMErrorResponse(body: response.body)
        let code = error?.errorCode
        let text = error?.message.map { ": " + FCMText.clip($0) } ?? ""
        let label = code?.rawValue ?? error?.status ?? "HTTP \(status)"
        switch (status, code) {
        case (_, .unregistered?):
            return .outcome(.tokenInvalid(since: now, reason: "UNREGISTERED"))
        case (_, .senderIDMismatch?):
            return .outcome(.rejected(reason: "SENDER_ID_MISMATCH: the token belongs to another Firebase project"))
        case (_, .thirdPartyAuthError?):
            return .outcome(.setupFailure(reason: "FCM answered 401 THIRD_PARTY_AUTH_ERROR: the APNs key or certificate, or the Web Push credentials, uploaded to the Firebase project were refused\(text)"))
        case (429, _), (_, .quotaExceeded?):
            return .outcome(.retry(after: max(response.retryAfter ?? quotaBackoff, 0), reason: "\(label) (429)"))
        case (401, _):
            return .unauthenticated
        case (403, _):
            return .outcome(.setupFailure(reason: "FCM answered 403 \(error?.status ?? "PERMISSION_DENIED"): the service account may not send for this project (give it the Firebase Cloud Messaging API Admin role, and check projectId)\(text)"))
        case (400, _):
            if let error, error.namesTheToken { return .outcome(.tokenInvalid(since: now, reason: "INVALID_ARGUMENT\(text)")) }
            if let v = error?.violations.first {
                return .outcome(.rejected(reason: "INVALID_ARGUMENT: \(v.field.map { "\($0): " } ?? "")\(FCMText.clip(v.description))"))
            }
            return .outcome(.rejected(reason: "\(label)\(text)"))
        case (404, _):
            return .outcome(.setupFailure(reason: "FCM answered 404 \(error?.status ?? "NOT_FOUND") without UNREGISTERED: check endpoint and projectId\(text)"))
        case (500...599, _):
            return .outcome(.retry(after: response.retryAfter, reason: "\(label) (\(status))"))
        default:
            return .outcome(.rejected(reason: "\(label) (\(status))\(text)"))
        }
    }
}

/// Peer text in reasons and logs.
enum FCMText {
    /// At most 300 characters of a peer's message, control characters replaced, so a reason stays one readable line.
    static func clip(_ text: String) -> String {
        var out = String(text.unicodeScalars.prefix(300).map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
        if text.unicodeScalars.count > 300 { out += "…" }
        return out
    }
}
