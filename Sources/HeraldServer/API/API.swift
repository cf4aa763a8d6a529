import FoundationEssentials
import Glibc
import HeraldCore

/// What the API reads that a reload may replace, swapped as a whole.
public final class RuntimeSnapshot: Sendable {
    public let configuration: HeraldConfiguration
    let auth: Authenticator
    let fanOut: FanOut

    public init(configuration: HeraldConfiguration, store: any TokenStore, presence: (any Presence)? = nil) {
        self.configuration = configuration
        auth = Authenticator(configuration.api)
        fanOut = FanOut(configuration: configuration, store: store, presence: presence)
    }
}

/// Whether the daemon can serve: store readable, transports started or paused.
///
/// A paused transport (credentials or setup refused) leaves the daemon ready: the API still
/// accepts and persists, and other transports deliver; `/readyz` says `degraded` and why.
public struct Readiness: Sendable {
    /// Whether the store answered a query just now.
    public var storeOpen: Bool
    /// Transport name → `started`, `starting`, `paused: <reason>` or `degraded: <what part is impaired>`.
    public var transports: [String: String]
    /// Webhook id → `ok`, or `degraded: <why>` when its oldest waiting event is older than `events.degradedAfter`.
    public var webhooks: [String: String]
    public var isReady: Bool { storeOpen && !transports.values.contains("starting") }
    /// Ready, but some transport is paused, or impaired in part, or a webhook falls behind.
    public var isDegraded: Bool {
        isReady && (transports.values.contains { $0.hasPrefix("paused") || $0.hasPrefix("degraded") }
                    || webhooks.values.contains { $0.hasPrefix("degraded") })
    }

    public init(storeOpen: Bool, transports: [String: String], webhooks: [String: String] = [:]) {
        self.storeOpen = storeOpen
        self.transports = transports
        self.webhooks = webhooks
    }
}

/// The HTTP API: routing, authentication, and the JSON handlers.
///
/// ``immediate(_:)`` answers on the server thread what needs no waiting (errors, health,
/// metrics); ``handle(_:)`` does the rest (store and queue work).
public final class API: Sendable {
    /// What the API works with.
    public struct Dependencies: Sendable {
        public var snapshot: @Sendable () -> RuntimeSnapshot
        public var queue: any DeliveryQueue
        public var store: any TokenStore
        public var clock: any WallClock
        /// Checks the store (a query) and the transports; `/readyz` awaits it on every probe.
        public var readiness: @Sendable () async -> Readiness
        /// Tells the workers of these transports that deliveries are waiting.
        public var wake: @Sendable (Set<String>) -> Void
        /// The live streams of `GET /v1/stream` (`nil`: none).
        public var streams: StreamHub?
        /// The broadcast channels Herald created (`nil`: the storage driver keeps none; the channel API answers 501).
        public var channels: (any ChannelStore)?
        /// The running transport named so (`nil` when none is), for the seams a transport may
        /// implement (``BroadcastChannels``).
        public var transport: @Sendable (String) -> (any Transport)?
        /// The event outbox behind `GET /v1/events` (`nil`: the storage keeps none).
        public var events: (any EventOutbox)?

        public init(snapshot: @escaping @Sendable () -> RuntimeSnapshot, queue: any DeliveryQueue,
                    store: any TokenStore, clock: any WallClock,
                    readiness: @escaping @Sendable () async -> Readiness, wake: @escaping @Sendable (Set<String>) -> Void,
                    streams: StreamHub? = nil, channels: (any ChannelStore)? = nil,
                    transport: @escaping @Sendable (String) -> (any Transport)? = { _ in nil }, events: (any EventOutbox)? = nil) {
            self.snapshot = snapshot
            self.channels = channels
            self.transport = transport
            self.events = events
            self.queue = queue
            self.store = store
            self.clock = clock
            self.readiness = readiness
            self.wake = wake
            self.streams = streams
        }
    }

    let deps: Dependencies
    private let metrics: ServerMetrics
    let deliveryMetrics: DeliveryMetrics
    private let logger: Logger
    /// The front ends served beside the API, each on the paths it claims (``FrontEnd/paths``).
    let frontEnds: [any FrontEnd]
    /// Channel creations of one app, one at a time (the per-app limit is checked before Apple is asked).
    let channelCreations = KeyedAsyncLock<String>()

