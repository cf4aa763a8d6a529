import FoundationEssentials
import Glibc
import HeraldCore

/// `webhooks`: where Herald POSTs its events (issue 38), read by this module.
///
/// ```json
/// "webhooks": [{"id": "backend", "url": "https://hooks.example.com/herald",
///               "secrets": ["${HERALD_WEBHOOK_SECRET}"], "events": ["delivery", "device.retired"],
///               "apps": ["com.example.app"], "batch": 100, "timeout": "10s", "retention": "72h"}]
/// ```
/// An unknown key, an event type that does not exist, or an app that is not configured is an
/// error naming it.
public struct WebhooksConfiguration: ConfigurationSection, Equatable {
    public static let key = "webhooks"

    /// One receiver.
    public struct Webhook: Sendable, Equatable {
        /// Its name in `Herald-Webhook-Id`, metrics, logs and `herald webhooks`.
        public var id: String
        /// `http` or `https`; fixed by the operator, never by API callers.
        public var url: WebhookURL
        /// Signing secrets, newest first: each gives one `v1=` (rotation: `[new, old]`).
        public var secrets: [Secret]
        /// Types or prefixes (`"delivery"`, `"device.retired"`).
        public var events: [String]
        /// Only these apps' events (events of no app, a transport's, always go); `nil`: every app.
        public var apps: [String]?
        /// Most events in one POST. Default 100.
        public var batch: Int = 100
        /// Time limit of one attempt (connecting, sending, the answer). Default 10 s.
        public var timeout: TimeInterval = 10
        /// How long an event is retried before it is dropped (counted and logged). Default 72 h.
        public var retention: TimeInterval = 72 * 3600
        /// A CA file to trust for `https` instead of the system's store.
        public var caFile: String?

        public init(id: String, url: WebhookURL, secrets: [Secret], events: [String], apps: [String]? = nil,
                    batch: Int = 100, timeout: TimeInterval = 10, retention: TimeInterval = 72 * 3600, caFile: String? = nil) {
            self.id = id
            self.url = url
            self.secrets = secrets
            self.events = events
            self.apps = apps
            self.batch = batch
            self.timeout = timeout
            self.retention = retention
            self.caFile = caFile
        }

        /// The events this webhook takes.
        public var filter: EventFilter { EventFilter(types: events, apps: apps) }
    }

    public var webhooks: [Webhook]

    public init(webhooks: [Webhook]) { self.webhooks = webhooks }

    public init?(node: JSONNode, apps: [String: AppConfiguration]) {
        guard case .array = node.value else {
            node.error("expected an array of webhooks ({\"id\", \"url\", \"secrets\", \"events\"}), found \(node.value.typeDescription)")
            return nil
        }
        var webhooks: [Webhook] = []
        var seen: Set<String> = []
        var ok = true
        for element in node.elements() {
            guard let w = Self.webhook(element, apps: apps) else { ok = false; continue }
            if !seen.insert(w.id).inserted {
                element.error(at: "id", "another webhook has the id \"\(w.id)\"")
                ok = false
            }
            webhooks.append(w)
        }
        guard ok else { return nil }
        self.webhooks = webhooks
    }

    private static func webhook(_ node: JSONNode, apps known: [String: AppConfiguration]) -> Webhook? {
        guard case .object = node.value else {
            node.error("expected an object with \"id\", \"url\", \"secrets\" and \"events\", found \(node.value.typeDescription)")
            return nil
        }
        rejectUnknownKeys(node, known: ["id", "url", "secret", "secrets", "events", "apps", "batch", "timeout", "retention", "caFile"])
        let id = node.string("id", required: true)
        if let id, !id.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) {
            node.error(at: "id", "use letters, digits, \"-\", \"_\" and \".\" only")
        }
        var url: WebhookURL?
        if let text = node.string("url", required: true) {
            do { url = try WebhookURL(text) } catch { node.error(at: "url", "\(error)") }
        }
        var secrets: [Secret] = []
        if node.has("secret") && node.has("secrets") {
            node.error("give \"secret\" or \"secrets\", not both")
        } else if let one = node.secret("secret") {
            secrets = [one]
        } else if let list = node.child("secrets") {
            guard case .array = list.value else {
                list.error("expected an array of secrets such as [\"${NEW}\", \"${OLD}\"] (newest first), found \(list.value.typeDescription)")
                return nil
            }
            for element in list.elements() {
                guard case .string(let s) = element.value, !s.isEmpty else { element.error("expected a non-empty string"); continue }
                secrets.append(Secret(s))
            }
            if secrets.isEmpty { list.error("must hold at least one secret") }
        } else {
            node.error(at: "secrets", "is required (or \"secret\"): the key each POST is signed with, such as \"${HERALD_WEBHOOK_SECRET}\"")
        }
        var events: [String] = []
        if let list = node.stringArray("events", required: true, nonEmpty: true) {
            for (i, selector) in list.enumerated() where !EventType.isSelector(selector) {
                let known = EventType.allCases.filter { $0 != .ping }.map(\.rawValue).joined(separator: ", ")
                node.context.error("\(node.path(of: "events"))[\(i)]", "unknown event type \"\(selector)\"; known: delivery, device, transport, \(known)")
            }
            events = list
        }
        var apps: [String]?
        if let list = node.stringArray("apps", nonEmpty: true) {
            for (i, app) in list.enumerated() where known[app] == nil {
                node.context.error("\(node.path(of: "apps"))[\(i)]", "no app \"\(app)\" in \"apps\"")
            }
            apps = list
        }
        let batch = node.int("batch", in: 1...10_000) ?? 100
        let timeout = node.duration("timeout", minimum: 0.001) ?? 10
        let retention = node.duration("retention", minimum: 1) ?? 72 * 3600
        let caFile = node.filePath("caFile")
        if caFile != nil, let url, !url.secure { node.error(at: "caFile", "only an https url uses a CA file") }
        guard let id, let url, !secrets.isEmpty, !events.isEmpty,
              !node.context.errors.contains(where: { $0.path.hasPrefix(node.path) }) else { return nil }
        return Webhook(id: id, url: url, secrets: secrets, events: events, apps: apps, batch: batch, timeout: timeout,
                       retention: retention, caFile: caFile)
    }
}

