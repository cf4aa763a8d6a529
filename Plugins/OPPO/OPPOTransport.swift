import FoundationEssentials
import HeraldChinaPush
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `oppo` transport: OPPO push's `unicast` for one device and `unicast_batch` for up to 1000,
/// with an `auth_token` from `/server/v1/auth` (signed with the master secret, lasting 24 h, shared
/// and refreshed an hour early) in each request's form, through the shared China-vendor delivery
/// loop (``ChinaPushEngine``).
public final class OPPOTransport: ChinaPushTransport {
    public typealias Configuration = OPPOConfiguration
    public static let kind = "oppo"
    public static let overrideBlocks = ["oppo"]

    public static func configuration(from node: ConfigNode) -> OPPOConfiguration? { OPPOConfiguration.read(node) }

    public let name: String
    public let configuration: OPPOConfiguration
    public let engine: ChinaPushEngine

    public init(name: String, configuration: OPPOConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        engine = ChinaPushEngine(name: name, vendor: try OPPOVendor(configuration: configuration, name: name, context: context), context: context)
    }

    public var stopDeadline: TimeInterval { configuration.connection.timeout }

    public func checkReport() async -> [CheckFinding] {
        var findings = [CheckFinding(.ok, "OPPO app key \(configuration.appKey), masterSecret set")]
        if configuration.channelID == nil {
            findings.append(CheckFinding(.warning, "no channelId: OPPO phones on Android 8 or later show notifications only in a channel the app created"))
        }
        return findings
    }
}

/// OPPO's wire protocol: the signed auth request, the sends, and how each answer maps.
final class OPPOVendor: ChinaPushVendor {
    let label = "OPPO"
    let maxBatch = 1000
    /// OPPO's tokens last 24 h: refresh an hour before.
    let refreshMargin: TimeInterval = 3600
    let connection: VendorHTTP
    private let configuration: OPPOConfiguration
    private let clock: any WallClock

    init(configuration: OPPOConfiguration, name: String, context: TransportContext) throws {
        self.configuration = configuration
        connection = try VendorHTTP(configuration.connection, name: name, context: context)
        clock = context.clock
    }

    /// `sign` = lower-case hex SHA-256 of appKey + timestamp + masterSecret.
    static func sign(appKey: String, timestamp: String, masterSecret: String) -> String {
        hex(SHA256.hash(Array((appKey + timestamp + masterSecret).utf8)))
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }

    func fetchAccessToken() async -> TokenGrant {
        let timestamp = String(Int64(clock.now.timeIntervalSince1970 * 1000))
        let form = FormBody([("app_key", configuration.appKey), ("timestamp", timestamp),
                             ("sign", Self.sign(appKey: configuration.appKey, timestamp: timestamp, masterSecret: configuration.masterSecret.value))])
        let result = await connection.post("/server/v1/auth", headers: [VendorHTTP.formType], body: form.bytes)
        guard case .answered(let r) = result else {
            if case .badCredentials(let reason)? = VendorAnswer.transportFailure(result, vendor: "OPPO") { return .refused(reason) }
            return .temporary("no answer from OPPO's auth endpoint", retryAfter: nil)
        }
        guard r.status < 500, let json = VendorJSON(r.body), let code = json.int("code") else {
            return .temporary("OPPO's auth endpoint answered HTTP \(r.status)", retryAfter: r.retryAfter)
        }
        let message = json.string("message").map(VendorText.clip) ?? ""
        if code == 0, let token = VendorJSON.string(json["data"]?["auth_token"]), !token.isEmpty {
            return .token(Secret(token), lifetime: 86_400)
        }
        if code == -1 || code == -2 { return .temporary("OPPO auth \(code) \(message)", retryAfter: nil) }
        return .refused("OPPO auth answered \(code) \(message) (check appKey and masterSecret)")
    }

    var http: VendorHTTP? { connection }

    func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request? {
        guard let first = group.first, var notification = (try? JSONValue.parse(first.payload.body))?.objectValue else { return nil }
        if let e = first.payload.expiration {
            let seconds = e == 0 ? 0 : max(0, e - Int64(clock.now.timeIntervalSince1970))
            notification["off_line_ttl"] = .number(Double(min(seconds, 864_000)))
        }
        func message(_ token: String) -> JSONValue {
            ["target_type": 2, "target_value": .string(token), "notification": .object(notification)]
        }
        var form = FormBody()
        let path: String
        if group.count == 1 {
            path = "/server/v1/message/notification/unicast"
            form.append("message", message(first.token).jsonString)
        } else {
            path = "/server/v1/message/notification/unicast_batch"
            form.append("messages", JSONValue.array(group.map { message($0.token) }).jsonString)
        }
        form.append("auth_token", accessToken?.value ?? "")
        return connection.request(path, headers: [VendorHTTP.formType], body: form.bytes)
    }

    func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer {
        Self.answer(result, group: group, batch: group.count > 1, now: clock.now)
    }

    /// Maps OPPO's answer (pure).
    static func answer(_ result: HTTP2Result, group: [Delivery], batch: Bool, now: Date) -> VendorAnswer {
        if let failure = VendorAnswer.transportFailure(result, vendor: "OPPO") { return failure }
        guard case .answered(let r) = result else { return .temporary("no answer from OPPO", retryAfter: nil) }
        guard let json = VendorJSON(r.body), let code = json.int("code") else {
            return .temporary("OPPO answered HTTP \(r.status) without a code", retryAfter: nil)
        }
        let message = json.string("message").map(VendorText.clip) ?? ""
        switch code {
        case 0:
            if !batch {
                return .outcomes([.delivered(receipt: VendorJSON.string(json["data"]?["messageId"]))])
            }
            // One entry per message: {"messageId","registrationId","errorCode","errorMessage"}.
            var entries: [String: JSONValue] = [:]
            for entry in json["data"]?.arrayValue ?? [] {
                if let id = VendorJSON.string(entry["registrationId"]) { entries[id] = entry }
            }
            return .outcomes(group.map { d in
                guard let entry = entries[d.token] else { return .retry(after: nil, reason: "OPPO's batch answer does not name this device") }
                let error = VendorJSON.int(entry["errorCode"]) ?? 0
                switch error {
                case 0: return .delivered(receipt: VendorJSON.string(entry["messageId"]))
                case 10000: return .tokenInvalid(since: now, reason: "OPPO: 10000 invalid registration id")
                default:
                    return .rejected(reason: "OPPO answered \(error) \(VendorJSON.string(entry["errorMessage"]).map(VendorText.clip) ?? "")")
                }
            })
        case 10000:
            return .outcomes(group.map { _ in .tokenInvalid(since: now, reason: "OPPO: 10000 \(message)") })
        case 11:
            return .accessTokenExpired("OPPO 11 \(message)")
        case 14, 16:
            return .badCredentials("OPPO answered \(code) \(message): check appKey and masterSecret")
        case -2, 55:
            return .rateLimited("OPPO \(code) \(message)", retryAfter: nil)
        case 13, 33:
            return .dailyQuota("OPPO \(code) \(message)")
        case -1:
            return .temporary("OPPO answered -1 \(message)", retryAfter: nil)
        default:
            return .rejected("OPPO answered \(code) \(message)")
        }
    }
}
