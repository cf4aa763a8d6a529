import FoundationEssentials
import HeraldChinaPush
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `vivo` transport: vivo push's `/message/send` for one device, and `/message/saveListPayload`
/// then `/message/pushToList` for up to 1000, with the `authToken` header from `/message/auth`
/// (MD5-signed, lasting 24 h, shared and refreshed an hour early), through the shared
/// China-vendor delivery loop (``ChinaPushEngine``).
public final class VivoTransport: ChinaPushTransport {
    public typealias Configuration = VivoConfiguration
    public static let kind = "vivo"
    public static let overrideBlocks = ["vivo"]

    public static func configuration(from node: ConfigNode) -> VivoConfiguration? { VivoConfiguration.read(node) }

    public let name: String
    public let configuration: VivoConfiguration
    public let engine: ChinaPushEngine

    public init(name: String, configuration: VivoConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        engine = ChinaPushEngine(name: name, vendor: try VivoVendor(configuration: configuration, name: name, context: context), context: context)
    }

    public var stopDeadline: TimeInterval { configuration.connection.timeout }

    public func checkReport() async -> [CheckFinding] {
        var findings = [CheckFinding(.ok, "vivo app \(configuration.appID), appKey and appSecret set")]
        if configuration.testMode { findings.append(CheckFinding(.warning, "testMode: only the app's registered test devices get notifications")) }
        return findings
    }
}

/// vivo's wire protocol: the signed auth request, the sends, and how each answer maps.
final class VivoVendor: ChinaPushVendor {
    let label = "vivo"
    let maxBatch = 1000
    /// vivo's tokens last 24 h: refresh an hour before.
    let refreshMargin: TimeInterval = 3600
    let connection: VendorHTTP
    private let configuration: VivoConfiguration
    private let clock: any WallClock

    init(configuration: VivoConfiguration, name: String, context: TransportContext) throws {
        self.configuration = configuration
        connection = try VendorHTTP(configuration.connection, name: name, context: context)
        clock = context.clock
    }

    /// `sign` = lower-case hex MD5 of appId + appKey + timestamp + appSecret.
    static func sign(appID: String, appKey: String, timestamp: String, appSecret: String) -> String {
        MD5.hex(Array((appID + appKey + timestamp + appSecret).utf8))
    }

    func fetchAccessToken() async -> TokenGrant {
        let timestamp = String(Int64(clock.now.timeIntervalSince1970 * 1000))
        let body: JSONValue = ["appId": .string(configuration.appID), "appKey": .string(configuration.appKey.value),
                               "timestamp": .string(timestamp),
                               "sign": .string(Self.sign(appID: configuration.appID, appKey: configuration.appKey.value, timestamp: timestamp,
                                                         appSecret: configuration.appSecret.value))]
        let result = await connection.post("/message/auth", headers: [VendorHTTP.jsonType], body: Array(body.jsonString.utf8))
        guard case .answered(let r) = result else {
            if case .badCredentials(let reason)? = VendorAnswer.transportFailure(result, vendor: "vivo") { return .refused(reason) }
            return .temporary("no answer from vivo's auth endpoint", retryAfter: nil)
        }
        guard r.status < 500, let json = VendorJSON(r.body), let code = json.int("result") else {
            return .temporary("vivo's auth endpoint answered HTTP \(r.status)", retryAfter: r.retryAfter)
        }
        let desc = json.string("desc").map(VendorText.clip) ?? ""
        if code == 0, let token = json.string("authToken"), !token.isEmpty { return .token(Secret(token), lifetime: 86_400) }
        if code == 10250 || code == -1 { return .temporary("vivo auth \(code) \(desc)", retryAfter: nil) }
        return .refused("vivo auth answered \(code) \(desc) (check appId, appKey and appSecret)")
    }

    /// A unique `requestId` (vivo drops a repeated one as a duplicate).
    private func requestID() -> String { String(UUIDSource.random().lowercasedString.filter { $0 != "-" }) }

    var http: VendorHTTP? { connection }

    /// The message with its time to live, as sent.
    private func message(_ group: [Delivery]) -> [String: JSONValue]? {
        guard let first = group.first, var message = (try? JSONValue.parse(first.payload.body))?.objectValue else { return nil }
        if let e = first.payload.expiration {
            // Seconds, from 60 to 7 days.
            let seconds = e == 0 ? 60 : max(60, e - Int64(clock.now.timeIntervalSince1970))
            message["timeToLive"] = .number(Double(min(seconds, 604_800)))
        }
        return message
    }

    private func headers(_ accessToken: Secret?) -> [HTTP2Header] { [HTTP2Header("authtoken", accessToken?.value ?? ""), VendorHTTP.jsonType] }

