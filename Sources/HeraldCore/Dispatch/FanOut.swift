import Dispatch
import FoundationEssentials
import Glibc

/// A notification turned into deliveries: one per device, routed, de-duplicated and limited.
public struct DispatchPlan: Sendable {
    public var notificationID: String
    public var app: AppConfiguration
    /// Deliveries to send, numbered from 1 in this plan.
    public var deliveries: [Delivery]
    /// Devices that are already final without sending (a malformed token, no route).
    public var reports: [DeliveryReport]
    /// Devices left out because a user had more than `maxDevicesPerUser`.
    public var skippedOverLimit: Int
    /// Targets that appeared more than once (same token via two users or a user and a raw token).
    public var duplicates: Int
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
        try Self.validate(request.content)

        let payload = APNsPayload.encode(request.content)
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
        func append(_ token: String, _ user: String?, _ environment: APNsEnvironment, _ route: String, fallback: String?) {
            deliveries.append(Delivery(id: Int64(deliveries.count + 1), notificationID: notificationID, app: app.id,
                                       topic: app.topic, token: token, user: user, environment: environment,
                                       transport: route, apnsID: UUIDSource.random(), content: request.content, payload: payload,
                                       fallback: fallback))
        }

        // The default route per environment, looked up once per plan rather than per device.
        var defaults: [APNsEnvironment: String?] = [:]
        func add(token: String, user: String?, transport: String?, environment: APNsEnvironment) {
            guard seen.insert(token).inserted else { duplicates += 1; return }
            if let local, transport == local {
                // A device with no push route (a browser): its stream, or the inbox.
                append(token, user, environment, local, fallback: nil)
                return
            }
            let route: String?
            if transport == nil {
                if let known = defaults[environment] { route = known } else {
                    route = self.route(app: app, preferred: nil, environment: environment)
                    defaults[environment] = route
                }
            } else {
                route = self.route(app: app, preferred: transport, environment: environment)
            }
            guard let route else {
                reports.append(DeliveryReport(token: token, user: user, transport: nil, outcome: .failed,
                                              reason: "no route: app \(app.id) has no transport for \(environment.rawValue) devices",
                                              attempts: 0, apnsID: nil))
                return
            }
            guard let local else {
                append(token, user, environment, route, fallback: nil)
                return
            }
            let isConnected = user.map { connected[$0]?.contains(token) ?? false } ?? false
            switch app.foreground {
            case .pushOnly:
                append(token, user, environment, route, fallback: nil)
            case .localFirst:
                if isConnected { append(token, user, environment, local, fallback: route) } else { append(token, user, environment, route, fallback: local) }
            case .localAndPush:
                if isConnected { append(token, user, environment, local, fallback: nil) }
                append(token, user, environment, route, fallback: isConnected ? nil : local)
            case .localOnly:
                append(token, user, environment, local, fallback: nil)
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
                add(token: device.token, user: device.user, transport: device.transport, environment: device.environment)
            }
        }

        // Connected devices the store does not know (a browser with an installation id).
        if let local {
            for user in connected.keys.sorted() {
                for token in connected[user, default: []].sorted() where !seen.contains(token) {
                    seen.insert(token)
                    append(token, user, configuration.defaultEnvironment(app), local, fallback: nil)
                }
            }
        }

        var normalized: [String] = []
        normalized.reserveCapacity(request.tokens.count)
        for (index, raw) in request.tokens.enumerated() {
            do {
                normalized.append(try DeviceToken.normalize(raw))
            } catch {
                reports.append(DeliveryReport(token: raw, user: nil, transport: nil, outcome: .rejected,
                                              reason: "tokens[\(index + tokenIndexOffset)]: \(error)", attempts: 0, apnsID: nil))
            }
        }
        var knownDevices: [String: Device] = [:]
        if !normalized.isEmpty {
            do {
                for d in try await store.devices(app: app.id, tokens: normalized) { knownDevices[d.token] = d }
            } catch let e as StoreUnavailableError {
                throw .storeUnavailable(e.message)
            } catch {
                throw .store("cannot read devices: \(error)")
            }
        }
        for token in normalized {
            if let known = knownDevices[token] {
                add(token: token, user: known.user, transport: known.transport, environment: known.environment)
            } else {
                let environment = request.environment ?? configuration.defaultEnvironment(app)
                add(token: token, user: nil, transport: nil, environment: environment)
            }
        }
        return DispatchPlan(notificationID: notificationID, app: app, deliveries: deliveries, reports: reports,
                            skippedOverLimit: skipped, duplicates: duplicates)
    }

    /// The transport for a device: its own when the app still routes through it and it can
    /// carry the device, else the first of the app's routes that can.
    public func route(app: AppConfiguration, preferred: String?, environment: APNsEnvironment) -> String? {
        if let preferred, app.routes.contains(preferred),
           configuration.transports[preferred]?.canCarry(environment) == true {
            return preferred
        }
        return configuration.defaultTransport(app: app, environment: environment)
    }

    /// Checks the request's content against Apple's rules before anything is queued.
    public static func validate(_ content: NotificationContent) throws(DispatchError) {
        let o = content.apns
        // Any of the three is accepted for every type; background pushes are sent with 5 whatever is given.
        if let p = o.priority, !content.pushType.allows(priority: p) {
            throw .invalidRequest(field: "apns.priority", message: "must be 10, 5 or 1, found \(p)")
        }
        if let c = o.collapseID, c.utf8.count > 64 {
            throw .invalidRequest(field: "apns.collapse_id", message: "must be at most 64 bytes, found \(c.utf8.count)")
        }
        if let r = o.relevanceScore, !(0...1).contains(r) {
            throw .invalidRequest(field: "apns.relevance_score", message: "must be between 0 and 1")
        }
        if let e = o.expiration, e < 0 {
            throw .invalidRequest(field: "apns.expiration", message: "must be a UNIX time in seconds, or 0 for now-or-never")
        }
        if content.data["aps"] != nil {
            throw .invalidRequest(field: "data.aps", message: "\"aps\" is reserved for Apple's keys; use the top-level fields")
        }
        if let badge = content.badge, badge < 0 {
            throw .invalidRequest(field: "badge", message: "must be 0 or more")
        }
        if case .critical(_, let volume?)? = content.sound, !(0...1).contains(volume) {
            throw .invalidRequest(field: "sound.volume", message: "must be between 0 and 1")
        }
    }
}
