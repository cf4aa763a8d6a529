import FoundationEssentials
import HeraldCore

/// What the daemon hands a front end: the core's one accept path and what it reads.
public struct FrontEndContext: Sendable {
    /// The configuration in force now (a reload replaces it; read it per request).
    public var configuration: @Sendable () -> HeraldConfiguration
    /// The token store (devices a front end registers for its own users).
    public var store: any TokenStore
    /// Accepts a notification on the path `POST /v1/notifications` takes: fan-out, the queue's
    /// bounds, idempotency keys, a durable commit. Returns once it is committed.
    /// - Throws: ``APIError`` (400 for the request, 503 when the queue is full or backed up, or
    ///   the daemon is stopping), or the store's error.
    public var accept: @Sendable (NotificationRequest) async throws -> EnqueueReceipt
    public var clock: any WallClock
    /// Labelled `api`, as the API's own lines.
    public var logger: Logger
    public var metrics: MetricsRegistry
    /// Checks an `Authorization` header against the API keys in force now (`api.keys`) for a
    /// scope, as the API does: the key's id (`nil` when the API has no keys), or the 401/403
    /// to answer (its message and headers, never the secret).
    public var authorize: @Sendable (_ header: String?, _ scope: APIConfiguration.Scope) -> Result<String?, APIError>

    public init(configuration: @escaping @Sendable () -> HeraldConfiguration, store: any TokenStore,
                accept: @escaping @Sendable (NotificationRequest) async throws -> EnqueueReceipt,
                authorize: @escaping @Sendable (_ header: String?, _ scope: APIConfiguration.Scope) -> Result<String?, APIError>,
                clock: any WallClock, logger: Logger, metrics: MetricsRegistry) {
        self.configuration = configuration
        self.store = store
        self.accept = accept
        self.authorize = authorize
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
    }
}

/// A listener of a front end's own (`matrix.listen`): a second HTTP server that serves only
/// that front end, with the daemon's connection limits.
public struct FrontEndListener: Sendable, Equatable {
    public var address: ListenAddress
    /// The configuration key it comes from, for errors (`matrix.listen`).
    public var setting: String
    public var maxBodyBytes: Int

    public init(address: ListenAddress, setting: String, maxBodyBytes: Int) {
        self.address = address
        self.setting = setting
        self.maxBodyBytes = maxBodyBytes
    }
}

/// Users a front end owns: the devices API refuses to register devices for them.
public struct ReservedUsers: Sendable {
    /// User ids starting with this (`matrix:`).
    public var prefix: String
    /// Whose they are, for the refusal ("the Matrix gateway (its pushers' devices)").
    public var owner: String

    public init(prefix: String, owner: String) {
        self.prefix = prefix
        self.owner = owner
    }
}

/// Another protocol the daemon serves beside its own API (the Matrix push gateway, gorush's
/// `/api/push`): it turns its requests into the core's notifications through
/// ``FrontEndContext/accept`` and knows no transport; the daemon knows it only through this.
///
/// Registered explicitly (``Daemon/Options/frontEnds``, from `main`); one instance per daemon
/// start. Its configuration is a ``ConfigurationSection`` registered beside it.
public protocol FrontEnd: Sendable {
    /// A short name (`matrix`) for logs and ``Daemon/port(of:)``.
    static var name: String { get }

    /// What it is, in the line `herald serve` prints for its listener (`matrix gateway`).
    static var title: String { get }

    /// The paths it owns on `api.listen`: each claims itself and everything under it
    /// (`/_matrix` claims `/_matrix` and `/_matrix/…`).
    static var paths: [String] { get }

    /// Users it owns (the devices API refuses them); `nil` for none.
    static var reservedUsers: ReservedUsers? { get }

    /// The settings of `new` a reload cannot apply, each named with what to do.
    static func restartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String]

    /// Why the daemon must not start with `configuration` (its section is unsafe as it stands,
    /// e.g. unauthenticated on a network address), naming the setting; `nil` to start. A reload
    /// to such a configuration is refused with the same words.
    static func startRefusal(_ configuration: HeraldConfiguration) -> String?

    init(context: FrontEndContext)

    /// The listener of its own `configuration` asks for, `nil` for none (it is served on `api.listen` only).
    func listener(_ configuration: HeraldConfiguration) -> FrontEndListener?

    /// Answers at once, on the server's thread, what needs no store or queue (errors, limits);
    /// `nil` for a request to hand to ``handle(_:ownListener:)``.
    /// - Parameter ownListener: the request came through its own listener, not `api.listen`.
    func immediate(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse?

    /// Answers a request ``immediate(_:ownListener:)`` left.
    func handle(_ request: HTTPRequest, ownListener: Bool) async -> HTTPResponse

    /// The `route` label of `herald_http_requests_total` for one of its requests: its route
    /// template, or `"other"`; never the raw path.
    func routeLabel(_ request: HTTPRequest) -> String
}

extension FrontEnd {
    public static var title: String { name }
    public static var reservedUsers: ReservedUsers? { nil }
    public static func restartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String] { [] }
    public static func startRefusal(_ configuration: HeraldConfiguration) -> String? { nil }
    public func listener(_ configuration: HeraldConfiguration) -> FrontEndListener? { nil }

    /// Whether `path` is one of ``paths`` or under one.
    static func claims(_ path: String) -> Bool {
        paths.contains { path == $0 || path.hasPrefix($0 + "/") }
    }
}
