import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `webpush` transport's configuration (its `transports.<name>` section).
///
/// ```json
/// "web": {"type": "webpush", "vapidKey": "${VAPID_PRIVATE_KEY}", "subject": "mailto:push@example.com"}
/// ```
/// The key is loaded while the configuration is read, so `herald check` reports an unusable
/// key or subject with its JSON path (never the key).
public struct WebPushConfiguration: TransportConfiguration {
    /// The VAPID key (`vapidKey`): a P-256 private key.
    public var vapidKey: P256PrivateKey
    /// Where the key came from, for `herald check` (a file path, or "base64url text").
    public var vapidKeySource: String
    /// The VAPID `sub` (`subject`): `mailto:` or `https:`.
    public var subject: String
    /// The push services subscriptions may name (`allowedEndpoints`).
    public var allowedEndpoints: EndpointAllowList
    /// `TTL` for a notification without an expiration (`ttl`). Default 1 day.
    public var defaultTTL: Int = 86_400
    /// Extra CA file to trust (`caFile`, for simulators); TLS verification is always on.
    public var caFile: String?
    /// Deadline of one request, from its start to its answer (`timeout`). Default 10 s.
    public var timeout: TimeInterval = 10
    /// Connections per push service (`connections`). Default 1 (HTTP/2 multiplexes); an
    /// HTTP/1.1 service gets this many.
    public var connections: Int = 1
    /// Streams in flight per connection (`maxConcurrentStreams`), capped by the service's SETTINGS. Default 100.
    public var maxConcurrentStreams: Int = 100
    /// The HTTP/2 client library (`engine`): `nghttp2` (default, the least CPU per message) or
    /// `curl`. Either way a push service that offers no HTTP/2 is reached over HTTP/1.1 (libcurl).
    public var engine: HTTP2Engine = .nghttp2
    /// A push service's client (its connections, thread and state) unused this long is closed
    /// and dropped; the next delivery there opens a new one (`idleTimeout`). Default 5 min.
    public var idleTimeout: TimeInterval = 300
    /// Lifetime of each VAPID JWT (`vapidLifetime`), 10 min to 24 h. Default 12 h.
    public var vapidLifetime: TimeInterval = VAPIDSigner.defaultLifetime
    /// How many different subscriptions a push service must refuse with 401/403, having
    /// accepted none, before it is paused as refusing the VAPID key (`refusalsToPause`). Default 3.
    public var refusalsToPause: Int = 3
    /// How often a paused push service is sent one delivery to see whether it accepts again (`probeInterval`). Default 60 s.
    public var probeInterval: TimeInterval = 60
    /// Longest backoff of a push service after 429, 5xx or no answer (`maxBackoff`). Default 300 s.
    public var maxBackoff: TimeInterval = 300

    /// The longest `TTL` push services keep a message: 28 days.
    public static let maxTTL = 28 * 86_400

    public var platform: Platform? { .web }

    /// The route's public client key: the VAPID public key pages pass to
    /// `PushManager.subscribe` as `applicationServerKey` (unpadded base64url).
    public var publicClientKey: String? { vapidKey.publicKey.base64URL }

