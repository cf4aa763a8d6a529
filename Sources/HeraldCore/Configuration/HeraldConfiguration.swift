import FoundationEssentials
import Glibc

/// Herald's whole configuration, read from one JSON file (`config.json`).
///
/// Sections: `storage`, `apps`, `transports`, `api`, `log`, `delivery`, `server`, and those of the registered
/// modules (``ConfigurationSection``: `matrix`). Every key is documented
/// with its default in `docs/configuration.md`. Loading reports every problem at once, each
/// with its JSON path; unknown keys are warnings.
public struct HeraldConfiguration: Sendable {
    /// The file this configuration came from (`nil` when parsed from memory).
    public var sourcePath: String?
    /// `storage.driver` and what that driver read (``StorageSection``).
    public var storage: StorageConfiguration
    /// Apps by id (the id is usually the bundle id).
    public var apps: [String: AppConfiguration]
    /// Transports by name.
    public var transports: [String: TransportSpec]
    public var api: APIConfiguration
    public var log: LogConfiguration
    public var delivery: DeliveryConfiguration
    /// The daemon's queue, workers and lifecycle (`herald serve`).
    public var server: ServerConfiguration = ServerConfiguration()
    /// The sections registered modules read (``section(_:)``), by key; absent sections are not here.
    public var sections: [String: any ConfigurationSection] = [:]
    /// Non-fatal problems found while loading (unknown keys, odd values).
    public var warnings: [JSONIssue]
    /// Digests of the files the configuration names (keys, certificates), by JSON path, as they
    /// were when it was read.
    public var fileDigests: [String: UInt64] = [:]
    /// The override blocks the registered plugins read (`apns`, …): the notification body's
    /// top-level keys besides its fields.
    public var overrideBlocks: Set<String> = []

    /// The core's top-level keys, in documentation order (registered sections come after).
    public static let coreSections = ["storage", "apps", "transports", "api", "log", "delivery", "server"]

    /// Loads and validates a configuration file.
    ///
    /// `${NAME}` in string values is replaced from `environment`. Relative paths resolve
    /// against the file's folder.
    /// - Throws: ``ConfigurationError`` listing every problem with its JSON path.
    public static func load(path: String, registry: TransportRegistry,
                            environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError) -> HeraldConfiguration
    {
        try loadWithData(path: path, registry: registry, environment: environment).configuration
    }

    /// Loads and validates a configuration file, reading it once; returns the bytes it read too
    /// (a reload compares transport sections from the same version of the file).
    public static func loadWithData(path: String, registry: TransportRegistry, environment: [String: String])
        throws(ConfigurationError) -> (configuration: HeraldConfiguration, data: Data)
    {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let reason = FileManager.default.fileExists(atPath: path) ? "cannot read the file" : "no such file"
            throw ConfigurationError(source: path, errors: [JSONIssue(path: "", message: reason)], warnings: [])
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().standardizedFileURL.path
        var configuration = try parse(data, source: path, baseDirectory: directory, registry: registry, environment: environment)
        configuration.sourcePath = path
        return (configuration, data)
    }

    /// Parses and validates configuration JSON.
    /// - Throws: ``ConfigurationError`` listing every problem with its JSON path.
    public static func parse(_ data: Data, source: String = "config", baseDirectory: String?,
                             registry: TransportRegistry,
                             environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError) -> HeraldConfiguration
    {
        let json: JSONValue
        do {
            json = try JSONValue.parse(data)
        } catch {
            throw ConfigurationError(source: source, errors: [JSONIssue(path: "", message: error.message)], warnings: [])
        }
        let context = JSONReadContext(baseDirectory: baseDirectory, unknownKeys: .warn)
        let substituted = EnvironmentSubstitution.apply(to: json, environment: environment, context: context)
        let root = JSONNode(root: substituted, context: context)
        guard case .object = substituted else {
            throw ConfigurationError(source: source, errors: [JSONIssue(path: "", message: "expected a JSON object at the top level, found \(json.typeDescription)")], warnings: [])
        }

        let storage = StorageConfiguration.read(root.child("storage"), root: root, readers: registry.storageReaders)
        let transportsNode = root.child("transports", required: true)
        let transports = readTransports(transportsNode, registry: registry)
        // Routes are checked against every name defined, valid or not: an invalid transport has its own error.
        let defined = Set(transportsNode?.value.objectValue.map { Array($0.keys) } ?? [])
        let apps = readApps(root.child("apps", required: true), transports: defined, blocks: registry.overrideBlocks)
        let api = APIConfiguration(node: root.child("api"))
        let log = LogConfiguration(node: root.child("log"))
        let delivery = DeliveryConfiguration(node: root.child("delivery"))
        let server = ServerConfiguration(node: root.child("server"), transports: transports)
        var sections: [String: any ConfigurationSection] = [:]
        for reader in registry.sectionReaders {
            if let node = root.child(reader.key), let section = reader.read(node, apps) { sections[reader.key] = section }
        }
        AppConfiguration.checkLocalRoutes(apps, transports: transportsNode?.value, context: context)
        checkDocument(root, registered: registry.sectionReaders.map(\.key))
        context.reportUnknownKeys()

        guard context.errors.isEmpty else {
            throw ConfigurationError(source: source, errors: context.errors, warnings: context.warnings)
        }
        return HeraldConfiguration(sourcePath: nil, storage: storage, apps: apps, transports: transports, api: api,
                                   log: log, delivery: delivery, server: server, sections: sections, warnings: context.warnings,
                                   fileDigests: context.fileDigests, overrideBlocks: registry.overrideBlocks)
    }

