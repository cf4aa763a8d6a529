import FoundationEssentials
import HeraldChinaPush
import HeraldCore
import HeraldHTTP2

/// The `hms` transport: Huawei Push Kit's `messages:send`, one call per notification for up to
/// 1000 tokens, with an OAuth 2.0 client-credentials access token (``HMSVendor``) and the shared
/// China-vendor delivery loop (``ChinaPushEngine``): per-token answers from `illegal_tokens`,
/// a refreshed token after 80200003/80200001, a pause on refused credentials, and 503's flow
/// control retried with backoff.
public final class HMSTransport: ChinaPushTransport {
    public typealias Configuration = HMSConfiguration
    public static let kind = "hms"
    public static let overrideBlocks = ["hms"]

    public static func configuration(from node: ConfigNode) -> HMSConfiguration? { HMSConfiguration.read(node) }

    public let name: String
    public let configuration: HMSConfiguration
    public let engine: ChinaPushEngine

    public init(name: String, configuration: HMSConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        engine = ChinaPushEngine(name: name, vendor: try HMSVendor(configuration: configuration, name: name, context: context), context: context)
    }

    public var stopDeadline: TimeInterval { configuration.connection.timeout }

    public func checkReport() async -> [CheckFinding] {
        [CheckFinding(.ok, "Huawei app \(configuration.appID), appSecret set; tokens from \(configuration.authEndpoint)")]
    }
}

/// Push Kit's wire protocol: the token request, the send, and how each answer maps.
final class HMSVendor: ChinaPushVendor {
    let label = "HMS"
    let maxBatch = 1000
    private let configuration: HMSConfiguration
    private let push: VendorHTTP
    private let auth: VendorHTTP
    private let clock: any WallClock
    private let path: String

    init(configuration: HMSConfiguration, name: String, context: TransportContext) throws {
        self.configuration = configuration
        clock = context.clock
        push = try VendorHTTP(configuration.connection, name: name, context: context)
        var authConnection = configuration.connection.with(endpoint: configuration.authEndpoint)
        authConnection.connections = 1
        auth = try VendorHTTP(authConnection, name: "\(name)-oauth", context: context)
        path = "/v1/\(configuration.appID)/messages:send"
    }

    func start() throws(HTTP2ClientError) {
        try push.start()
        try auth.start()
    }

    func stop(deadline: TimeInterval) async {
        await push.stop(deadline: deadline)
        await auth.stop(deadline: deadline)
    }

    func fetchAccessToken() async -> TokenGrant {
        let form = FormBody([("grant_type", "client_credentials"), ("client_id", configuration.appID),
                             ("client_secret", configuration.appSecret.value)])
        let result = await auth.post("", headers: [VendorHTTP.formType], body: form.bytes)
        return Self.grant(result)
    }

    /// Reads the token endpoint's answer (pure).
    static func grant(_ result: HTTP2Result) -> TokenGrant {
        guard case .answered(let r) = result else {
            switch VendorAnswer.transportFailure(result, vendor: "the HMS token endpoint") {
            case .badCredentials(let reason)?: return .refused(reason)
            case .rejected(let reason)?: return .refused(reason)
            default: return .temporary("no answer from the HMS token endpoint", retryAfter: nil)
            }
        }
        let json = VendorJSON(r.body)
        if r.status == 200, let token = json?.string("access_token"), !token.isEmpty {
            let lifetime = Double(json?.int("expires_in") ?? 3600)
            return .token(Secret(token), lifetime: max(lifetime, 1))
        }
        let error = json?.string("error").map { "error \($0)" } ?? "HTTP \(r.status)"
        let description = json?.string("error_description").map { ": " + VendorText.clip($0) } ?? ""
        if r.status >= 500 || r.status == 429 || r.status == 408 {
            return .temporary("\(error) (\(r.status))\(description)", retryAfter: r.retryAfter)
        }
        return .refused("\(error) (\(r.status))\(description)")
    }

    var http: VendorHTTP? { push }

    func request(for group: [Delivery], accessToken: Secret?) -> HTTP2Request? {
        guard let first = group.first, var message = (try? JSONValue.parse(first.payload.body))?.objectValue else { return nil }
        message["token"] = .array(group.map { .string($0.token) })
        if let e = first.payload.expiration, case .object(var android)? = message["android"] {
            let seconds = e == 0 ? 0 : max(0, e - Int64(clock.now.timeIntervalSince1970))
            android["ttl"] = .string("\(min(seconds, 1_296_000))s")
            message["android"] = .object(android)
        }
        var w = JSONWriter(capacity: first.payload.body.count + group.count * 140 + 64)
        w.raw(#"{"message":"#)
        w.write(.object(message))
        w.raw(#","validate_only":false}"#)
        return push.request(path, headers: [HTTP2Header("authorization", "Bearer " + (accessToken?.value ?? "")), VendorHTTP.jsonType], body: w.bytes)
    }

    func answer(_ result: HTTP2Result, for group: [Delivery]) -> VendorAnswer { Self.answer(result, group: group, now: clock.now) }

    /// Maps Push Kit's answer to one send (pure).
    static func answer(_ result: HTTP2Result, group: [Delivery], now: Date) -> VendorAnswer {
        if case .answered(let r) = result, r.status == 503 {
            return .rateLimited("HMS flow control (503)", retryAfter: r.retryAfter)
        }
        if let failure = VendorAnswer.transportFailure(result, vendor: "HMS") { return failure }
        guard case .answered(let r) = result else { return .temporary("no answer from HMS", retryAfter: nil) }
        guard let json = VendorJSON(r.body), let code = json.string("code") else {
            if r.status == 401 || r.status == 403 { return .accessTokenExpired("HTTP \(r.status) without a code") }
            return .temporary("HMS answered HTTP \(r.status) without a code", retryAfter: nil)
        }
        let msg = json.string("msg").map(VendorText.clip) ?? ""
        let requestID = json.string("requestId")
        switch code {
        case "80000000":
            return .outcomes(group.map { _ in .delivered(receipt: requestID) })
        case "80100000":
            // Some tokens are right: msg is a JSON string {"success":n,"failure":m,"illegal_tokens":[…]}.
            let detail = json.string("msg").flatMap { try? JSONValue.parse($0) }
            let illegal = Set(detail?["illegal_tokens"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            return .outcomes(BatchOutcomes.map(group, invalid: illegal, receipt: requestID, now: now, vendor: "HMS",
                                               reason: "80100000 illegal_tokens"))
        case "80300007":
            return .outcomes(group.map { _ in .tokenInvalid(since: now, reason: "HMS: 80300007 Invalid Token") })
        case "80200001", "80200003":
            return .accessTokenExpired("\(code) \(msg)")
        case "80300002":
            return .badCredentials("HMS answered 80300002: the app may not send push messages (check Push Kit is enabled for app id)")
        case "81000001":
            return .temporary("HMS answered 81000001 \(msg)", retryAfter: nil)
        default:
            return .rejected("HMS answered \(code) \(msg)")
        }
    }
}
