import HeraldCore

/// Google's error answers, as FCM v1 and its OAuth token endpoint write them.
///
/// FCM v1: `{"error":{"code":404,"message":"…","status":"NOT_FOUND","details":[{"@type":
/// "type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`, with a
/// `google.rpc.BadRequest` detail listing field violations for a malformed request.
/// The token endpoint: `{"error":"invalid_grant","error_description":"…"}`.
struct FCMGoogleError: Error, Sendable, Equatable {
    /// One `google.rpc.BadRequest` field violation.
    struct FieldViolation: Sendable, Equatable {
        var field: String?
        var description: String
    }

    var code: Int
    var status: String
    var message: String
    /// The `FcmError` detail's `errorCode`, when FCM names one.
    var fcmErrorCode: String?
    var violations: [FieldViolation] = []
    /// Seconds for a `Retry-After` header.
    var retryAfter: Int?

    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"

    /// The JSON body.
    var json: String {
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.object("error") { e in
                e.int("code", code)
                e.string("message", message)
                e.string("status", status)
                guard fcmErrorCode != nil || !violations.isEmpty else { return }
                e.array("details") { a in
                    if let fcmErrorCode {
                        a.object { d in
                            d.string("@type", Self.fcmErrorType)
                            d.string("errorCode", fcmErrorCode)
                        }
                    }
                    if !violations.isEmpty {
                        if fcmErrorCode != nil { a.raw(UInt8(ascii: ",")) }
                        a.object { d in
                            d.string("@type", Self.badRequestType)
                            d.array("fieldViolations") { list in
                                for (i, v) in violations.enumerated() {
                                    if i > 0 { list.raw(UInt8(ascii: ",")) }
                                    list.object { f in
                                        if let field = v.field { f.string("field", field) }
                                        f.string("description", v.description)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        return w.string
    }

    /// The HTTP/2 response.
    var response: SimulatorHTTP2Response {
        var headers: [SimulatorHTTP2Header] = []
        if let retryAfter { headers.append(SimulatorHTTP2Header("retry-after", String(retryAfter))) }
        if code == 401 { headers.append(SimulatorHTTP2Header("www-authenticate", #"Bearer realm="https://accounts.google.com/""#)) }
        return .json(code, json, headers: headers)
    }

    // MARK: The answers FCM documents

    /// 400 INVALID_ARGUMENT for a malformed request, naming the field (a BadRequest detail).
    static func badRequest(_ message: String, field: String?) -> FCMGoogleError {
        FCMGoogleError(code: 400, status: "INVALID_ARGUMENT", message: message,
                       violations: [FieldViolation(field: field, description: message)])
    }

    /// 400 INVALID_ARGUMENT with an FcmError detail (a bad token, a message FCM refuses).
    static func invalidArgument(_ message: String) -> FCMGoogleError {
        FCMGoogleError(code: 400, status: "INVALID_ARGUMENT", message: message, fcmErrorCode: "INVALID_ARGUMENT")
    }

    static let invalidToken = invalidArgument("The registration token is not a valid FCM registration token")
    static let unregistered = FCMGoogleError(code: 404, status: "NOT_FOUND", message: "Requested entity was not found.",
                                             fcmErrorCode: "UNREGISTERED")
    static let senderIDMismatch = FCMGoogleError(code: 403, status: "PERMISSION_DENIED", message: "SenderId mismatch",
                                                 fcmErrorCode: "SENDER_ID_MISMATCH")
    static let thirdPartyAuth = FCMGoogleError(code: 401, status: "UNAUTHENTICATED", message: "Auth error from APNS or Web Push Service",
                                               fcmErrorCode: "THIRD_PARTY_AUTH_ERROR")
    static func quotaExceeded(retryAfter: Int?) -> FCMGoogleError {
        FCMGoogleError(code: 429, status: "RESOURCE_EXHAUSTED",
                       message: "Quota exceeded for quota metric 'Messages' and limit 'Messages per minute' of service 'fcm.googleapis.com'.",
                       fcmErrorCode: "QUOTA_EXCEEDED", retryAfter: retryAfter)
    }
    static func internalError(retryAfter: Int?) -> FCMGoogleError {
        FCMGoogleError(code: 500, status: "INTERNAL", message: "Internal error encountered.", fcmErrorCode: "INTERNAL", retryAfter: retryAfter)
    }
    static func unavailable(retryAfter: Int?) -> FCMGoogleError {
        FCMGoogleError(code: 503, status: "UNAVAILABLE", message: "The service is currently unavailable.", fcmErrorCode: "UNAVAILABLE",
                       retryAfter: retryAfter)
    }
    static let unauthenticated = FCMGoogleError(
        code: 401, status: "UNAUTHENTICATED",
        message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
    static func permissionDenied(project: String) -> FCMGoogleError {
        FCMGoogleError(code: 403, status: "PERMISSION_DENIED",
                       message: "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(project)' (or it may not exist).")
    }
    static func notFound(_ path: String) -> FCMGoogleError {
        FCMGoogleError(code: 404, status: "NOT_FOUND", message: "The requested URL \(path) was not found on this server.")
    }
    static func methodNotAllowed(_ method: String) -> FCMGoogleError {
        FCMGoogleError(code: 405, status: "UNIMPLEMENTED", message: "Method \(method) is not allowed here; use POST.")
    }
}

/// An OAuth 2.0 token endpoint error (RFC 6749 §5.2), as Google writes it.
struct OAuthError: Error, Sendable, Equatable {
    var status: Int
    var error: String
    var description: String

    var response: SimulatorHTTP2Response {
        var w = JSONWriter(capacity: 128)
        w.object { o in
            o.string("error", error)
            o.string("error_description", description)
        }
        return .json(status, w.string)
    }

    static func invalidGrant(_ description: String) -> OAuthError { OAuthError(status: 400, error: "invalid_grant", description: description) }
}