    private static func readTransports(_ node: JSONNode?, registry: TransportRegistry) -> [String: TransportSpec] {
        guard let node else { return [:] }
        var result: [String: TransportSpec] = [:]
        let members = node.members()
        if members.isEmpty, case .object = node.value { node.error("must define at least one transport") }
        for (name, section) in members {
            guard case .object = section.value else {
                section.error("expected an object with a \"type\", found \(section.value.typeDescription)")
                continue
            }
            guard let kind = section.string("type", required: true) else { continue }
            guard registry.isRegistered(kind) else {
                section.error(at: "type", "unknown transport type \"\(kind)\"; known: \(registry.kinds.joined(separator: ", "))")
                continue
            }
            if let configuration = registry.parseConfiguration(kind: kind, node: section) {
                result[name] = TransportSpec(name: name, kind: kind, configuration: configuration,
                                             overrideBlocks: registry.overrideBlocks(kind: kind))
            } else if section.context.errors.allSatisfy({ !$0.path.hasPrefix(section.path) }) {
                section.error("invalid \(kind) configuration")
            }
        }
        return result
    }

    private static func readApps(_ node: JSONNode?, transports: Set<String>, blocks: Set<String>) -> [String: AppConfiguration] {
        guard let node else { return [:] }
        var result: [String: AppConfiguration] = [:]
        let members = node.members()
        if members.isEmpty, case .object = node.value { node.error("must define at least one app") }
        for (id, section) in members {
            if let app = AppConfiguration(id: id, node: section, transports: transports, blocks: blocks) {
                result[id] = app
            }
        }
        return result
    }

    /// The app with this id.
    public func app(_ id: String) -> AppConfiguration? { apps[id] }

    /// The override blocks a notification body may carry, for its reader.
    public var notificationBlocks: OverrideBlocks { .known(overrideBlocks) }

    /// The config `type` of the local (stream) transport.
    public static let localKind = "local"

    /// The app's local (stream) route, when its routes list one.
    public func localTransport(app: AppConfiguration) -> String? {
        app.routes.first { transports[$0]?.kind == Self.localKind }
    }

}

/// A configuration that cannot be used; lists every problem.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    /// The file (or a label) the problems are in.
    public var source: String
    public var errors: [JSONIssue]
    public var warnings: [JSONIssue]

    public init(source: String, errors: [JSONIssue], warnings: [JSONIssue]) {
        self.source = source
        self.errors = errors
        self.warnings = warnings
    }

    /// One line per error: `config.json: transports.apns.type: unknown transport type …`.
    public var description: String {
        errors.map { "\(source): \($0)" }.joined(separator: "\n")
    }
}

// MARK: - Sections

/// What happens to a notification for a device whose app is open (foreground delivery).
public enum ForegroundPolicy: String, CaseIterable, Sendable {
    /// Push only (the default).
    case pushOnly = "push-only"
    /// A device with an open stream gets the stream only; the others their push route (also
    /// used when the stream write fails).
    case localFirst = "local-first"
    /// Both: the live stream when connected, and the push.
    case localAndPush = "local-and-push"
    /// Only the live stream; no push (devices not in the foreground get it from the inbox when they return).
    case localOnly = "local-only"
}

/// `apps.<id>`: one app and how its notifications travel.
public struct AppConfiguration: Sendable, Equatable {
    public var id: String
    /// The APNs topic (bundle id). Default: the app id.
    public var topic: String
    /// Transport names in order of preference; a device uses the first that can carry it.
    public var routes: [String]
    public var foreground: ForegroundPolicy = .pushOnly
    /// Most devices one user receives a notification on (most recently registered first).
    public var maxDevicesPerUser: Int = 100
    /// Most devices one user may have registered: registering past it removes the user's least
    /// recently registered device (``DeviceRegistration/maxPerUser``). Default 100, or
    /// ``maxDevicesPerUser`` when that is larger.
    public var maxRegisteredDevicesPerUser: Int = 100
    /// Signs the app's client tokens (HS256); required unless ``foreground`` is `push-only`.
    public var clientSecret: Secret? = nil
    /// How long a device counts as present after its stream closes. Default 0.
    public var presenceGrace: TimeInterval = 0
    /// The per-user inbox of notifications waiting for a stream.
    public var inbox: InboxConfiguration = InboxConfiguration()
    /// How long an event written to an acknowledging stream (`ack=1`) waits for its ack before it
    /// goes to the device's fallback route. Default ``StreamsConfiguration/defaultAckTimeout``.
    public var ackTimeout: TimeInterval = StreamsConfiguration.defaultAckTimeout
    /// Default override blocks (`overrides.apns`, …): merged under each notification's own
    /// block of the same name (the notification's keys win).
    public var overrides: [String: JSONValue] = [:]

