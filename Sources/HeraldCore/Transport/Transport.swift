import FoundationEssentials
import Glibc

/// A transport adapter: takes deliveries and reports what happened to each.
///
/// Transports live in `Plugins/`, one module each, and know nothing of the store, the queue or
/// each other. The dispatcher decides what an outcome means (retry, invalidate, give up).
///
/// - Important: `deliver` must return exactly one outcome per delivery, in the same order, and
///   must return within a bounded time (every request has a deadline), so a stuck peer can never
///   wedge the queue.
public protocol Transport: AnyObject, Sendable {
    /// The transport's name (its key under `transports` in the config).
    var name: String { get }

    /// The most deliveries the dispatcher should hand over in one call.
    var preferredBatchSize: Int { get }

    /// Opens connections, loads credentials. Called once before the first `deliver`.
    /// - Throws: ``TransportError`` when the transport cannot work at all.
    func start() async throws

    /// Sends a batch; returns one outcome per delivery, in order.
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome]

    /// Closes connections after in-flight requests finish (or their deadlines pass).
    func shutdown() async

    /// Facts for `herald check`: credentials loaded, certificate subject and expiry, warnings.
    func checkReport() async -> [CheckFinding]

    /// What part of the transport cannot work now while the rest does (one push service of
    /// several refusing its credentials), or `nil` when nothing is impaired. `/readyz` reports a
    /// started transport with an impairment as `degraded: <this>`. Must not block; no secrets.
    var impairment: String? { get }
}

extension Transport {
    public var preferredBatchSize: Int { 500 }
    public func start() async throws {}
    public func shutdown() async {}
    public func checkReport() async -> [CheckFinding] { [] }
    public var impairment: String? { nil }
}

/// A transport type that can be registered under a config `type` and built from its own
/// configuration section.
public protocol TransportPlugin: Transport {
    associatedtype Configuration: TransportConfiguration

    /// The config `type` that selects this plugin (`"apns-http2"`, `"log"`).
    static var kind: String { get }

    /// The override blocks this plugin reads from a notification (`["apns"]`): top-level
    /// objects of the API body that the core passes through unread. Default none.
    static var overrideBlocks: [String] { get }

    /// Reads and validates this plugin's keys from its `transports.<name>` section.
    ///
    /// Report every problem on `node` (`node.error(at: "keyFile", "…")`) and return `nil` when
    /// the section is unusable. The `type` key is already read. Keys the reader does not ask
    /// for are reported to the user as unknown.
    static func configuration(from node: ConfigNode) -> Configuration?

    init(name: String, configuration: Configuration, context: TransportContext) throws
}

extension TransportPlugin {
    public static var overrideBlocks: [String] { [] }
}

/// What the core may know about any plugin's configuration: which devices its routes carry,
/// how their addresses are written, and how a notification becomes its payload. Everything
/// here is pure (no I/O), so the API can call it when it accepts a request.
public protocol TransportConfiguration: Sendable {
    /// A one-line description for `herald check`; must not contain secrets.
    var summary: String { get }

    /// The platform of the devices this route carries (registration's `platform` picks the
    /// app's first route of it), or `nil` for a route that carries any device (the `local`
    /// streams, the `log` dry run). Default `nil`.
    var platform: Platform? { get }

    /// The channel a registration names with `"vendor"` (`"huawei"`, `"xiaomi"`, `"fcm"`): such a
    /// registration goes to the app's first route whose plugin says this, or `nil` (the default)
    /// for a route no registration names by vendor.
    var vendor: String? { get }

    /// Normalises and validates a device address for this route, with the attributes the
    /// client gave (APNs: `environment`), and returns the address the store keeps.
    /// Default: a string id of printable ASCII (``AddressRules/opaque(_:maxBytes:)``).
    /// - Throws: ``AddressProblem`` naming the field and what this route expects.
    func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress

