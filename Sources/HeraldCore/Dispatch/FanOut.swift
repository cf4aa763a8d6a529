import Dispatch
import FoundationEssentials
import Glibc

/// A notification turned into deliveries: one per device, routed, de-duplicated and limited.
public struct DispatchPlan: Sendable {
    public var notificationID: String
    public var app: AppConfiguration
    /// The content as planned: the request's, with the app's default override blocks merged in.
    public var content: NotificationContent
    /// Deliveries to send, numbered from 1 in this plan.
    public var deliveries: [Delivery]
    /// Devices that are already final without sending (a malformed token, no route, content
    /// their route refused).
    public var reports: [DeliveryReport]
    /// The routes that refused the content, each once: their deliveries are in ``reports`` as
    /// `rejected`, and a fallback through such a route was dropped. Routes no delivery takes are
    /// never asked.
    public var refusals: [RouteRefusal]
    /// Devices left out because a user had more than `maxDevicesPerUser`.
    public var skippedOverLimit: Int
    /// Targets that appeared more than once (same token via two users or a user and a raw token).
    public var duplicates: Int
}

/// A route that cannot carry a notification's content: its deliveries are `rejected`, the
/// others go on.
public struct RouteRefusal: Sendable, Equatable, CustomStringConvertible {
    /// The route (its key under `transports`).
    public var route: String
    /// Its plugin type.
    public var kind: String
    /// The field and limit, in the plugin's words.
    public var problem: ContentProblem

    public init(route: String, kind: String, problem: ContentProblem) {
        self.route = route
        self.kind = kind
        self.problem = problem
    }

    /// `route apns (apns-http2): body: nothing for APNs to send …`: the reason a refused delivery carries.
    public var description: String { "route \(route) (\(kind)): \(problem.field): \(problem.message)" }
}

/// A request the dispatcher cannot act on; says which field and why.
public enum DispatchError: Error, CustomStringConvertible, Sendable, Equatable {
    case unknownApp(String, known: [String])
    case invalidRequest(field: String, message: String)
    case store(String)
    /// The store cannot be reached right now (``StoreUnavailableError``): retry later.
    case storeUnavailable(String)

    public var description: String {
        switch self {
        case .unknownApp(let app, let known):
            return "app: unknown app \"\(app)\"; configured: \(known.joined(separator: ", "))"
        case .invalidRequest(let field, let message):
            return "\(field): \(message)"
        case .store(let message), .storeUnavailable(let message):
            return "store: \(message)"
        }
    }
}

/// Resolves a request's users and tokens to routed deliveries.
///
/// An app whose `foreground` policy is not `push-only` also routes through its local (stream)
/// transport, asking ``presence`` which devices have a stream open: `local-first` sends a
/// connected device only its stream (falling back to its push route), `local-and-push` both,
/// `local-only` every device its stream (the inbox keeps what a closed app missed). A push
/// delivery of such an app falls back to the inbox when its token is dead or it is rejected.
///
/// A device with a ``DeviceAttributes/streamDevice`` attribute (a browser's push subscription
/// registered by its page) is present when that stream device is: its local delivery carries
/// ``Delivery/streamDevice``, and the stream device is not planned a second time as a
/// connected device the store does not know.
public struct FanOut: Sendable {
    public let configuration: HeraldConfiguration
    public let store: any TokenStore
    public let presence: (any Presence)?

    public init(configuration: HeraldConfiguration, store: any TokenStore, presence: (any Presence)? = nil) {
        self.configuration = configuration
        self.store = store
        self.presence = presence
    }

