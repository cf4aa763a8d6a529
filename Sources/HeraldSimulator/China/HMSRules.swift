import FoundationEssentials
import HeraldCore

/// Huawei Push Kit as the simulator answers it.
///
/// - `POST /oauth2/v3/token`: form `grant_type=client_credentials`, `client_id` = the app id,
///   `client_secret`; answers `{"access_token","expires_in","token_type":"Bearer"}` or HTTP 400
///   `{"error":1101,"error_description":"invalid client"}` (1102 for a missing parameter).
/// - `POST /v1/{appId}/messages:send`: `Authorization: Bearer <token>`, JSON `{"validate_only",
///   "message":{"token":[…],"android":{…},"data":"<string>"}}`; checks the app id in the path,
///   1–1000 tokens, `data` a string, a notification's title, body and click_action type, the
///   4096-byte message, the ttl's form; answers `{"code":"80000000","msg":"Success","requestId"}`,
///   `80100000` with `illegal_tokens` (a JSON string in `msg`), `80300007` when every token is
///   invalid, HTTP 401 `80200003` for an expired or unknown token, `80100003` for a malformed
///   message, `80300008` for a message over 4 KB, `80300010` for over 1000 tokens, HTTP 503 for
///   flow control, HTTP 500 `81000001` for a server error.
extension ChinaVendorSimulatorCore {
    func hms(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let path = request.pathWithoutQuery
        if path == Self.hmsTokenPath { return hmsToken(request) }
        guard path == "/v1/\(credentials.appID)/messages:send" else {
            if path.hasPrefix("/v1/"), path.hasSuffix("/messages:send") {
                return .json(403, #"{"code":"80300002","msg":"APP is forbidden to send","requestId":"\#(nextID(""))"}"#)
            }
            return .json(404, #"{"code":"80100001","msg":"Not Found"}"#)
        }
        countSend()
        let requestID = nextID("")
        func answer(_ status: Int, _ code: String, _ msg: String) -> SimulatorHTTP2Response {
            .json(status, JSONValue.object(["code": .string(code), "msg": .string(msg), "requestId": .string(requestID)]).jsonString)
        }
        if takeExpiredToken() { return answer(401, "80200003", "Oauth Token expired") }
        let auth = request.header("authorization") ?? ""
        guard auth.hasPrefix("Bearer "), isValid(token: String(auth.dropFirst(7))) else {
            return answer(401, auth.hasPrefix("Bearer ") ? "80200003" : "80200001", auth.hasPrefix("Bearer ") ? "Oauth Token expired" : "Oauth authentication error")
        }
        guard let body = try? JSONValue.parse(request.body), let message = body["message"]?.objectValue else {
            invalidRequest()
            return answer(400, "80100003", "Illegal payload, message structure error")
        }
        guard let tokens = message["token"]?.arrayValue?.compactMap(\.stringValue), !tokens.isEmpty else {
            invalidRequest()
            return answer(400, "80100003", "Illegal payload, token is required")
        }
        if tokens.count > 1000 { invalidRequest(); return answer(400, "80300010", "The number of tokens in the message body exceeds the default value") }
        if let d = message["data"], d.stringValue == nil { invalidRequest(); return answer(400, "80100003", "Illegal payload, data must be a string") }
        var withoutTokens = message
        withoutTokens["token"] = nil
        if JSONValue.object(withoutTokens).jsonString.utf8.count > 4096 {
            invalidRequest()
            return answer(400, "80300008", "The message body size exceeds the default value set by the system (4K)")
        }
        if let android = message["android"] {
            if let ttl = android["ttl"] {
                guard let s = ttl.stringValue, s.hasSuffix("s"), Int(s.dropLast()) != nil else {
                    invalidRequest()
                    return answer(400, "80100003", "Illegal payload, ttl must be like \"86400s\"")
                }
            }
            if let n = android["notification"] {
                guard n["title"]?.stringValue != nil, n["body"]?.stringValue != nil else {
                    invalidRequest()
                    return answer(400, "80100003", "Illegal payload, notification title and body are required")
                }
                guard let type = n["click_action"]?["type"]?.intValue, (1...4).contains(type) else {
                    invalidRequest()
                    return answer(400, "80100003", "Illegal payload, click_action.type is required")
                }
            }
        }
        switch takeLimitFault() {
        case .rate?, .quota?: return .json(503, #"{"code":"81000001","msg":"flow control"}"#)
        case .server?: return answer(500, "81000001", "System inner error")
        case nil: break
        }
        let bad = invalidTokens.intersection(tokens)
        accept(path: path, tokens: tokens, message: .object(withoutTokens), id: requestID, invalid: bad)
        if bad.isEmpty { return answer(200, "80000000", "Success") }
        if bad.count == Set(tokens).count { return answer(200, "80300007", "All the tokens are invalid") }
        let detail = JSONValue.object(["success": .number(Double(tokens.count - bad.count)), "failure": .number(Double(bad.count)),
                                       "illegal_tokens": .array(bad.sorted().map(JSONValue.string))]).jsonString
        return answer(200, "80100000", detail)
    }

    private func hmsToken(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        guard let form = Self.form(request.body), form["grant_type"] == "client_credentials",
              let id = form["client_id"], let secret = form["client_secret"] else {
            refusedAuth()
            return .json(400, #"{"error":1102,"error_description":"missing required parameter","sub_error":20001}"#)
        }
        guard !badCredentials, id == credentials.appID, secret == credentials.appSecret else {
            refusedAuth()
            return .json(400, #"{"error":1101,"error_description":"invalid client","sub_error":20003}"#)
        }
        let token = issueToken()
        return .json(200, JSONValue.object(["access_token": .string(token), "expires_in": .number(tokenLifetime),
                                            "token_type": "Bearer"]).jsonString)
    }
}