/// `events`: the outbox's own settings (kept whether or not a webhook is configured).
///
/// ```json
/// "events": {"retention": "72h", "degradedAfter": "15m"}
/// ```
public struct EventsConfiguration: ConfigurationSection, Equatable {
    public static let key = "events"

    /// How long the outbox keeps an event (the feed's reach). Default 72 h.
    public var retention: TimeInterval = 72 * 3600
    /// `/readyz` says `degraded` while a webhook's oldest waiting event is older than this. Default 15 min.
    public var degradedAfter: TimeInterval = 900

    public init(retention: TimeInterval = 72 * 3600, degradedAfter: TimeInterval = 900) {
        self.retention = retention
        self.degradedAfter = degradedAfter
    }

    public init?(node: JSONNode, apps: [String: AppConfiguration]) {
        guard case .object = node.value else {
            node.error("expected an object such as {\"retention\": \"72h\"}, found \(node.value.typeDescription)")
            return nil
        }
        rejectUnknownKeys(node, known: ["retention", "degradedAfter"])
        if let r = node.duration("retention", minimum: 60) { retention = r }
        if let d = node.duration("degradedAfter", minimum: 1) { degradedAfter = d }
    }
}

/// An error for each key of `node` not in `known` (whatever `unknownKeys` says: a webhook
/// misconfigured silently would lose events).
private func rejectUnknownKeys(_ node: JSONNode, known: [String]) {
    guard case .object(let members) = node.value else { return }
    for key in members.keys.sorted() where !known.contains(key) {
        node.error(at: key, "unknown key; known: \(known.joined(separator: ", "))")
        node.allowKeys([key])
    }
}

extension HeraldConfiguration {
    /// The `webhooks` section's receivers (none when the section is absent).
    public var webhooks: [WebhooksConfiguration.Webhook] { section(WebhooksConfiguration.self)?.webhooks ?? [] }

    /// The `events` section (its defaults when absent).
    public var events: EventsConfiguration { section(EventsConfiguration.self) ?? EventsConfiguration() }
}

/// A webhook's URL: `http` or `https`, a host, an optional port and a path (no credentials, no fragment).
public struct WebhookURL: Sendable, Equatable, CustomStringConvertible {
    /// `https`.
    public var secure: Bool
    public var host: String
    public var port: Int
    /// From the first `/`, with any query (`/` when the URL has none).
    public var path: String

    /// Parses `text`.
    /// - Throws: ``WebhookError/configuration(_:)`` saying what is wrong.
    public init(_ text: String) throws(WebhookError) {
        let secure: Bool
        let rest: Substring
        if text.hasPrefix("https://") { secure = true; rest = text.dropFirst(8) } else if text.hasPrefix("http://") {
            secure = false; rest = text.dropFirst(7)
        } else { throw .configuration("expected an http:// or https:// URL") }
        if text.contains("#") { throw .configuration("a webhook URL takes no fragment (#)") }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        if authority.contains("@") { throw .configuration("put no credentials in the URL; receivers check the signature") }
        var path = String(rest[authorityEnd...])
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        guard let (host, port) = Self.hostAndPort(authority, defaultPort: secure ? 443 : 80) else {
            throw .configuration("expected host, host:port or [v6]:port after the scheme")
        }
        self.secure = secure
        self.host = host
        self.port = port
        self.path = path
    }

    private static func hostAndPort(_ text: Substring, defaultPort: Int) -> (String, Int)? {
        var host: Substring
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        } else {
            host = text
        }
        guard !host.isEmpty else { return nil }
        var port = defaultPort
        if let portText {
            guard let p = Int(portText), (1...65535).contains(p) else { return nil }
            port = p
        }
        return (String(host), port)
    }

    public var description: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return "\(secure ? "https" : "http")://\(h):\(port)\(path)"
    }
}

/// What went wrong with a webhook.
public enum WebhookError: Error, Equatable, CustomStringConvertible {
    /// A setting that cannot work.
    case configuration(String)
    /// The receiver did not take the batch (status, or what failed on the way).
    case notAccepted(String)
    /// Anything else.
    case unknown(String)

    public var description: String {
        switch self {
        case .configuration(let m): return m
        case .notAccepted(let m): return "not accepted: \(m)"
        case .unknown(let m): return m
        }
    }
}
