import FoundationEssentials
import HeraldChinaPush
import HeraldCore
import HeraldHTTP2

/// The `xiaomi` transport: Xiaomi push's `POST /v3/message/regid`, one form post per notification
/// for up to 1000 registration ids, with `Authorization: key=<appSecret>` on each, through the
/// shared China-vendor delivery loop (``ChinaPushEngine``).
public final class XiaomiTransport: ChinaPushTransport {
    public typealias Configuration = XiaomiConfiguration
    public static let kind = "xiaomi"
    public static let overrideBlocks = ["xiaomi"]

    public static func configuration(from node: ConfigNode) -> XiaomiConfiguration? { XiaomiConfiguration.read(node) }

    public let name: String
    public let configuration: XiaomiConfiguration
    public let engine: ChinaPushEngine

    public init(name: String, configuration: XiaomiConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        engine = ChinaPushEngine(name: name, vendor: try XiaomiVendor(configuration: configuration, name: name, context: context), context: context)
    }

    public var stopDeadline: TimeInterval { configuration.connection.timeout }

    public func checkReport() async -> [CheckFinding] {
        var findings = [CheckFinding(.ok, "Xiaomi app \(configuration.packageName), appSecret set")]
        if configuration.systemChannelID == nil {
            findings.append(CheckFinding(.info, "no systemChannelId: system messages go without extra.channel_id, and Xiaomi counts them as public (operational) messages"))
        }
        return findings
    }
}

/// Xiaomi's wire protocol: the form post and how each answer maps.
final class XiaomiVendor: ChinaPushVendor {
    let label = "Xiaomi"
    let maxBatch = 1000
    let usesAccessToken = false
    let connection: VendorHTTP
    private let headers: [HTTP2Header]
    private let clock: any WallClock

    init(configuration: XiaomiConfiguration, name: String, context: TransportContext) throws {
        connection = try VendorHTTP(configuration.connection, name: name, context: context)
        headers = [HTTP2Header("authorization", "key=" + configuration.appSecret.value), VendorHTTP.formType]
        clock = context.clock
    }

    var http: VendorHTTP? { connection }

    func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request? {
        guard let first = group.first, let fields = (try? JSONValue.parse(first.payload.body))?.objectValue else { return nil }
        var form = FormBody()
        form.append("registration_id", group.map(\.token).joined(separator: ","))
        for key in fields.keys.sorted() { form.append(key, fields[key]?.stringValue ?? "") }
        if let e = first.payload.expiration {
            // Milliseconds; Xiaomi keeps a message at most two weeks.
            let seconds = e == 0 ? 0 : max(0, e - Int64(clock.now.timeIntervalSince1970))
            form.append("time_to_live", String(min(seconds, 1_209_600) * 1000))
        }
        return connection.request("/v3/message/regid", headers: headers, body: form.bytes)
    }

    func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer { Self.answer(result, group: group, now: clock.now) }

    /// Maps Xiaomi's answer to one send (pure).
    static func answer(_ result: HTTP2Result, group: [Delivery], now: Date) -> VendorAnswer {
        if let failure = VendorAnswer.transportFailure(result, vendor: "Xiaomi") { return failure }
        guard case .answered(let r) = result else { return .temporary("no answer from Xiaomi", retryAfter: nil) }
        guard let json = VendorJSON(r.body), let code = json.int("code") else {
            return .temporary("Xiaomi answered HTTP \(r.status) without a code", retryAfter: nil)
        }
        let reason = (json.string("reason") ?? json.string("description")).map(VendorText.clip) ?? ""
        switch code {
        case 0:
            let data = json["data"]
            let id = VendorJSON.string(data?["id"])
            let bad = Set((VendorJSON.string(data?["bad_regids"]) ?? "").split(separator: ",").map(String.init))
            return .outcomes(BatchOutcomes.map(group, invalid: bad, receipt: id, now: now, vendor: "Xiaomi", reason: "bad_regids"))
        case 20301:
            return .outcomes(group.map { _ in .tokenInvalid(since: now, reason: "Xiaomi: 20301 \(reason)") })
        case 21301:
            return .badCredentials("Xiaomi answered 21301 (authentication failed): check appSecret")
        case 10027:
            return .rateLimited("Xiaomi 10027 \(reason)", retryAfter: nil)
        case 10034, 200001:
            return .dailyQuota("Xiaomi \(code) \(reason)")
        case -1:
            return .temporary("Xiaomi answered -1 \(reason)", retryAfter: nil)
        default:
            return .rejected("Xiaomi answered \(code) \(reason)")
        }
    }
}
