import FoundationEssentials
import HeraldCore

/// Xiaomi push as the simulator answers it.
///
/// `POST /v3/message/regid` (also `/v2/message/regid`), form-encoded, `Authorization:
/// key=<appSecret>`: checks the key (21301 "Authentication failed"), `restricted_package_name`
/// (22022), `registration_id` (1–1000, comma-separated), `pass_through` 0 or 1, a notification's
/// `title` (1–50 characters, not only spaces) and `description` (1–128), `payload` (at most 4 KB),
/// `time_to_live` (milliseconds, at most two weeks), `notify_id` (a number), and answers
/// `{"result":"ok","code":0,"data":{"id":"scm…","bad_regids":"a,b"},"trace_id","description","info"}`,
/// 20301 when no registration id is valid, 10017 for a bad parameter, 10027 when rate limited,
/// 200001 when the daily quota is used up, HTTP 500 for a server error.
extension ChinaVendorSimulatorCore {
    func xiaomi(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let path = request.pathWithoutQuery
        guard path == "/v3/message/regid" || path == "/v2/message/regid" else {
            return .json(404, #"{"result":"error","code":404,"reason":"Not Found"}"#)
        }
        countSend()
        let trace = nextID("Xcm")
        func error(_ code: Int, _ reason: String, _ description: String) -> SimulatorHTTP2Response {
            .json(200, JSONValue.object(["result": "error", "code": .number(Double(code)), "reason": .string(reason),
                                         "description": .string(description), "trace_id": .string(trace)]).jsonString)
        }
        guard !badCredentials, request.header("authorization") == "key=" + credentials.appSecret else {
            refusedAuth()
            return error(21301, "Authentication failed", "认证失败")
        }
        func invalid(_ reason: String) -> SimulatorHTTP2Response {
            invalidRequest()
            return error(10017, reason, "参数不合法")
        }
        guard let form = Self.form(request.body) else { return invalid("the body is not form-encoded") }
        guard form["restricted_package_name"] == credentials.packageName else {
            invalidRequest()
            return error(22022, "restricted_package_name \(form["restricted_package_name"] ?? "(none)") does not match the app", "包名不匹配")
        }
        let tokens = (form["registration_id"] ?? "").split(separator: ",").map(String.init)
        guard !tokens.isEmpty else { return invalid("registration_id is required") }
        guard tokens.count <= 1000 else { return invalid("at most 1000 registration_id") }
        guard let pass = form["pass_through"], pass == "0" || pass == "1" else { return invalid("pass_through must be 0 or 1") }
        if pass == "0" {
            guard let title = form["title"], !title.allSatisfy(\.isWhitespace), title.unicodeScalars.count <= 50 else {
                return invalid("title must be 1-50 characters, not only spaces")
            }
            guard let d = form["description"], !d.allSatisfy(\.isWhitespace), d.unicodeScalars.count <= 128 else {
                return invalid("description must be 1-128 characters, not only spaces")
            }
        }
        if let p = form["payload"], p.utf8.count > 4096 { return invalid("payload is longer than 4 KB") }
        if let t = form["time_to_live"], !(Int(t).map { (0...1_209_600_000).contains($0) } ?? false) {
            return invalid("time_to_live must be milliseconds up to two weeks")
        }
        if let n = form["notify_id"], Int(n) == nil { return invalid("notify_id must be a number") }
        switch takeLimitFault() {
        case .rate?: return error(10027, "Exceeds the QPS limit", "发送频率超过限制")
        case .quota?: return error(200001, "Exceeds the daily message quota", "超过每日消息数量限制")
        case .server?: return .json(500, #"{"result":"error","code":-1,"reason":"internal error"}"#)
        case nil: break
        }
        let bad = invalidTokens.intersection(tokens)
        if bad.count == Set(tokens).count { return error(20301, "No valid targets", "发送消息失败") }
        let id = nextID("scm")
        var message: [String: JSONValue] = [:]
        for (k, v) in form where k != "registration_id" { message[k] = .string(v) }
        accept(path: path, tokens: tokens, message: .object(message), id: id, invalid: bad)
        var data: [String: JSONValue] = ["id": .string(id)]
        if !bad.isEmpty { data["bad_regids"] = .string(bad.sorted().joined(separator: ",")) }
        return .json(200, JSONValue.object(["result": "ok", "code": 0, "data": .object(data), "trace_id": .string(trace),
                                            "description": "成功", "info": .string("Received push messages for \(tokens.count) REGID")]).jsonString)
    }
}