    /// Whether this route can carry a device with these attributes (APNs: its environment).
    /// Default true.
    func canCarry(_ attributes: DeviceAttributes) -> Bool

    /// Renders a notification's payload for this route, once per notification; checks the
    /// plugin's own limits (payload size, its override block's keys).
    /// Default: the neutral content as JSON (``NotificationContent/writeDisplayJSON(into:)``) with the notification id;
    /// a widget reload (``NotificationContent/widgets``) is refused (``ContentProblem/widgetsNotCarried``).
    /// - Throws: ``ContentProblem`` naming the field (`apns.priority`, `payload`) and the limit.
    func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload

    /// A public value the route's clients need before they can register (Web Push: the VAPID
    /// `applicationServerKey` pages subscribe with), which the daemon serves to them at
    /// `GET /v1/<type>/<app>/public-key`; `nil` (the default) when there is none. Never a secret.
    var publicClientKey: String? { get }
}

extension TransportConfiguration {
    public var platform: Platform? { nil }

    public var vendor: String? { nil }

    public var publicClientKey: String? { nil }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try AddressRules.opaque(input))
    }

    public func canCarry(_ attributes: DeviceAttributes) -> Bool { true }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        if content.widgets { throw .widgetsNotCarried }
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("id", context.notificationID)
            o.string("app", context.app)
            content.writeDisplayJSON(into: &o)
        }
        return RenderedPayload(body: w.bytes, expiration: content.expiration)
    }
}

/// What the host gives a transport: its logger, clock and metrics, and how durable its own
/// records must be.
public struct TransportContext: Sendable {
    public var logger: Logger
    public var clock: any WallClock
    public var metrics: MetricsRegistry
    /// Whether a transport that keeps its own record of what it accepted (a ``DeliveryLedger``)
    /// must make it durable (fsync) before reporting `delivered`: true when the queue commits
    /// with `storage.synchronous: "full"`, so the ledger survives whatever the queue survives.
    public var durableWrites: Bool
    /// The daemon's live streams, for the local transport (`nil` outside the daemon).
    public var streams: (any LocalStreams)?

    public init(logger: Logger, clock: any WallClock = SystemClock(), metrics: MetricsRegistry = MetricsRegistry(),
                durableWrites: Bool = false, streams: (any LocalStreams)? = nil) {
        self.logger = logger
        self.clock = clock
        self.metrics = metrics
        self.durableWrites = durableWrites
        self.streams = streams
    }
}

/// One line of `herald check` output about a transport.
public struct CheckFinding: Sendable, Equatable, CustomStringConvertible {
    public enum Severity: String, Sendable { case ok, info, warning, error }
    public var severity: Severity
    public var message: String

    public init(_ severity: Severity, _ message: String) {
        self.severity = severity
        self.message = message
    }

    public var description: String { "\(severity.rawValue): \(message)" }
}

/// A transport that cannot work; the message says what to fix and contains no secret.
public struct TransportError: Error, CustomStringConvertible, Sendable {
    public var transport: String
    public var message: String

    public init(transport: String, message: String) {
        self.transport = transport
        self.message = message
    }

    public var description: String { "transport \(transport): \(message)" }
}

/// A configured transport: its name, plugin kind and the plugin's parsed configuration.
public struct TransportSpec: Sendable {
    public var name: String
    public var kind: String
    public var configuration: any TransportConfiguration
    /// The override blocks its plugin reads (``TransportPlugin/overrideBlocks``).
    public var overrideBlocks: [String]

    public init(name: String, kind: String, configuration: any TransportConfiguration, overrideBlocks: [String] = []) {
        self.name = name
        self.kind = kind
        self.configuration = configuration
        self.overrideBlocks = overrideBlocks
    }

    /// Whether its plugin reads the override block `name` (a front end keeps that platform's
    /// compatibility fields for it, such as the status API's `apns_id`).
    public func reads(_ block: String) -> Bool { overrideBlocks.contains(block) }

