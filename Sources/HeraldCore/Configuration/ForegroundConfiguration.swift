import FoundationEssentials

/// `apps.<id>.inbox`: notifications kept for a user until a stream replays them.
public struct InboxConfiguration: Sendable, Equatable {
    /// How long an entry waits before it ends `expired`. Default 86400 s (a day).
    public var ttl: TimeInterval = 86_400
    /// Most entries kept per user of the app; the oldest go first. Default 100.
    public var maxPerUser: Int = 100

    public init(ttl: TimeInterval = 86_400, maxPerUser: Int = 100) {
        self.ttl = ttl
        self.maxPerUser = maxPerUser
    }

    init(node: JSONNode) {
        guard case .object = node.value else {
            node.error("expected an object with \"ttl\" and \"maxPerUser\", found \(node.value.typeDescription)")
            return
        }
        if let t = node.positiveDuration("ttl") { ttl = t }
        if let n = node.int("maxPerUser", in: 1...1_000_000) { maxPerUser = n }
    }
}

/// `api.streams`: the live event streams of `GET /v1/stream`.
public struct StreamsConfiguration: Sendable, Equatable {
    /// Seconds between heartbeat comments (they also find dead connections). Default 15.
    public var heartbeat: TimeInterval = 15
    /// Most streams open at once; more are refused with 503. Default 10000.
    public var maxStreams: Int = 10_000
    /// Bytes a stream may have unsent before its client counts as stalled and is disconnected
    /// (what it missed stays in the inbox). Default 65536.
    public var bufferBytes: Int = 65_536
    /// Most streams one device holds; a newer stream replaces the device's oldest. Default 2.
    public var maxPerDevice: Int = StreamsConfiguration.defaultMaxPerDevice
    /// Most streams one user holds per app; past it a new stream is refused (429). Default 20.
    public var maxPerUser: Int = StreamsConfiguration.defaultMaxPerUser

    /// `maxPerDevice`'s default: an app and one reconnect overlapping its dying stream.
    public static let defaultMaxPerDevice = 2
    /// `maxPerUser`'s default.
    public static let defaultMaxPerUser = 20
    /// `apps.<id>.ackTimeout`'s default, in seconds. An ack on loopback comes back in about a
    /// millisecond; a phone on a poor cellular link needs a new connection (TCP and TLS, three
    /// round trips of up to ~500 ms) before its first ack. 3 s covers that with room, and is the
    /// longest a frozen app's notification waits before its push.
    public static let defaultAckTimeout: TimeInterval = 3

    public init(heartbeat: TimeInterval = 15, maxStreams: Int = 10_000, bufferBytes: Int = 65_536,
                maxPerDevice: Int = StreamsConfiguration.defaultMaxPerDevice, maxPerUser: Int = StreamsConfiguration.defaultMaxPerUser) {
        self.heartbeat = heartbeat
        self.maxStreams = maxStreams
        self.bufferBytes = bufferBytes
        self.maxPerDevice = maxPerDevice
        self.maxPerUser = maxPerUser
    }

    init(node: JSONNode) {
        guard case .object = node.value else {
            node.error("expected an object with \"heartbeat\", \"maxStreams\", \"bufferBytes\", \"maxPerDevice\" and \"maxPerUser\", found \(node.value.typeDescription)")
            return
        }
        if let h = node.positiveDuration("heartbeat") { heartbeat = h }
        if let n = node.int("maxStreams", in: 1...1_000_000) { maxStreams = n }
        if let n = node.int("bufferBytes", in: 256...(64 << 20)) { bufferBytes = n }
        if let n = node.int("maxPerDevice", in: 1...100) { maxPerDevice = n }
        if let n = node.int("maxPerUser", in: 1...1_000_000) { maxPerUser = n }
    }
}

extension AppConfiguration {
    /// The shortest `clientSecret` accepted, in bytes.
    public static let minimumClientSecretBytes = 32

    /// Reads `foreground`, `clientSecret`, `presenceGrace`, `ackTimeout` and `inbox`.
    mutating func readForeground(_ node: JSONNode) {
        if let f = node.oneOf("foreground", ForegroundPolicy.self) { foreground = f }
        if let secret = node.secret("clientSecret") {
            let bytes = secret.value.utf8.count
            let unset = node.context.errors.contains { $0.path == node.path(of: "clientSecret") }  // ${VAR} not set: said already
            if bytes < Self.minimumClientSecretBytes && !unset {
                node.error(at: "clientSecret", "is too short (\(bytes) bytes); use at least \(Self.minimumClientSecretBytes) random bytes, "
                           + "e.g. the output of `openssl rand -base64 48` in an environment variable")
            } else if !unset {
                clientSecret = secret
            }
        } else if foreground != .pushOnly && !node.has("clientSecret") {
            node.error(at: "clientSecret", "is required when foreground is \"\(foreground.rawValue)\": client tokens for the app's streams "
                       + "are signed with it; add \"clientSecret\": \"${CLIENT_SECRET}\" (at least \(Self.minimumClientSecretBytes) bytes)")
        }
        if let g = node.duration("presenceGrace", minimum: 0) { presenceGrace = g }
        if let t = node.positiveDuration("ackTimeout") { ackTimeout = t }
        if let i = node.child("inbox") { inbox = InboxConfiguration(node: i) }
    }

    /// Reports every app whose `foreground` needs a stream but whose `routes` hold no transport
    /// of type `"local"`. `transports` is the raw `transports` section (a transport that failed
    /// to load still counts by its `type`).
    static func checkLocalRoutes(_ apps: [String: AppConfiguration], transports: JSONValue?, context: JSONReadContext) {
        guard case .object(let defined) = transports else { return }
        let local = Set(defined.compactMap { name, spec in spec["type"] == .string(HeraldConfiguration.localKind) ? name : nil })
        for id in apps.keys.sorted() {
            let app = apps[id]!
            guard app.foreground != .pushOnly, !app.routes.contains(where: local.contains) else { continue }
            let path = JSONNode.childPath(JSONNode.childPath("apps", id), "routes")
            let suggestion = local.sorted().first.map { "add \"\($0)\" to routes" }
                ?? "define one, e.g. \"transports\": {\"local\": {\"type\": \"local\"}}, and add \"local\" to routes"
            context.error(path, "foreground \"\(app.foreground.rawValue)\" needs a transport of type \"local\" among the routes "
                          + "(streams deliver through it); \(suggestion), or set foreground to \"push-only\"")
        }
    }
}

extension JSONNode {
    /// A duration member that must be more than zero seconds.
    func positiveDuration(_ key: String) -> TimeInterval? {
        guard let d = duration(key, minimum: 0) else { return nil }
        guard d > 0 else { error(at: key, "must be more than 0 seconds"); return nil }
        return d
    }
}

extension HeraldConfiguration {
    /// Presence grace and inbox TTL of every app, for the delivery engine's ``OutcomePolicy``.
    public var localDeliveryRules: [String: LocalDeliveryRules] {
        var rules: [String: LocalDeliveryRules] = [:]
        for (id, app) in apps where app.foreground != .pushOnly {
            rules[id] = LocalDeliveryRules(presenceGrace: app.presenceGrace, inboxTTL: app.inbox.ttl)
        }
        return rules
    }
}