    /// - Parameter frontEnds: made here, each with the API's accept path (``FrontEndContext``).
    public init(_ dependencies: Dependencies, metrics: MetricsRegistry, logger: Logger, frontEnds: [any FrontEnd.Type] = []) {
        deps = dependencies
        self.metrics = ServerMetrics(registry: metrics)
        self.deliveryMetrics = DeliveryMetrics(registry: metrics)
        let logger = logger.labeled("api")
        self.logger = logger
        // The front ends reach the accept path through this reference, set once the API exists.
        let api = APIReference()
        let context = FrontEndContext(configuration: { dependencies.snapshot().configuration }, store: dependencies.store,
                                      accept: { request in
                                          guard let api = api.api else { throw APIError.shuttingDown }
                                          return try await api.accept(request)
                                      },
                                      authorize: { header, scope in dependencies.snapshot().auth.authorize(header, scope: scope) },
                                      clock: dependencies.clock, logger: logger, metrics: metrics)
        self.frontEnds = frontEnds.map { $0.init(context: context) }
        api.api = self
    }

    /// The front end that claims `request`'s path, if any.
    func frontEnd(for request: HTTPRequest) -> (any FrontEnd)? {
        frontEnds.first { type(of: $0).claims(request.path) }
    }

    // MARK: Routing

    enum Route: Sendable {
        case health, ready, metrics, demo, demoServiceWorker
        case registerDevice, removeDevice(token: String), userDevices(user: String)
        case sendNotification, notificationStatus(id: String)
        case stream, streamAck
        case mintClientToken
        case streamSubscription, publicClientKey(kind: String, app: String)
        case createChannel, listChannels, deleteChannel(id: String)
        case events

        var label: String {
            switch self {
            case .health: return "GET /healthz"
            case .ready: return "GET /readyz"
            case .metrics: return "GET /metrics"
            case .demo: return "GET /demo"
            case .demoServiceWorker: return "GET /demo/sw.js"
            case .registerDevice: return "POST /v1/devices"
            case .removeDevice: return "DELETE /v1/devices/{token}"
            case .userDevices: return "GET /v1/users/{user}/devices"
            case .sendNotification: return "POST /v1/notifications"
            case .notificationStatus: return "GET /v1/notifications/{id}"
            case .stream: return "GET /v1/stream"
            case .streamAck: return "POST /v1/stream/ack"
            case .mintClientToken: return "POST /v1/client-tokens"
            case .streamSubscription: return "POST /v1/stream/subscription"
            case .publicClientKey: return "GET /v1/{type}/{app}/public-key"
            case .createChannel: return "POST /v1/channels"
            case .listChannels: return "GET /v1/channels"
            case .deleteChannel: return "DELETE /v1/channels/{id}"
            case .events: return "GET /v1/events"
            }
        }

        var scope: APIConfiguration.Scope? {
            switch self {
            case .health, .ready, .stream, .streamAck, .demo, .demoServiceWorker, .streamSubscription, .publicClientKey: return nil
            case .metrics, .events: return .admin
            case .registerDevice, .removeDevice, .userDevices, .mintClientToken: return .devices
            case .sendNotification, .notificationStatus, .createChannel, .listChannels, .deleteChannel: return .send
            }
        }

        var hasJSONBody: Bool {
            switch self {
            case .registerDevice, .sendNotification, .mintClientToken, .streamSubscription, .createChannel: return true
            default: return false
            }
        }
    }