    public init(id: String, topic: String? = nil, routes: [String], foreground: ForegroundPolicy = .pushOnly,
                maxDevicesPerUser: Int = 100) {
        self.id = id
        self.topic = topic ?? id
        self.routes = routes
        self.foreground = foreground
        self.maxDevicesPerUser = maxDevicesPerUser
        self.maxRegisteredDevicesPerUser = max(100, maxDevicesPerUser)
    }

    init?(id: String, node: JSONNode, transports: Set<String>, blocks: Set<String>) {
        guard case .object = node.value else {
            node.error("expected an object with \"routes\", found \(node.value.typeDescription)")
            return nil
        }
        self.id = id
        topic = node.string("topic") ?? id
        if let problem = FieldLimits.headerValueProblem(topic) {
            node.error(at: "topic", "\(problem): it is sent as a header (APNs's apns-topic)")
        }
        let routes = node.stringArray("routes", required: true, nonEmpty: true) ?? []
        self.routes = routes
        if let routesNode = node.child("routes"), case .array = routesNode.value {
            var seen = Set<String>()
            for (i, route) in routes.enumerated() {
                if !transports.contains(route) {
                    let known = transports.sorted().joined(separator: ", ")
                    node.context.error("\(routesNode.path)[\(i)]", "unknown transport \"\(route)\"; defined: \(known.isEmpty ? "none" : known)")
                }
                if !seen.insert(route).inserted {
                    node.context.error("\(routesNode.path)[\(i)]", "transport \"\(route)\" is listed twice")
                }
            }
        }
        if let m = node.int("maxDevicesPerUser", in: 1...10_000) { maxDevicesPerUser = m }
        if let m = node.int("maxRegisteredDevicesPerUser", in: 1...10_000) {
            maxRegisteredDevicesPerUser = m
        } else {
            maxRegisteredDevicesPerUser = max(100, maxDevicesPerUser)
        }
        if let o = node.child("overrides") {
            if case .object = o.value {
                for (name, block) in o.members() {
                    guard blocks.contains(name) else {
                        let known = blocks.sorted().joined(separator: ", ")
                        block.error("no registered transport reads a \"\(name)\" block; known: \(known.isEmpty ? "none" : known)")
                        continue
                    }
                    guard case .object(let members) = block.value else {
                        block.error("expected an object (keys of the \(name) override block), found \(block.value.typeDescription)")
                        continue
                    }
                    block.allowKeys(Array(members.keys))
                    overrides[name] = block.value
                }
            } else {
                o.error("expected an object of override blocks such as {\"apns\": {…}}, found \(o.value.typeDescription)")
            }
        }
        readForeground(node)
        if routes.isEmpty { return nil }
    }
}

/// `api`: the daemon's HTTP API.
public struct APIConfiguration: Sendable, Equatable {
    /// Permission an API key grants.
    public enum Scope: String, CaseIterable, Sendable {
        /// `POST /v1/notifications`, `GET /v1/notifications/{id}`.
        case send
        /// Register, list and remove devices.
        case devices
        /// Everything, including metrics and administration.
        case admin
    }

    /// One API key.
    public struct Key: Sendable, Equatable {
        public var id: String
        public var secret: Secret
        public var scopes: Set<Scope>
        public init(id: String, secret: Secret, scopes: Set<Scope>) {
            self.id = id
            self.secret = secret
            self.scopes = scopes
        }
    }

