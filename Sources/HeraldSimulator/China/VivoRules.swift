import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// vivo push as the simulator answers it.
///
/// - `POST /message/auth`: JSON `{"appId","appKey","timestamp","sign"}`, `sign` = lower-case hex MD5
///   of appId + appKey + timestamp + appSecret, the timestamp (milliseconds) within the tolerance;
///   answers `{"result":0,"desc":"请求成功","authToken"}`, or 10200 (a missing or unknown parameter),
///   10206 (a wrong sign), 10207 (a bad timestamp).
/// - With the `authToken` header (10000 when missing, unknown or expired): `POST /message/send` (one
///   `regId`), `POST /message/saveListPayload` then `POST /message/pushToList` (`regIds` 2–1000,
///   `taskId`). Each checks a unique `requestId` (10101 for a repeat), `title` (at most 40, a Chinese
///   character counting 2), `content` (at most 100), `notifyType` 1–4, `skipType` 1–4,
///   `classification` 0/1, `timeToLive` 60 s–7 days; answers `{"result":0,"desc","taskId"}`,
///   `invalidUsers` `[{"status":1,"userid"}]` for invalid regIds in a list, 10302 for an invalid
///   regId alone, 10252 when rate limited, 10070 when the daily quota is used up, HTTP 500 for a
///   server error.
extension ChinaVendorSimulatorCore {
    func vivo(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let path = request.pathWithoutQuery
        func answer(_ code: Int, _ desc: String, _ extra: [String: JSONValue] = [:], status: Int = 200) -> SimulatorHTTP2Response {
            var o: [String: JSONValue] = ["result": .number(Double(code)), "desc": .string(desc)]
            for (k, v) in extra { o[k] = v }
            return .json(status, JSONValue.object(o).jsonString)
        }
        guard let body = try? JSONValue.parse(request.body), case .object = body else { invalidRequest(); return answer(10050, "请求体不是 JSON") }
        if path == "/message/auth" {
            guard let id = VendorValue.string(body["appId"]), let key = body["appKey"]?.stringValue,
                  let ts = VendorValue.string(body["timestamp"]), let sign = body["sign"]?.stringValue else {
                refusedAuth()
                return answer(10200, "参数不合法")
            }
            guard !badCredentials, id == credentials.appID, key == credentials.appKey else { refusedAuth(); return answer(10200, "appId 或 appKey 不合法") }
            guard let ms = Double(ts), abs(ms / 1000 - clock.now.timeIntervalSince1970) <= timestampTolerance else {
                refusedAuth()
                return answer(10207, "timestamp 不合法")
            }
            guard sign == MD5.hex(Array((id + key + ts + credentials.appSecret).utf8)) else { refusedAuth(); return answer(10206, "sign 不正确") }
            return answer(0, "请求成功", ["authToken": .string(issueToken())])
        }
        guard ["/message/send", "/message/saveListPayload", "/message/pushToList"].contains(path) else {
            return answer(404, "Not Found", status: 404)
        }
        countSend()
        if takeExpiredToken() { return answer(10000, "权限认证失败: authToken 已过期") }
        guard isValid(token: request.header("authToken")) else { return answer(10000, "权限认证失败") }
        guard let requestID = body["requestId"]?.stringValue, !requestID.isEmpty, requestID.utf8.count <= 64 else {
            invalidRequest()
            return answer(10055, "requestId 不能为空")
        }
        guard tasks.withLock({ t in
            let key = "request:" + requestID
            if t[key] != nil { return false }
            t[key] = .null
            return true
        }) else {
            invalidRequest()
            return answer(10101, "requestId 重复")
        }
        if path == "/message/saveListPayload" {
            if let problem = Self.vivoProblem(body) { invalidRequest(); return answer(10055, problem) }
            let task = nextID("")
            tasks.withLock { $0[task] = body }
            return answer(0, "请求成功", ["taskId": .string(task)])
        }
        let tokens: [String]
        var message = body
        var task = ""
        if path == "/message/send" {
            guard let regId = body["regId"]?.stringValue, !regId.isEmpty else { invalidRequest(); return answer(10055, "regId 不能为空") }
            if let problem = Self.vivoProblem(body) { invalidRequest(); return answer(10055, problem) }
            tokens = [regId]
        } else {
            guard let ids = body["regIds"]?.arrayValue?.compactMap(\.stringValue), (2...1000).contains(ids.count) else {
                invalidRequest()
                return answer(10055, "regIds 需要 2 到 1000 个")
            }
            guard let t = body["taskId"]?.stringValue, let saved = tasks.withLock({ $0[t] }), saved != .null else {
                invalidRequest()
                return answer(10103, "taskId 不存在")
            }
            tokens = ids
            message = saved
            task = t
        }
        switch takeLimitFault() {
        case .rate?: return answer(10252, "推送频率超过限制")
        case .quota?: return answer(10070, "超过当日推送总量限制")
        case .server?: return answer(-1, "服务器异常", status: 500)
        case nil: break
        }
        let bad = invalidTokens.intersection(tokens)
        let id = path == "/message/send" ? nextID("") : task
        var stored = message.objectValue ?? [:]
        for key in ["regId", "regIds", "requestId"] { stored[key] = nil }
        accept(path: path, tokens: tokens, message: .object(stored), id: id, invalid: bad)
        if path == "/message/send" {
            return bad.isEmpty ? answer(0, "请求成功", ["taskId": .string(id)]) : answer(10302, "regId 不合法")
        }
        return answer(0, "请求成功", ["invalidUsers": .array(bad.sorted().map { ["status": 1, "userid": .string($0)] })])
    }

    /// What vivo refuses in a message, or `nil`.
    static func vivoProblem(_ m: JSONValue) -> String? {
        guard let title = m["title"]?.stringValue, !title.isEmpty, weighted(title) <= 40 else { return "title 不能为空且不超过 40 个字符（汉字算 2 个）" }
        guard let content = m["content"]?.stringValue, !content.isEmpty, weighted(content) <= 100 else { return "content 不能为空且不超过 100 个字符" }
        guard let n = m["notifyType"]?.intValue, (1...4).contains(n) else { return "notifyType 必须是 1 到 4" }
        guard let s = m["skipType"]?.intValue, (1...4).contains(s) else { return "skipType 必须是 1 到 4" }
        if let c = m["classification"] { guard let i = c.intValue, i == 0 || i == 1 else { return "classification 必须是 0 或 1" } }
        if let t = m["timeToLive"] { guard let i = t.intValue, (60...604_800).contains(i) else { return "timeToLive 必须在 60 秒到 7 天之间" } }
        if let map = m["clientCustomMap"] {
            guard case .object(let members) = map, members.values.allSatisfy({ $0.stringValue != nil }) else { return "clientCustomMap 的值必须是字符串" }
        }
        return nil
    }
}

/// Lenient reads of numbers sent as strings (and the reverse).
enum VendorValue {
    static func string(_ v: JSONValue?) -> String? {
        if let s = v?.stringValue { return s }
        if let i = v?.intValue { return String(i) }
        return nil
    }
}
