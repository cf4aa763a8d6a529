import Foundation
import HeraldCore
import HeraldHTTP2
import Testing
@testable import HeraldFCM

/// Every row of the answers table, from Google's documented error bodies.
@Suite("FCM answers")
struct FCMResponseMappingTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func answer(_ status: Int, _ body: String = "", headers: [HTTP2Header] = []) -> FCMAnswer {
        FCMResponseMapping.map(.answered(HTTP2Response(status: status, headers: headers, body: Array(body.utf8), receivedAt: now)), now: now)
    }

    static func error(_ code: Int, _ status: String, _ message: String, fcm: String? = nil, field: String? = nil) -> String {
        var details: [String] = []
        if let fcm { details.append(#"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(fcm)"}"#) }
        if let field {
            details.append(#"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"\#(field)","description":"\#(message)"}]}"#)
        }
        return #"{"error":{"code":\#(code),"message":"\#(message)","status":"\#(status)","details":[\#(details.joined(separator: ","))]}}"#
    }

    @Test func delivered() {
        #expect(answer(200, #"{"name":"projects/p/messages/0:123%abc"}"#) == .outcome(.delivered(receipt: "projects/p/messages/0:123%abc")))
    }

    @Test func unregisteredRetiresTheDeviceAtTheAnswersTime() {
        #expect(answer(404, Self.error(404, "NOT_FOUND", "Requested entity was not found.", fcm: "UNREGISTERED"))
                == .outcome(.tokenInvalid(since: now, reason: "UNREGISTERED")))
    }

    @Test func aBadTokenRetiresButABadPayloadIsRejected() {
        let token = answer(400, Self.error(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", fcm: "INVALID_ARGUMENT"))
        guard case .outcome(.tokenInvalid(let since, _)) = token else { Issue.record("\(token)"); return }
        #expect(since == now)
        let payload = answer(400, Self.error(400, "INVALID_ARGUMENT", "Invalid value at 'message.data[0].value' (TYPE_STRING), 12", field: "message.data[0].value"))
        guard case .outcome(.rejected(let reason)) = payload else { Issue.record("\(payload)"); return }
        #expect(reason.contains("message.data[0].value"))
        let tooBig = answer(400, Self.error(400, "INVALID_ARGUMENT", "Message is too big", fcm: "INVALID_ARGUMENT"))
        guard case .outcome(.rejected) = tooBig else { Issue.record("\(tooBig)"); return }
    }

    @Test func senderMismatchIsRejected() {
        guard case .outcome(.rejected(let r)) = answer(403, Self.error(403, "PERMISSION_DENIED", "SenderId mismatch", fcm: "SENDER_ID_MISMATCH")) else {
            Issue.record("not rejected"); return
        }
        #expect(r.hasPrefix("SENDER_ID_MISMATCH"))
    }

    @Test func quotaWaitsForRetryAfterOrAMinute() {
        let body = Self.error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", fcm: "QUOTA_EXCEEDED")
        guard case .outcome(.retry(let after, _)) = answer(429, body, headers: [HTTP2Header("retry-after", "120")]) else { Issue.record("no retry"); return }
        #expect(after == 120)
        guard case .outcome(.retry(let least, _)) = answer(429, body) else { Issue.record("no retry"); return }
        #expect(least == 60)
    }

    @Test func serverErrorsAndNoAnswerRetry() {
        guard case .outcome(.retry(let after, _)) = answer(503, Self.error(503, "UNAVAILABLE", "x", fcm: "UNAVAILABLE"), headers: [HTTP2Header("retry-after", "7")]) else {
            Issue.record("no retry"); return
        }
        #expect(after == 7)
        guard case .outcome(.retry(nil, _)) = answer(500, Self.error(500, "INTERNAL", "x", fcm: "INTERNAL")) else { Issue.record("no retry"); return }
        guard case .outcome(.retry(nil, _)) = FCMResponseMapping.map(.noAnswer(reason: "connection lost"), now: now) else { Issue.record("no retry"); return }
    }

    @Test func authenticationAnswers() {
        #expect(answer(401, Self.error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")) == .unauthenticated)
        guard case .outcome(.setupFailure(let r)) = answer(401, Self.error(401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service", fcm: "THIRD_PARTY_AUTH_ERROR")) else {
            Issue.record("not a setup failure"); return
        }
        #expect(r.contains("THIRD_PARTY_AUTH_ERROR"))
        guard case .outcome(.setupFailure) = answer(403, Self.error(403, "PERMISSION_DENIED", "Permission 'cloudmessaging.messages.create' denied")) else {
            Issue.record("not a setup failure"); return
        }
    }

    @Test func unknownCodesKeepTheirName() {
        #expect(FCMErrorCode("SOMETHING_NEW") == .unknown("SOMETHING_NEW"))
        #expect(FCMErrorCode("SOMETHING_NEW").rawValue == "SOMETHING_NEW")
        #expect(FCMErrorCode("UNREGISTERED") == .unregistered)
    }
}