    /// The route for a request, or 404/405.
    static func route(_ request: HTTPRequest) -> Result<Route, APIError> {
        guard let s = request.pathSegments else { return .failure(.invalid("path", "the path has a malformed %-escape")) }
        let method = request.method == "HEAD" ? "GET" : request.method
        func only(_ allowed: String, _ route: Route) -> Result<Route, APIError> {
            if method == allowed { return .success(route) }
            return .failure(APIError(status: 405, code: "method_not_allowed",
                                     message: "\(request.method) is not allowed here; use \(allowed)", headers: ["Allow": allowed]))
        }
        switch s.count {
        case 1 where s[0] == "healthz": return only("GET", .health)
        case 1 where s[0] == "readyz": return only("GET", .ready)
        case 1 where s[0] == "metrics": return only("GET", .metrics)
        case 1 where s[0] == "demo": return only("GET", .demo)
        case 2 where s[0] == "demo" && s[1] == "sw.js": return only("GET", .demoServiceWorker)
        case 2 where s[0] == "v1" && s[1] == "devices": return only("POST", .registerDevice)
        case 3 where s[0] == "v1" && s[1] == "devices": return only("DELETE", .removeDevice(token: s[2]))
        case 4 where s[0] == "v1" && s[1] == "users" && s[3] == "devices": return only("GET", .userDevices(user: s[2]))
        case 2 where s[0] == "v1" && s[1] == "notifications": return only("POST", .sendNotification)
        case 3 where s[0] == "v1" && s[1] == "notifications": return only("GET", .notificationStatus(id: s[2]))
        case 2 where s[0] == "v1" && s[1] == "stream": return only("GET", .stream)
        case 3 where s[0] == "v1" && s[1] == "stream" && s[2] == "ack": return only("POST", .streamAck)
        case 2 where s[0] == "v1" && s[1] == "client-tokens": return only("POST", .mintClientToken)
        case 3 where s[0] == "v1" && s[1] == "stream" && s[2] == "subscription": return only("POST", .streamSubscription)
        case 4 where s[0] == "v1" && s[3] == "public-key": return only("GET", .publicClientKey(kind: s[1], app: s[2]))
        case 2 where s[0] == "v1" && s[1] == "channels":
            if method == "GET" { return .success(.listChannels) }
            if method == "POST" { return .success(.createChannel) }
            return .failure(APIError(status: 405, code: "method_not_allowed",
                                     message: "\(request.method) is not allowed here; use GET or POST", headers: ["Allow": "GET, POST"]))
        case 3 where s[0] == "v1" && s[1] == "channels": return only("DELETE", .deleteChannel(id: s[2]))
        case 2 where s[0] == "v1" && s[1] == "events": return only("GET", .events)
        default:
            return .failure(.notFound("no such endpoint: \(request.path); see docs/openapi.yaml"))
        }
    }

    /// Route, authentication, body size and media type: everything decided without waiting.
    func check(_ request: HTTPRequest) -> Result<Route, APIError> {
        let route: Route
        switch Self.route(request) {
        case .success(let r): route = r
        case .failure(let e): return .failure(e)
        }
        if let scope = route.scope, case .failure(let e) = deps.snapshot().auth.authorize(request.headers["authorization"], scope: scope) {
            return .failure(e)
        }
        if request.bodyTooLarge {
            let limit = deps.snapshot().configuration.api.maxBodyBytes
            return .failure(APIError(status: 413, code: "payload_too_large", message: "the request body is larger than api.maxBodyBytes (\(limit) bytes)"))
        }
        if route.hasJSONBody, request.headers["content-type"] != "application/json" {
            let type = request.headers["content-type"].flatMap { $0.split(separator: ";").first }
                .map { String($0.filter { $0 != " " && $0 != "\t" }).lowercased() }
            guard let type, type == "application/json" || type.hasSuffix("+json") else {
                return .failure(APIError(status: 415, code: "unsupported_media_type",
                                         message: "send the body as JSON with \"Content-Type: application/json\"", field: "Content-Type"))
            }
        }
        return .success(route)
    }

    /// Answers at once (on the server thread) what needs no store or queue (errors, `/healthz`,
    /// `/metrics`, stream acks); `nil` otherwise.
    public func immediate(_ request: HTTPRequest) -> HTTPResponse? {
        if let frontEnd = frontEnd(for: request) { return immediate(request, frontEnd: frontEnd, ownListener: false) }
        return immediate(request, checked: check(request))
    }