    /// Plans the deliveries of `request`.
    ///
    /// The content is rendered once for each route its deliveries take (and each fallback they
    /// may take), and only for those: a route that refuses it (over its size limit, nothing it
    /// can send, a bad override block) makes only its own deliveries `rejected`, with its reason
    /// (``DispatchPlan/refusals``), and is dropped as a fallback; the other deliveries go on.
    /// - Throws: ``DispatchError`` for an unknown app, a request with no target, or a store failure.
    /// - Parameters:
    ///   - notificationID: the id the deliveries carry (a bulk send plans chunks of one notification).
    ///   - tokenIndexOffset: added to `tokens[i]` in errors (the chunk's place in a bulk send).
    public func plan(_ request: NotificationRequest, notificationID: String = UUIDSource.timeOrdered().lowercasedString,
                     tokenIndexOffset: Int = 0) async throws(DispatchError) -> DispatchPlan
    {
        guard let app = configuration.app(request.app) else {
            throw .unknownApp(request.app, known: configuration.apps.keys.sorted())
        }
        if request.users.isEmpty && request.tokens.isEmpty {
            throw .invalidRequest(field: "users", message: "give at least one user or token")
        }
        let content = Self.withDefaults(request.content, app: app)

        var deliveries: [Delivery] = []
        var reports: [DeliveryReport] = []
        var seen = Set<String>()
        var skipped = 0
        var duplicates = 0
        // Without presence (the CLI) there are no streams: every policy plans as push-only.
        let local = app.foreground == .pushOnly || presence == nil ? nil : configuration.localTransport(app: app)
        var connected: [String: Set<String>] = [:]
        if local != nil, let presence, !request.users.isEmpty {
            connected = presence.connectedDevices(app: app.id, users: Array(Set(request.users)))
        }
        func append(_ token: String, _ user: String?, _ route: String, fallback: String?, streamDevice: String? = nil) {
            deliveries.append(Delivery(id: Int64(deliveries.count + 1), notificationID: notificationID, app: app.id,
                                       topic: app.topic, token: token, user: user, transport: route,
                                       messageID: UUIDSource.random(), content: content, payload: .unrendered,
                                       fallback: fallback, streamDevice: streamDevice))
        }

        /// `stream`: the device's stream device when it is not `token` (a linked subscription).
        func add(token: String, user: String?, route: String?, stream: String? = nil) {
            guard seen.insert(token).inserted else { duplicates += 1; return }
            if let local, route == local {
                // A device with no push route (a browser): its stream, or the inbox.
                append(token, user, local, fallback: nil)
                return
            }
            guard let route else {
                reports.append(DeliveryReport(token: token, user: user, transport: nil, outcome: .failed,
                                              reason: "no route: no route of app \(app.id) can carry this device",
                                              attempts: 0, messageID: nil))
                return
            }
            guard let local else {
                append(token, user, route, fallback: nil)
                return
            }
            // The linked stream device stands for this device: not planned again on its own.
            if let stream { seen.insert(stream) }
            let isConnected = user.map { connected[$0]?.contains(stream ?? token) ?? false } ?? false
            switch app.foreground {
            case .pushOnly:
                append(token, user, route, fallback: nil)
            case .localFirst:
                if isConnected { append(token, user, local, fallback: route, streamDevice: stream) }
                else { append(token, user, route, fallback: local, streamDevice: stream) }
            case .localAndPush:
                if isConnected { append(token, user, local, fallback: nil, streamDevice: stream) }
                append(token, user, route, fallback: isConnected ? nil : local, streamDevice: stream)
            case .localOnly:
                append(token, user, local, fallback: nil, streamDevice: stream)
            }
        }

        if !request.users.isEmpty {
            let users = Array(Set(request.users)).sorted()
            let devices: [Device]
            do {
                devices = try await store.devices(app: app.id, users: users, includeInvalidated: false)
            } catch let e as StoreUnavailableError {
                throw .storeUnavailable(e.message)
            } catch {
                throw .store("cannot read devices: \(error)")
            }
            var perUser: [String: Int] = [:]
            for device in devices {
                let count = perUser[device.user, default: 0]
                if count >= app.maxDevicesPerUser { skipped += 1; continue }
                perUser[device.user] = count + 1
                add(token: device.token, user: device.user, route: route(app: app, device: device),
                    stream: device.attributes[DeviceAttributes.streamDevice].flatMap { $0 == device.token ? nil : $0 })
            }
        }

        // Connected devices the store does not know (a browser with an installation id).
        if let local {
            for user in connected.keys.sorted() {
                for token in connected[user, default: []].sorted() where !seen.contains(token) {
                    seen.insert(token)
                    append(token, user, local, fallback: nil)
                }
            }
        }

        // Raw addresses: the first push route that takes each one normalises it (with a
        // platform, the app's first route of that platform only).
        var normalized: [(token: String, route: String)] = []
        normalized.reserveCapacity(request.tokens.count)
        var platformRoute: String? = nil
        if let platform = request.platform { platformRoute = try Self.firstRoute(of: platform, app: app, configuration: configuration) }
        for (index, raw) in request.tokens.enumerated() {
            let found: (transport: String, address: DeviceAddress)?
            if let platformRoute {
                found = configuration.transports[platformRoute]?.accepts(.token(raw), attributes: request.attributes).map { (platformRoute, $0) }
            } else {
                found = pushRoute(app: app, input: .token(raw), attributes: request.attributes)
            }
            if let found {
                normalized.append((found.address.token, found.transport))
            } else {
                let why = platformRoute.map { route in configuration.refusal(route: route, input: .token(raw), attributes: request.attributes) ?? "" }
                    ?? configuration.refusals(app: app, input: .token(raw), attributes: request.attributes)
                reports.append(DeliveryReport(token: raw, user: nil, transport: nil, outcome: .rejected,
                                              reason: "tokens[\(index + tokenIndexOffset)]: no route of app \(app.id) takes it\(why.isEmpty ? "" : ": " + why)",
                                              attempts: 0, messageID: nil))
            }
        }
        var knownDevices: [String: Device] = [:]
        if !normalized.isEmpty {
            do {
                for d in try await store.devices(app: app.id, tokens: normalized.map(\.token)) { knownDevices[d.token] = d }
            } catch let e as StoreUnavailableError {
                throw .storeUnavailable(e.message)
            } catch {
                throw .store("cannot read devices: \(error)")
            }
        }
        for (token, found) in normalized {
            if let known = knownDevices[token] {
                add(token: token, user: known.user, route: route(app: app, device: known),
                    stream: known.attributes[DeviceAttributes.streamDevice].flatMap { $0 == known.token ? nil : $0 })
            } else {
                add(token: token, user: nil, route: found)
            }
        }
        let refusals = judge(&deliveries, reports: &reports, content: content, app: app, notificationID: notificationID)
        return DispatchPlan(notificationID: notificationID, app: app, content: content, deliveries: deliveries, reports: reports,
                            refusals: refusals, skippedOverLimit: skipped, duplicates: duplicates)
    }