    /// Listen address. Default `127.0.0.1:8080`.
    public var listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080)
    public var keys: [Key] = []
    /// Largest request body accepted, in bytes. Default 1 MiB.
    public var maxBodyBytes: Int = 1 << 20
    /// Serve the browser demo page at `GET /demo`. Default false.
    public var demo: Bool = false
    /// Live event streams (`GET /v1/stream`).
    public var streams: StreamsConfiguration = StreamsConfiguration()

    public init(listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080), keys: [Key] = [], maxBodyBytes: Int = 1 << 20) {
        self.listen = listen
        self.keys = keys
        self.maxBodyBytes = maxBodyBytes
    }

    init(node: JSONNode?) {
        guard let node else { return }
        if let listenNode = node.child("listen"), let text = listenNode.asString {
            if let address = ListenAddress(text) { listen = address } else {
                listenNode.error("expected host:port such as \"127.0.0.1:8080\" or \"[::1]:8080\", found \"\(text)\"")
            }
        }
        if let keysNode = node.child("keys") {
            var ids = Set<String>()
            for element in keysNode.elements() {
                guard case .object = element.value else { element.error("expected an object with id, secret and scopes"); continue }
                let id = element.string("id", required: true)
                let secret = element.secret("secret", required: true)
                var scopes = Set<Scope>()
                if let scopesNode = element.child("scopes", required: true) {
                    for s in scopesNode.elements() {
                        guard let name = s.asString else { continue }
                        if let scope = Scope(rawValue: name) { scopes.insert(scope) } else {
                            s.error("unknown scope \"\(name)\"; expected one of: \(Scope.allCases.map(\.rawValue).joined(separator: ", "))")
                        }
                    }
                    if scopes.isEmpty && scopesNode.value.arrayValue?.isEmpty == true { scopesNode.error("must grant at least one scope") }
                }
                if let id, !ids.insert(id).inserted { element.error(at: "id", "duplicate key id \"\(id)\"") }
                if let secret, secret.value.count < 16 {
                    element.error(at: "secret", "is too short (\(secret.value.count) characters); use at least 16")
                }
                if let id, let secret { keys.append(Key(id: id, secret: secret, scopes: scopes)) }
            }
            Self.checkDistinctSecrets(keys, at: keysNode)
        }
        if let m = node.int("maxBodyBytes", in: 1024...(64 << 20)) { maxBodyBytes = m }
        if let d = node.bool("demo") { demo = d }
        if let s = node.child("streams") { streams = StreamsConfiguration(node: s) }
        if let refusal = unauthenticatedNetworkRefusal { node.error(at: "keys", refusal) }
    }

    /// Why this API must not be served, when it would be open to the network: no key while
    /// `listen` is not a loopback address (`nil` when it may be served).
    ///
    /// - Important: `"keys": []` counts as no key. The daemon checks this at start and on
    ///   reload too, for configurations built in code.
    public var unauthenticatedNetworkRefusal: String? {
        guard keys.isEmpty && !listen.isLoopback else { return nil }
        return "at least one key is required when api.listen (\(listen)) is not a loopback address: Herald will not serve "
            + "an unauthenticated API to the network; add a key such as {\"id\": \"backend\", \"secret\": \"${HERALD_API_KEY}\", "
            + "\"scopes\": [\"admin\"]} or listen on 127.0.0.1"
    }
}

/// A `host:port` to listen on.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    /// Port; 0 picks a free one.
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080` or `0.0.0.0:8080`.
    public init?(_ text: String) {
        let hostPart: Substring, portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        guard !hostPart.isEmpty, let port = Int(portPart), (0...65535).contains(port) else { return nil }
        self.host = String(hostPart)
        self.port = port
    }

    /// Whether only this machine can connect.
    public var isLoopback: Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// `log`: level and line format.
public struct LogConfiguration: Sendable, Equatable {
    public var level: Logger.Level = .info
    public var format: LogFormat = .logfmt

    public init(level: Logger.Level = .info, format: LogFormat = .logfmt) {
        self.level = level
        self.format = format
    }

    init(node: JSONNode?) {
        guard let node else { return }
        if let l = node.oneOf("level", Logger.Level.self) { level = l }
        if let f = node.oneOf("format", LogFormat.self) { format = f }
    }
}

/// `delivery`: retries, batching and bookkeeping.
public struct DeliveryConfiguration: Sendable, Equatable {
    public var retry: RetryPolicy = RetryPolicy()
    /// Most deliveries handed to a transport in one call (also bounded by the transport).
    public var batchSize: Int = 500

    public init(retry: RetryPolicy = RetryPolicy(), batchSize: Int = 500) {
        self.retry = retry
        self.batchSize = batchSize
    }

    init(node: JSONNode?) {
        guard let node else { return }
        if let n = node.int("maxAttempts", in: 1...100) { retry.maxAttempts = n }
        if let d = node.duration("initialBackoff", minimum: 0.001) { retry.initialDelay = d }
        if let d = node.duration("maxBackoff", minimum: 0.001) { retry.maxDelay = d }
        if let m = node.double("backoffMultiplier", in: 1...10) { retry.multiplier = m }
        if let j = node.double("jitter", in: 0...1) { retry.jitter = j }
        if let b = node.int("batchSize", in: 1...10_000) { batchSize = b }
        if retry.maxDelay < retry.initialDelay {
            node.error(at: "maxBackoff", "must not be less than initialBackoff")
        }
    }
}