    /// Whether this route takes `input` for a device with `attributes`: the normalised address
    /// when it does.
    public func accepts(_ input: DeviceAddressInput, attributes: DeviceAttributes) -> DeviceAddress? {
        guard let address = try? configuration.address(input, attributes: attributes),
              configuration.canCarry(address.attributes) else { return nil }
        return address
    }
}

/// The transport plugins an executable knows, keyed by config `type`.
///
/// Registration is explicit, once, in `main`:
/// ```swift
/// var registry = TransportRegistry()
/// registry.register(LogTransport.self)
/// ```
public struct TransportRegistry: Sendable {
    private struct Entry: Sendable {
        var blocks: [String]
        var parse: @Sendable (ConfigNode) -> (any TransportConfiguration)?
        var make: @Sendable (String, any TransportConfiguration, TransportContext) throws -> any Transport
    }

    private var entries: [String: Entry] = [:]

    /// A registered configuration section's reader.
    public struct SectionReader: Sendable {
        public var key: String
        public var read: @Sendable (JSONNode, [String: AppConfiguration]) -> (any ConfigurationSection)?
    }

    /// The configuration sections of registered modules, in registration order.
    public private(set) var sectionReaders: [SectionReader] = []

    /// A registered storage driver's section reader (``StorageSection``).
    public struct StorageReader: Sendable {
        public var driver: String
        public var keys: [String]
        public var read: @Sendable (JSONNode) -> (any StorageSection)?
    }

    /// The storage drivers' sections, in registration order (none: `storage` is read on first use).
    public private(set) var storageReaders: [StorageReader] = []

    public init() {}

    /// Registers a storage driver's reader of the `storage` section, under its ``StorageSection/driver``.
    public mutating func register<S: StorageSection>(storage: S.Type) {
        storageReaders.removeAll { $0.driver == S.driver }
        storageReaders.append(StorageReader(driver: S.driver, keys: S.keys, read: { node in S(node: node) }))
    }

    /// Registers a module's own top-level configuration section (`matrix`).
    public mutating func register<S: ConfigurationSection>(section: S.Type) {
        sectionReaders.removeAll { $0.key == S.key }
        sectionReaders.append(SectionReader(key: S.key, read: { node, apps in S(node: node, apps: apps) }))
    }

    /// Registers a plugin under its ``TransportPlugin/kind``.
    public mutating func register<P: TransportPlugin>(_ plugin: P.Type) {
        entries[P.kind] = Entry(
            blocks: P.overrideBlocks,
            parse: { node in P.configuration(from: node) },
            make: { name, configuration, context in
                guard let configuration = configuration as? P.Configuration else {
                    throw TransportError(transport: name, message: "configuration is not for type \(P.kind)")
                }
                return try P(name: name, configuration: configuration, context: context)
            })
    }

    /// The registered types, sorted.
    public var kinds: [String] { entries.keys.sorted() }

    /// The override blocks the plugin registered as `kind` reads.
    public func overrideBlocks(kind: String) -> [String] { entries[kind]?.blocks ?? [] }

    /// The override blocks the registered plugins read (the API's known block names).
    public var overrideBlocks: Set<String> { Set(entries.values.flatMap(\.blocks)) }

    /// Parses a plugin's configuration section (`nil` when `kind` is unknown or invalid).
    public func parseConfiguration(kind: String, node: ConfigNode) -> (any TransportConfiguration)? {
        entries[kind]?.parse(node)
    }

    public func isRegistered(_ kind: String) -> Bool { entries[kind] != nil }

    /// Builds the transport for a configured spec.
    public func makeTransport(_ spec: TransportSpec, context: TransportContext) throws -> any Transport {
        guard let entry = entries[spec.kind] else {
            throw TransportError(transport: spec.name, message: "unknown transport type \"\(spec.kind)\"; known: \(kinds.joined(separator: ", "))")
        }
        return try entry.make(spec.name, spec.configuration, context)
    }
}
