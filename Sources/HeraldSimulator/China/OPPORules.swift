import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// OPPO push as the simulator answers it.
///
/// - `POST /server/v1/auth`: form `app_key`, `timestamp` (milliseconds, within the tolerance of
///   the simulator's clock), `sign` = hex SHA-256 of appKey + timestamp + masterSecret; answers
///   `{"code":0,"message":"Success","data":{"auth_token","create_time"}}`, or 14 (invalid app key),
///   16 (invalid signature), 19 (invalid timestamp).
/// - `POST /server/v1/message/notification/unicast` (form `message`, `auth_token`) and
///   `…/unicast_batch` (form `messages`, up to 1000, `auth_token`): checks the token (11 "Invalid
///   AuthToken"), `target_type` 2, the notification's `title` (1–50 characters), `content` (1–200),
///   `sub_title` (at most 10), `off_line_ttl` (at most 10 days), `action_parameters` (at most 4000
///   bytes), `notify_level` (1, 2, 16); answers `{"code":0,"data":{"messageId"}}` (unicast) or one
///   `{"messageId","registrationId","errorCode","errorMessage"}` per message (batch; 10000 for an
///   invalid registration id), 10000 for a unicast to one, -2 when rate limited, 33 when the daily
///   quota is used up, HTTP 500 with -1 for a server error.
extension ChinaVendorSimulatorCore {
    func oppo(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let path = request.pathWithoutQuery
        func answer(_ code: Int, _ message: String, data: JSONValue? = nil, status: Int = 200) -> SimulatorHTTP2Response {
            var o: [String: JSONValue] = ["code": .number(Double(code)), "message": .string(message)]
            if let data { o["data"] = data }
            return .json(status, JSONValue.object(o).jsonString)
        }
        guard let form = Self.form(request.body) else { invalidRequest(); return answer(12, "Invalid form") }
        switch path {
        case "/server/v1/auth":
            guard let key = form["app_key"], let timestamp = form["timestamp"], let sign = form["sign"] else {
                refusedAuth()
                return answer(15, "Missing Parameter")
            }
            guard !badCredentials, key == credentials.appKey else { refusedAuth(); return answer(14, "Invalid AppKey") }
            guard let ms = Double(timestamp), abs(ms / 1000 - clock.now.timeIntervalSince1970) <= timestampTolerance else {
                refusedAuth()
                return answer(19, "Invalid Timestamp")
            }
            let expected = Self.hexString(SHA256.hash(Array((key + timestamp + credentials.masterSecret).utf8)))
            guard sign == expected else { refusedAuth(); return answer(16, "Invalid Signature") }
            return answer(0, "Success", data: ["auth_token": .string(issueToken()), "create_time": .number((clock.now.timeIntervalSince1970 * 1000).rounded())])
        case "/server/v1/message/notification/unicast", "/server/v1/message/notification/unicast_batch":
            countSend()
            if takeExpiredToken() { return answer(11, "Invalid AuthToken") }
            guard isValid(token: form["auth_token"] ?? request.header("auth_token")) else { return answer(11, "Invalid AuthToken") }
            let batch = path.hasSuffix("_batch")
            let messages: [JSONValue]
            if batch {
                guard let text = form["messages"], let list = (try? JSONValue.parse(text))?.arrayValue, !list.isEmpty else {
                    invalidRequest()
                    return answer(12, "messages must be a JSON array")
                }
                guard list.count <= 1000 else { invalidRequest(); return answer(12, "at most 1000 messages") }
                messages = list
            } else {
                guard let text = form["message"], let one = try? JSONValue.parse(text), case .object = one else {
                    invalidRequest()
                    return answer(12, "message must be a JSON object")
                }
                messages = [one]
            }
            var tokens: [String] = []
            for m in messages {
                guard m["target_type"]?.intValue == 2, let target = m["target_value"]?.stringValue, !target.isEmpty else {
                    invalidRequest()
                    return answer(12, "target_type must be 2 with a registration id in target_value")
                }
                if let problem = Self.oppoProblem(m["notification"]) { invalidRequest(); return answer(12, problem) }
                tokens.append(target)
            }
            switch takeLimitFault() {
            case .rate?: return answer(-2, "Service Currently Unavailable: flow control")
            case .quota?: return answer(33, "The number of messages exceeds the daily limit")
            case .server?: return answer(-1, "Service Currently Unavailable", status: 500)
            case nil: break
            }
            let bad = invalidTokens.intersection(tokens)
            let id = nextID("sim-msg-")
            accept(path: path, tokens: tokens, message: messages[0]["notification"] ?? .null, id: id, invalid: bad)
            if !batch {
                return bad.isEmpty ? answer(0, "Success", data: ["messageId": .string(id)]) : answer(10000, "Invalid RegistrationId")
            }
            return answer(0, "Success", data: .array(tokens.map { t in
                bad.contains(t)
                    ? ["registrationId": .string(t), "errorCode": 10000, "errorMessage": "Invalid RegistrationId"]
                    : ["registrationId": .string(t), "messageId": .string(id)]
            }))
        default:
            return answer(404, "Not Found", status: 404)
        }
    }

    /// What OPPO refuses in a notification object, or `nil`.
    static func oppoProblem(_ n: JSONValue?) -> String? {
        guard let n, case .object = n else { return "notification is required" }
        guard let title = n["title"]?.stringValue, (1...50).contains(title.unicodeScalars.count) else { return "title must be 1-50 characters" }
        guard let content = n["content"]?.stringValue, (1...200).contains(content.unicodeScalars.count) else { return "content must be 1-200 characters" }
        if let s = n["sub_title"]?.stringValue, s.unicodeScalars.count > 10 { return "sub_title must be at most 10 characters" }
        if let ttl = n["off_line_ttl"] { guard let t = ttl.intValue, (0...864_000).contains(t) else { return "off_line_ttl must be at most 10 days" } }
        if let p = n["action_parameters"] { guard let s = p.stringValue, s.utf8.count <= 4000 else { return "action_parameters must be a JSON string of at most 4000 bytes" } }
        if let l = n["notify_level"] { guard let i = l.intValue, [1, 2, 16].contains(i) else { return "notify_level must be 1, 2 or 16" } }
        return nil
    }
}
