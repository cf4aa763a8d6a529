import FoundationEssentials
import HeraldCore
import HeraldCrypto

extension API {
    /// `POST /v1/stream/ack?app=A[&access_token=T]` with `{"id": N}`: the device of the client
    /// token has every event up to `N` (cumulative), on a stream opened with `ack=1`.
    ///
    /// Authenticated as the stream is (client token as `Authorization: Bearer` or
    /// `access_token`; the same 401s). Answers 204, also when the device has no stream open on
    /// this server (nothing waits for its acks here; an ack must go to the server holding its
    /// stream). A body that is not `{"id": <whole number ≥ 0>}` is 400 naming `id`; the id may
    /// also be a string of digits, as a browser's `EventSource` gives `lastEventId`.
    ///
    /// Answered on the server thread (``immediate(_:)``): nothing in it waits, and an ack that
    /// suspended its connection would cost libmicrohttpd a walk of every open stream.
    func streamAck(_ request: HTTPRequest) -> HTTPResponse {
        guard let hub = deps.streams else {
            return APIError(status: 503, code: "streams_unavailable", message: "this server has no live streams").response
        }
        guard let appID = request.query["app"], !appID.isEmpty else {
            return APIError.invalid("app", "give the app: POST /v1/stream/ack?app=<app id>").response
        }
        let claims: ClientTokenClaims
        switch authenticateClient(request, app: appID) {
        case .success(let c): claims = c
        case .failure(let e): return e.response
        }
        let device: String
        do { device = try DeviceToken.normalize(claims.device) } catch {
            return Self.clientTokenError("device claim: \(error)")
        }
        let id: Int64
        switch Self.ackID(request.body) {
        case .success(let n): id = n
        case .failure(let e): return e.response
        }
        hub.acknowledgeAtOnce(app: appID, user: claims.user, device: device, id: id)
        return HTTPResponse(status: 204)
    }

    /// The `id` of an ack body, or the 400 that says what is wrong with it.
    static func ackID(_ body: [UInt8]) -> Result<Int64, APIError> {
        let usage = "send {\"id\": <the last event id the client has>}"
        guard !body.isEmpty else {
            return .failure(APIError(status: 400, code: "invalid_json", message: "the request body is empty; \(usage)"))
        }
        let value: JSONValue
        do { value = try StrictJSON.parse(body) } catch {
            return .failure(APIError(status: 400, code: "invalid_json", message: "\(error.description); \(usage)"))
        }
        guard case .object(let members) = value else {
            return .failure(.invalid(nil, "expected a JSON object; \(usage)"))
        }
        switch members["id"] {
        case nil:
            return .failure(.invalid("id", "is required: the last event id the client has (the SSE \"id:\" it read)"))
        case .number(let n)?:
            guard n >= 0, n == n.rounded(), n <= 9_007_199_254_740_991 else {
                return .failure(.invalid("id", "must be an event id (a whole number ≥ 0), found \(n)"))
            }
            return .success(Int64(n))
        case .string(let s)?:
            guard !s.isEmpty, s.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int64(s) else {
                return .failure(.invalid("id", "must be an event id (a whole number ≥ 0), found \"\(s.prefix(40))\""))
            }
            return .success(n)
        case let other?:
            return .failure(.invalid("id", "must be an event id (a whole number ≥ 0), found \(other.typeDescription)"))
        }
    }
}

extension API {
    /// A `sent` delivery written to an acknowledging stream of this server and waiting for its
    /// ack: `written to the stream as event N, awaiting ack` (the status API's reason for it).
    static func awaitingAckReason(_ d: DeliveryStatus, app: String, notification: String, streams: StreamHub?) -> String? {
        guard d.state == .sent, let streams, let seq = streams.awaitingAck(app: app, device: d.token, notificationID: notification) else { return nil }
        return "written to the stream as event \(seq), awaiting ack"
    }
}