    /// `/message/send` for one device; `nil` for more (``send(_:accessToken:)``: two requests).
    func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request? {
        guard group.count == 1, var message = message(group) else { return nil }
        message["regId"] = .string(group[0].token)
        message["requestId"] = .string(requestID())
        return connection.request("/message/send", headers: headers(accessToken), body: Array(JSONValue.object(message).jsonString.utf8))
    }

    func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer { Self.answer(result, group: group, now: clock.now) }

    /// `/message/saveListPayload`, then `/message/pushToList` with the task id.
    func send(_ group: [Delivery], accessToken: Secret?) async -> VendorAnswer {
        guard var message = message(group) else { return .rejected("the rendered vivo message cannot be read") }
        if group.count == 1, let request = request(for: group, accessToken: accessToken) {
            return answer(await connection.send([request])[0], for: group)
        }
        let headers = headers(accessToken)
        message["requestId"] = .string(requestID())
        let saved = await connection.post("/message/saveListPayload", headers: headers, body: Array(JSONValue.object(message).jsonString.utf8))
        let taskID: String
        switch Self.savedTask(saved, group: group, now: clock.now) {
        case .success(let id): taskID = id
        case .failure(let refusal): return refusal.answer
        }
        let push: JSONValue = ["regIds": .array(group.map { .string($0.token) }), "taskId": .string(taskID), "requestId": .string(requestID()),
                               "pushMode": message["pushMode"] ?? 0]
        let result = await connection.post("/message/pushToList", headers: headers, body: Array(push.jsonString.utf8))
        return Self.answer(result, group: group, now: clock.now, taskID: taskID)
    }

    struct Refusal: Error { var answer: VendorAnswer }

    /// Reads `saveListPayload`'s answer: the task id, or what to do instead.
    static func savedTask(_ result: HTTP2Result, group: [Delivery], now: Date) -> Result<String, Refusal> {
        let answer = Self.answer(result, group: group, now: now)
        guard case .outcomes = answer, case .answered(let r) = result, let id = VendorJSON(r.body)?.string("taskId") else {
            if case .outcomes = answer { return .failure(Refusal(answer: .temporary("vivo saved the payload without a taskId", retryAfter: nil))) }
            return .failure(Refusal(answer: answer))
        }
        return .success(id)
    }

    /// Maps vivo's answer (pure). `taskID`: the list task's id (`pushToList`'s receipt).
    static func answer(_ result: HTTP2Result, group: [Delivery], now: Date, taskID: String? = nil) -> VendorAnswer {
        if let failure = VendorAnswer.transportFailure(result, vendor: "vivo") { return failure }
        guard case .answered(let r) = result else { return .temporary("no answer from vivo", retryAfter: nil) }
        guard let json = VendorJSON(r.body), let code = json.int("result") else {
            return .temporary("vivo answered HTTP \(r.status) without a result", retryAfter: nil)
        }
        let desc = json.string("desc").map(VendorText.clip) ?? ""
        switch code {
        case 0:
            let receipt = taskID ?? json.string("taskId")
            // invalidUsers: [{"status": 1 (no such regId) | 2 (app uninstalled) | 3 (push off) | 4 (not a test device), "userid"}].
            var invalid: [String: Int] = [:]
            for entry in json["invalidUsers"]?.arrayValue ?? [] {
                if let user = VendorJSON.string(entry["userid"]) { invalid[user] = VendorJSON.int(entry["status"]) ?? 0 }
            }
            return .outcomes(group.map { d in
                guard let status = invalid[d.token] else { return .delivered(receipt: receipt) }
                switch status {
                case 1, 2: return .tokenInvalid(since: now, reason: "vivo: invalidUsers status \(status)")
                default: return .rejected(reason: "vivo: invalidUsers status \(status) (\(status == 3 ? "the user turned push off" : status == 4 ? "not a test device" : "refused"))")
                }
            })
        case 10302:
            return .outcomes(group.map { _ in .tokenInvalid(since: now, reason: "vivo: 10302 \(desc)") })
        case 10000:
            return .accessTokenExpired("vivo 10000 \(desc)")
        case 10200, 10206:
            return .badCredentials("vivo answered \(code) \(desc): check appId, appKey and appSecret")
        case 10252:
            return .rateLimited("vivo 10252 \(desc)", retryAfter: nil)
        case 10070:
            return .dailyQuota("vivo 10070 \(desc)")
        case -1:
            return .temporary("vivo answered -1 \(desc)", retryAfter: nil)
        default:
            return .rejected("vivo answered \(code) \(desc)")
        }
    }
}