    /// Renders `content` for each route the deliveries take or may fall back to, and applies each
    /// refusal to that route's deliveries only: one goes through its fallback when that route
    /// takes the content, else it becomes a `rejected` report (unless another delivery of the same
    /// device goes on); fallbacks through a refusing route are dropped; the rest carry their
    /// route's payload, renumbered from 1.
    /// - Returns: the refusals, in route order.
    func judge(_ deliveries: inout [Delivery], reports: inout [DeliveryReport], content: NotificationContent, app: AppConfiguration,
               notificationID: String) -> [RouteRefusal] {
        var used: [String] = []
        var seen = Set<String>()
        for d in deliveries {
            if seen.insert(d.transport).inserted { used.append(d.transport) }
            if let f = d.fallback, seen.insert(f).inserted { used.append(f) }
        }
        let context = RenderContext(notificationID: notificationID, app: app.id, topic: app.topic)
        var payloads: [String: RenderedPayload] = [:]
        var refused: [String: RouteRefusal] = [:]
        for route in used {
            guard let spec = configuration.transports[route] else { continue }
            do {
                payloads[route] = try spec.configuration.render(content, context: context)
            } catch {
                refused[route] = RouteRefusal(route: route, kind: spec.kind, problem: error)
            }
        }
        var kept: [Delivery] = []
        kept.reserveCapacity(deliveries.count)
        var rejected: [(Delivery, RouteRefusal)] = []
        for var d in deliveries {
            if let refusal = refused[d.transport] {
                // The fallback carries it when it can (a connected device's push route when its
                // stream has nothing to show); else the delivery is rejected with its route's reason.
                guard let f = d.fallback, refused[f] == nil, payloads[f] != nil else {
                    rejected.append((d, refusal))
                    continue
                }
                d.transport = f
                d.fallback = nil
            }
            if let f = d.fallback, refused[f] != nil { d.fallback = nil }
            d.payload = payloads[d.transport] ?? .unrendered
            d.id = Int64(kept.count + 1)
            kept.append(d)
        }
        // A device another of its deliveries reaches (local-and-push) is not reported refused.
        let reached = Set(kept.map(\.token))
        for (d, refusal) in rejected where !reached.contains(d.token) {
            reports.append(DeliveryReport(token: d.token, user: d.user, transport: d.transport, outcome: .rejected,
                                          reason: refusal.description, attempts: 0, messageID: d.messageID.lowercasedString))
        }
        deliveries = kept
        return used.compactMap { refused[$0] }
    }