    /// A front end's immediate answer, counted by its route label.
    func immediate(_ request: HTTPRequest, frontEnd: any FrontEnd, ownListener: Bool) -> HTTPResponse? {
        let response = frontEnd.immediate(request, ownListener: ownListener)
        if let response { metrics.request(route: frontEnd.routeLabel(request), status: response.status) }
        return response
    }

    /// A front end's answer, counted by its route label.
    func handle(_ request: HTTPRequest, frontEnd: any FrontEnd, ownListener: Bool) async -> HTTPResponse {
        let response = await frontEnd.handle(request, ownListener: ownListener)
        metrics.request(route: frontEnd.routeLabel(request), status: response.status)
        return response
    }

    /// The `route` label of `herald_http_requests_total` for a request: its matched route
    /// (method and path template; a front end's own label for its paths), else
    /// ``unmatchedRoute``; never the raw path.
    func routeLabel(_ request: HTTPRequest) -> String {
        if let frontEnd = frontEnd(for: request) { return frontEnd.routeLabel(request) }
        return (try? Self.route(request).get())?.label ?? Self.unmatchedRoute
    }

    /// The route label of requests that match no route (or not with their method).
    static let unmatchedRoute = "other"

    /// Counts an answer the HTTP server gave itself, before any handler (503 `too_many_streams`,
    /// `too_many_connections`, `shutting_down`; 400 for an ambiguous length), by route.
    public func recordServerAnswer(method: String, path: String, status: Int) {
        metrics.request(route: routeLabel(HTTPRequest(method: method, path: path)), status: status)
    }

    private func immediate(_ request: HTTPRequest, checked: Result<Route, APIError>) -> HTTPResponse? {
        switch checked {
        case .failure(let e):
            let route = routeLabel(request)
            metrics.request(route: route, status: e.status)
            return e.response
        case .success(let route):
            let response: HTTPResponse
            switch route {
            case .health: response = HTTPResponse.json(200) { $0.string("status", "ok") }
            case .metrics: response = renderMetrics()
            case .demo:
                response = deps.snapshot().configuration.api.demo ? DemoPage.response()
                    : APIError.notFound("the demo page is off; set \"api\": {\"demo\": true} in the config to serve it").response
            case .demoServiceWorker:
                response = deps.snapshot().configuration.api.demo ? DemoPage.serviceWorkerResponse()
                    : APIError.notFound("the demo page is off; set \"api\": {\"demo\": true} in the config to serve it").response
            case .streamAck: response = streamAck(request)
            default: return nil
            }
            metrics.request(route: route.label, status: response.status)
            return response
        }
    }