    public var summary: String {
        "VAPID key \(vapidKeySource) (public \(vapidKey.publicKey.base64URL.prefix(12))…), subject \(subject), push services \(allowedEndpoints)"
    }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        let subscription: WebPushSubscription
        switch input {
        case .subscription(let json): subscription = try WebPushSubscription(json: json, allowList: allowedEndpoints)
        case .token(let text): subscription = try WebPushSubscription(stored: text, allowList: allowedEndpoints)
        }
        return DeviceAddress(token: subscription.canonicalJSON)
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try WebPushRendering.render(content, context: context, defaultTTL: defaultTTL)
    }

    public init(vapidKey: P256PrivateKey, vapidKeySource: String, subject: String, allowedEndpoints: EndpointAllowList) {
        self.vapidKey = vapidKey
        self.vapidKeySource = vapidKeySource
        self.subject = subject
        self.allowedEndpoints = allowedEndpoints
    }

    /// Reads and validates the section; loads the key.
    static func read(_ node: ConfigNode) -> WebPushConfiguration? {
        let key = readKey(node)
        var subject = node.string("subject", required: true)
        if let s = subject {
            do throws(VAPIDError) { try VAPIDSigner.validateSubject(s) } catch {
                node.error(at: "subject", error.description)
                subject = nil
            }
        }
        var allowList: EndpointAllowList? = try? EndpointAllowList(EndpointAllowList.browserDefaults)
        if let patterns = node.stringArray("allowedEndpoints", nonEmpty: true) {
            do throws(EndpointAllowList.AllowListProblem) { allowList = try EndpointAllowList(patterns) } catch {
                let elements = node.child("allowedEndpoints")?.elements() ?? []
                if error.index < elements.count { elements[error.index].error(error.message) } else { node.error(at: "allowedEndpoints", error.message) }
                allowList = nil
            }
        }
        let ttl = node.duration("ttl")
        if let ttl, ttl > Double(maxTTL) { node.error(at: "ttl", "must be at most 28 days (\(maxTTL) seconds), what push services keep") }
        let caFile = node.filePath("caFile")
        let timeout = node.duration("timeout", minimum: 0.01)
        let connections = node.int("connections", in: 1...64)
        let streams = node.int("maxConcurrentStreams", in: 1...10_000)
        let lifetime = node.duration("vapidLifetime")
        if let lifetime, !(VAPIDSigner.minimumLifetime...VAPIDSigner.maxLifetime).contains(lifetime) {
            node.error(at: "vapidLifetime", "must be between 10 minutes and 24 hours (push services refuse a longer exp)")
        }
        let refusals = node.int("refusalsToPause", in: 1...1000)
        let probe = node.duration("probeInterval", minimum: 0.01)
        let maxBackoff = node.duration("maxBackoff", minimum: 0.01)
        let engine = node.oneOf("engine", HTTP2Engine.self)
        let idle = node.duration("idleTimeout", minimum: 1)
        guard let key, let subject, let allowList else { return nil }
        var c = WebPushConfiguration(vapidKey: key.key, vapidKeySource: key.source, subject: subject, allowedEndpoints: allowList)
        if let ttl, ttl <= Double(maxTTL) { c.defaultTTL = Int(ttl) }
        c.caFile = caFile
        if let timeout { c.timeout = timeout }
        if let connections { c.connections = connections }
        if let streams { c.maxConcurrentStreams = streams }
        if let lifetime, (VAPIDSigner.minimumLifetime...VAPIDSigner.maxLifetime).contains(lifetime) { c.vapidLifetime = lifetime }
        if let refusals { c.refusalsToPause = refusals }
        if let probe { c.probeInterval = probe }
        if let maxBackoff { c.maxBackoff = maxBackoff }
        if let engine { c.engine = engine }
        if let idle { c.idleTimeout = idle }
        return c
    }

    /// `vapidKey`: base64url of the raw 32-byte key (usually `${ENV}`), PEM text, or a PEM file.
    private static func readKey(_ node: ConfigNode) -> (key: P256PrivateKey, source: String)? {
        guard let text = node.secret("vapidKey", required: true)?.value else { return nil }
        let trimmed = text.trimmingWhitespace()
        do {
            if trimmed.hasPrefix("-----BEGIN") {
                return (try P256PrivateKey(pem: trimmed), "PEM text")
            }
            // Key text has no dot or slash; a path to a PEM file has one.
            if trimmed.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "=" || $0 == "+") }) {
                return (try P256PrivateKey(base64URL: trimmed, source: node.path(of: "vapidKey")), "base64url text")
            }
            guard let path = node.filePath("vapidKey", required: true) else { return nil }
            return (try P256PrivateKey(pemFile: path), path)
        } catch {
            node.error(at: "vapidKey", error.message + "; give a P-256 PEM file, or base64url of the raw key in an environment variable (\"${VAPID_PRIVATE_KEY}\")")
            return nil
        }
    }
}