    /// A device's route: its own while the app still routes through it and it can carry the
    /// device, else the first of the app's push routes that takes its address.
    public func route(app: AppConfiguration, device: Device) -> String? {
        if app.routes.contains(device.transport), let spec = configuration.transports[device.transport],
           spec.configuration.canCarry(device.attributes) {
            return device.transport
        }
        return pushRoute(app: app, input: .token(device.token), attributes: device.attributes)?.transport
    }

    /// The app's first route of `platform` (``HeraldConfiguration/platformRoute(app:platform:)``,
    /// the rule registrations follow).
    /// - Throws: ``DispatchError/invalidRequest(field:message:)`` naming `platform` when it has none.
    public static func firstRoute(of platform: Platform, app: AppConfiguration, configuration: HeraldConfiguration) throws(DispatchError) -> String {
        do {
            return try configuration.platformRoute(app: app, platform: platform)
        } catch {
            throw .invalidRequest(field: error.field, message: error.message)
        }
    }

    /// The first of the app's routes other than its local one that takes `input`.
    func pushRoute(app: AppConfiguration, input: DeviceAddressInput, attributes: DeviceAttributes) -> (transport: String, address: DeviceAddress)? {
        for name in configuration.routeOrder(app) {
            guard let spec = configuration.transports[name], spec.kind != HeraldConfiguration.localKind else { continue }
            if let address = spec.accepts(input, attributes: attributes) { return (name, address) }
        }
        return nil
    }

    /// The content with the app's default override blocks merged under its own.
    public static func withDefaults(_ content: NotificationContent, app: AppConfiguration) -> NotificationContent {
        guard !app.overrides.isEmpty else { return content }
        var merged = content
        for (name, defaults) in app.overrides {
            merged.overrides[name] = JSONValue.merge(defaults, under: content.overrides[name])
        }
        return merged
    }

    /// Renders the content for one route (a front end checking the route it chose before it
    /// stores anything).
    /// - Throws: ``DispatchError/invalidRequest(field:message:)`` naming the route and its limit.
    public static func render(_ content: NotificationContent, route: String, app: AppConfiguration, configuration: HeraldConfiguration,
                              notificationID: String) throws(DispatchError) -> RenderedPayload {
        guard let spec = configuration.transports[route] else {
            throw .invalidRequest(field: "transport", message: "route \(route) is not configured")
        }
        do {
            return try spec.configuration.render(content, context: RenderContext(notificationID: notificationID, app: app.id, topic: app.topic))
        } catch {
            throw .invalidRequest(field: error.field, message: RouteRefusal(route: route, kind: spec.kind, problem: error).description)
        }
    }
}