    /// Answers any request.
    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        if let frontEnd = frontEnd(for: request) { return await handle(request, frontEnd: frontEnd, ownListener: false) }
        let checked = check(request)
        if let response = immediate(request, checked: checked) { return response }
        guard case .success(let route) = checked else { return APIError.notFound("no route").response }
        let response: HTTPResponse
        do {
            switch route {
            case .stream: response = await openStream(request)
            case .registerDevice: response = try await registerDevice(request)
            case .removeDevice(let token): response = try await removeDevice(token, request)
            case .userDevices(let user): response = try await userDevices(user, request)
            case .sendNotification: response = try await sendNotification(request)
            case .notificationStatus(let id): response = try await notificationStatus(id)
            case .mintClientToken: response = try await mintClientToken(request)
            case .streamSubscription: response = try await registerStreamSubscription(request)
            case .publicClientKey(let kind, let app): response = publicClientKey(kind: kind, appID: app)
            case .createChannel: response = try await createChannel(request)
            case .listChannels: response = try await listChannels(request)
            case .deleteChannel(let id): response = try await deleteChannel(id, request)
            case .ready: response = await ready()
            case .events: response = try await events(request)
            case .health, .metrics, .demo, .demoServiceWorker, .streamAck: response = APIError.notFound("unreachable").response
            }
        } catch let e as APIError {
            response = e.response
        } catch let e as StoreUnavailableError {
            // Nothing was stored; the same request may succeed once the database is back.
            response = APIError.unavailable("store_unavailable", e.message, retryAfter: deps.snapshot().configuration.server.retryAfter).response
        } catch {
            logger.error("request failed", ["route": route.label, "error": String(describing: error)])
            response = APIError(status: 500, code: "internal", message: "the request could not be completed: \(error)").response
        }
        metrics.request(route: route.label, status: response.status)
        return response
    }

    // MARK: Health and metrics

    /// `/readyz`: queries the store, so it runs off the server thread.
    private func ready() async -> HTTPResponse {
        let r = await deps.readiness()
        // Why the store does not answer (a closed queue, a database that went away; no secrets).
        var storeError: String?
        if !r.storeOpen { do { try await deps.queue.ping() } catch { storeError = String(describing: error) } }
        return HTTPResponse.json(r.isReady ? 200 : 503) { o in
            o.string("status", r.isDegraded ? "degraded" : r.isReady ? "ready" : "not_ready")
            o.string("store", r.storeOpen ? "open" : "unavailable")
            if let storeError { o.string("store_error", storeError) }
            o.object("transports") { t in
                for name in r.transports.keys.sorted() { t.string(name, r.transports[name]) }
            }
            if !r.webhooks.isEmpty {
                o.object("webhooks") { w in
                    for id in r.webhooks.keys.sorted() { w.string(id, r.webhooks[id]) }
                }
            }
        }
    }

    private func renderMetrics() -> HTTPResponse {
        var depth = deps.queue.depth()
        for name in deps.snapshot().configuration.transports.keys where depth[name] == nil { depth[name] = QueueDepth() }
        metrics.updateQueue(depth, waitingAccepts: deps.queue.waitingAccepts)
        return HTTPResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                            body: Array(metrics.registry.render().utf8))
    }

    // MARK: Bodies

    /// Parses a JSON body strictly.
    func parseBody(_ request: HTTPRequest) throws(APIError) -> JSONValue {
        if request.body.isEmpty { throw APIError(status: 400, code: "invalid_json", message: "the request body is empty; send a JSON object") }
        do { return try StrictJSON.parse(request.body) } catch {
            throw APIError(status: 400, code: "invalid_json", message: error.description)
        }
    }

    /// The first issue as a 400 naming its field; the others in the message.
    static func issuesError(_ issues: [JSONIssue]) -> APIError {
        guard let first = issues.first else { return .invalid(nil, "invalid request") }
        var message = first.message
        if issues.count > 1 {
            message += " (and \(issues.count - 1) more: " + issues.dropFirst().prefix(5).map(\.description).joined(separator: "; ") + ")"
        }
        return .invalid(first.path.isEmpty ? nil : first.path, message)
    }

    func app(_ id: String?, field: String, in configuration: HeraldConfiguration) throws(APIError) -> AppConfiguration {
        try Self.app(id, field: field, in: configuration)
    }

    /// The configured app `id`, or a 400 naming `field` (with the configured ids and a suggestion).
    static func app(_ id: String?, field: String, in configuration: HeraldConfiguration) throws(APIError) -> AppConfiguration {
        guard let id, !id.isEmpty else { throw .invalid(field, "is required: the app id (a key of \"apps\" in the config)") }
        guard let app = configuration.app(id) else {
            var message = "unknown app \"\(id)\"; configured: \(configuration.apps.keys.sorted().joined(separator: ", "))"
            if let s = Spelling.closest(to: id, in: configuration.apps.keys) { message += " (did you mean \"\(s)\"?)" }
            throw .invalid(field, message)
        }
        return app
    }

    /// Why the devices API refuses `user`: it belongs to a front end (`matrix:…`); `nil` otherwise.
    func reservedUserRefusal(_ user: String) -> String? {
        for frontEnd in frontEnds {
            guard let reserved = type(of: frontEnd).reservedUsers, user.hasPrefix(reserved.prefix) else { continue }
            return "users named \"\(reserved.prefix)…\" belong to \(reserved.owner); register the device under one of your own user ids"
        }
        return nil
    }

    var now: Date { deps.clock.now }
    var dependencies: Dependencies { deps }
    var serverMetrics: ServerMetrics { metrics }
    var apiLogger: Logger { logger }
}

/// The API as its front ends' accept path sees it: set once, right after the API is made.
private final class APIReference: @unchecked Sendable {
    weak var api: API?
}
