import FoundationEssentials
import Glibc

/// A storage back end: opens the token store, the delivery queue and the inbox that `storage` names.
///
/// The daemon and the CLI know only this protocol, ``TokenStore``, ``DeliveryQueue`` and ``InboxStore``; the
/// drivers (SQLite in `HeraldSQLite`) are registered explicitly in `main`, like transports.
public protocol StorageDriver: Sendable {
    /// The driver's own keys of the `storage` section, read by its module; its
    /// ``StorageSection/driver`` is the `storage.driver` value that selects this driver.
    associatedtype Section: StorageSection

    /// Opens the store, the queue and the inbox for a daemon.
    /// - Parameter exclusive: take the driver's guard against a second daemon on a database
    ///   that only one may use (SQLite's lock file); released by ``OpenStorage/close()``.
    /// - Throws: an error saying what could not be opened and what to do.
    func open(_ configuration: HeraldConfiguration, metrics: MetricsRegistry, exclusive: Bool) async throws -> OpenStorage

    /// Opens only the token store (the CLI's device commands and `herald send`).
    func openTokenStore(_ configuration: HeraldConfiguration) async throws -> any TokenStore

    /// Lines for `herald check`: where the data lives, the schema state.
    func describe(_ configuration: HeraldConfiguration) async -> [CheckFinding]

    /// Brings the schema up to date (`herald migrate`); returns what it did, in one line.
    func migrate(_ configuration: HeraldConfiguration) async throws -> String

    /// Opens only the event outbox (`herald webhooks list`, beside a running daemon); `nil` when
    /// the driver keeps none. The caller closes it (``EventOutbox/close()``).
    func openEventOutbox(_ configuration: HeraldConfiguration) async throws -> (any EventOutbox)?
}

extension StorageDriver {
    /// The `storage.driver` value that selects this driver (its ``Section``'s).
    public var name: String { Section.driver }

    /// Opening the token store migrates it (SQLite).
    public func migrate(_ configuration: HeraldConfiguration) async throws -> String {
        _ = try await openTokenStore(configuration)
        return "schema up to date"
    }

    /// No outbox.
    public func openEventOutbox(_ configuration: HeraldConfiguration) async throws -> (any EventOutbox)? { nil }
}

/// What a driver opened for a daemon.
public struct OpenStorage: Sendable {
    public var tokens: any TokenStore
    public var queue: any DeliveryQueue
    /// The inbox log that streams replay from (issue 13).
    public var inbox: any InboxStore
    /// Which node each live stream is open on (several nodes on one database).
    public var presence: any PresenceDirectory
    /// The broadcast channels Herald created (`nil`: this driver keeps none, and the channel API answers 501).
    public var channels: (any ChannelStore)?
    /// The event outbox (issue 38); `nil` for a driver that keeps none.
    public var events: (any EventOutbox)?
    private let onClose: @Sendable () async -> Void

    /// - Parameter onClose: closes the queue and the inbox and releases what ``StorageDriver/open(_:metrics:exclusive:)`` took.
    public init(tokens: any TokenStore, queue: any DeliveryQueue, inbox: any InboxStore,
                presence: any PresenceDirectory = SingleNodePresence(), channels: (any ChannelStore)? = nil, events: (any EventOutbox)? = nil,
                onClose: @escaping @Sendable () async -> Void) {
        self.tokens = tokens
        self.events = events
        self.queue = queue
        self.inbox = inbox
        self.presence = presence
        self.channels = channels
        self.onClose = onClose
    }

    /// Finishes pending writes, closes the queue and the inbox and releases the driver's locks.
    public func close() async { await onClose() }
}

/// The storage drivers an executable knows, keyed by `storage.driver`.
///
/// ```swift
/// var storage = StorageDrivers()
/// storage.register(SQLiteStorageDriver())
/// ```
///
/// Registering a driver registers its reader of the `storage` section too: the configuration
/// loader gets it through ``sections(in:)``.
public struct StorageDrivers: Sendable {
    private var drivers: [String: any StorageDriver] = [:]

    public init() {}

    public mutating func register(_ driver: any StorageDriver) { drivers[driver.name] = driver }

    /// `registry` with each driver's reader of the `storage` section (``StorageDriver/Section``)
    /// registered, so that a configuration it loads is checked by the driver it names.
    public func sections(in registry: TransportRegistry) -> TransportRegistry {
        var registry = registry
        for name in names { drivers[name]!.registerSection(in: &registry) }
        return registry
    }

    /// The registered names, sorted.
    public var names: [String] { drivers.keys.sorted() }

    /// The driver for `configuration.storage`.
    /// - Throws: ``StoreError`` naming the known drivers when none is registered under that name.
    public func driver(for configuration: HeraldConfiguration) throws -> any StorageDriver {
        let name = configuration.storage.driver
        guard let driver = drivers[name] else {
            throw StoreError("storage.driver: no driver \"\(name)\" in this build; known: \(names.joined(separator: ", "))")
        }
        return driver
    }
}

extension StorageDriver {
    fileprivate func registerSection(in registry: inout TransportRegistry) { registry.register(storage: Section.self) }
}
