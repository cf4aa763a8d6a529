import FoundationEssentials
import Glibc
import HeraldCore
import HeraldServer

/// The Matrix Push Gateway API's `POST /_matrix/push/v1/notify` (on `api.listen`, or on
/// `matrix.listen` through a listener of its own).
///
/// Each pusher's notification goes through the same accept path as `POST /v1/notifications`:
/// the answer is 200 only once it is committed, and a homeserver's retry of the same `event_id`
/// for the same pushkey is answered without sending again (the idempotency key
/// `matrix:<event_id>:<token>`). `rejected` lists the pushkeys Herald knows are dead (the push
/// service said so on an earlier send, at or after the pusher's `pushkey_ts`: APNs 410 or a bad
/// token, FCM `UNREGISTERED` or an invalid token, Web Push 404 or 410), of unknown `app_id`s, or
/// that are no address of their platform (no APNs token; a web pusher without `data.endpoint` and
/// `data.auth`, or with bad keys); never one whose endpoint is outside the route's
/// `allowedEndpoints` (not sent, counted `refused_endpoint_not_allowed`, as Sygnal does), never
/// one that only failed for a while, and a retryable failure of the push service is retried by
/// the queue after the 200, never answered 5xx.
///
/// Each `app_id` maps to a Herald app, and its pushers get the payload of that app's platform
/// (``MatrixConfiguration/platform(of:app:configuration:)``): iOS (``MatrixPayload``), Android
/// (``MatrixAndroidPayload``, through the app's first `android` route) or the web
/// (``MatrixWebPayload``, through its first `web` route). The gateway names no plugin: it reads the
/// routes' platforms and emits the `fcm` or `webpush` override block.
///
/// Pushkeys become devices of the user `matrix:<app_id>` in the token store (registered at
/// `pushkey_ts`), so the push services' answers invalidate them with the timestamp rule and `herald devices`
/// and `herald prune` see them. The gateway pushes only to devices of `matrix:` users: a pushkey
/// whose token the devices API registered for one of the app's own users is never sent to.
///
/// The endpoint has no authentication (as the spec and Sygnal have it), so what a stranger can
/// make it do is bounded: `matrix.allowedSources`, rate limits per `app_id` and per source and
/// `app_id` (``MatrixRateLimiter``), `matrix.maxDevicesPerApp`, and one log line per burst of
/// refusals rather than one per request (``MatrixLogDigest``).
///
/// A ``FrontEnd`` of the daemon (registered in `main`): it claims `/_matrix/…` on `api.listen`
/// and serves `matrix.listen` when set; the daemon knows no Matrix.
public final class MatrixGateway: FrontEnd {
    public static let name = "matrix"
    public static let title = "matrix gateway"
    public static let paths = ["/_matrix"]
    public static let reservedUsers: ReservedUsers? = ReservedUsers(prefix: "matrix:", owner: "the Matrix gateway (its pushers' devices)")

    /// The notify path.
    static let matrixNotifyPath = ["_matrix", "push", "v1", "notify"]
    static let matrixRoute = "POST /_matrix/push/v1/notify"

    let context: FrontEndContext
    /// The gateway's rate limiter, device cap, log digest and counters.
    let matrixState: MatrixGatewayState

    public init(context: FrontEndContext) {
        self.context = context
        matrixState = MatrixGatewayState(registry: context.metrics)
    }

    var now: Date { context.clock.now }
    var apiLogger: Logger { context.logger }

    public func routeLabel(_ request: HTTPRequest) -> String {
        request.method == "POST" && request.pathSegments == Self.matrixNotifyPath ? Self.matrixRoute : "other"
    }

    public func listener(_ configuration: HeraldConfiguration) -> FrontEndListener? {
        guard let matrix = configuration.section(MatrixConfiguration.self), let listen = matrix.listen else { return nil }
        return FrontEndListener(address: listen, setting: "matrix.listen", maxBodyBytes: matrix.maxBodyBytes)
    }

    /// Matrix settings a reload cannot apply.
    public static func restartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String] {
        let a = old.section(MatrixConfiguration.self), b = new.section(MatrixConfiguration.self)
        if a?.listen != b?.listen, a?.listen != nil || b?.listen != nil {
            return ["matrix.listen changed (\(a?.listen?.description ?? "none") → \(b?.listen?.description ?? "none")): restart to apply"]
        }
        if a?.listen != nil, a?.maxBodyBytes != b?.maxBodyBytes {
            return ["matrix.maxBodyBytes changed while matrix.listen is set: restart to apply"]
        }
        return []
    }

    /// Whether `request` is for the Matrix gateway (its path starts with `/_matrix/`).
    static func isMatrix(_ request: HTTPRequest) -> Bool {
        request.path == "/_matrix" || request.path.hasPrefix("/_matrix/")
    }

    /// The checks decided without waiting (configuration, path, method, size); `nil` when the
    /// request is a notify to process.
    /// - Parameter ownListener: the request came through `matrix.listen` (not `api.listen`).
    func matrixCheck(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse? {
        guard let config = context.configuration().section(MatrixConfiguration.self) else {
            return Self.matrixError(404, "M_UNRECOGNIZED", "the Matrix push gateway is off: add a \"matrix\" section to the configuration")
        }
        if !ownListener, let listen = config.listen {
            return Self.matrixError(404, "M_UNRECOGNIZED", "the Matrix push gateway listens on matrix.listen (\(listen)), not here")
        }
        guard Self.isMatrix(request), request.pathSegments == Self.matrixNotifyPath else {
            return Self.matrixError(404, "M_UNRECOGNIZED", "unrecognized request: \(request.path); the push gateway serves POST /_matrix/push/v1/notify")
        }
        guard request.method == "POST" else {
            return Self.matrixError(405, "M_UNRECOGNIZED", "\(request.method) is not allowed here; use POST", headers: [("Allow", "POST")])
        }
        if request.bodyTooLarge || request.body.count > config.maxBodyBytes {
            return Self.matrixError(413, "M_TOO_LARGE", "the request body is larger than matrix.maxBodyBytes (\(config.maxBodyBytes) bytes)")
        }
        return nil
    }

    /// Answers at once what needs no store or queue (errors, `matrix.allowedSources`, the rate
    /// limits); `nil` for a notify to hand to ``handle(_:ownListener:)``.
    public func immediate(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse? {
        var response = matrixCheck(request, ownListener: ownListener)
        if response == nil, let config = context.configuration().section(MatrixConfiguration.self) {
            let now = self.now
            matrixState.digest.flush(now: now, logger: apiLogger)
            response = matrixAdmit(request, config, now: now)
        }
        return response
    }

    /// `matrix.allowedSources`, then the rate limits; a malformed body is answered 400 here once
    /// admitted (it costs its source the bucket of unknown `app_id`s).
    private func matrixAdmit(_ request: HTTPRequest, _ config: MatrixConfiguration, now: Date) -> HTTPResponse? {
        guard config.allows(request.peer) else {
            matrixRefused("source_not_allowed", request, now: now)
            return Self.matrixError(403, "M_FORBIDDEN", "this push gateway accepts notifications only from matrix.allowedSources")
        }
        let parsed = Self.matrixParse(request.body)
        var apps = Set<MatrixRateLimiter.AppClass>()
        if case .success(let n) = parsed {
            for device in n.devices { apps.insert(config.apps[device.appID] != nil ? .app(device.appID) : .unknown) }
        }
        if apps.isEmpty { apps.insert(.unknown) }
        if let refusal = matrixState.limiter.admit(source: request.peer, apps: apps, perSource: config.maxRequestsPerSecondPerSource,
                                                   perApp: config.maxRequestsPerSecond, configured: Set(config.apps.keys), now: now) {
            matrixRefused(refusal.reason, request, now: now)
            let ms = max(1, Int((refusal.wait * 1000).rounded(.up)))
            let limit = refusal.reason == "rate_per_source" ? "matrix.maxRequestsPerSecondPerSource (\(config.maxRequestsPerSecondPerSource) from one source)"
                : "matrix.maxRequestsPerSecond (\(config.maxRequestsPerSecond) for one app_id)"
            return Self.matrixError(429, "M_LIMIT_EXCEEDED", "more notify requests than \(limit); retry in \(ms) ms",
                                    headers: [("Retry-After", String(max(1, Int(refusal.wait.rounded(.up)))))], retryAfterMs: ms)
        }
        if case .failure(let failure) = parsed { return failure.response }
        return nil
    }

    /// Counts a refused request (`herald_matrix_refused_total{reason}`) and hands it to the digest.
    private func matrixRefused(_ reason: String, _ request: HTTPRequest, now: Date) {
        matrixState.count("herald_matrix_refused_total", "Matrix notify requests refused before reading them, by reason "
                          + "(rate_per_source, rate_per_app, source_not_allowed).", [("reason", reason)])
        matrixState.digest.record(.refused, reason: reason, source: request.peer, now: now, logger: apiLogger) {
            ("Matrix notify refused", ["reason": reason, "source": request.peer?.description ?? "unknown"])
        }
    }

    /// The body as a notification, or the 400 that says why not.
    static func matrixParse(_ body: [UInt8]) -> Result<MatrixNotification, MatrixParseFailure> {
        let json: JSONValue
        do { json = try StrictJSON.parse(body) } catch {
            return .failure(MatrixParseFailure(response: matrixError(400, "M_NOT_JSON", "the body is not JSON: \(error.description)")))
        }
        do { return .success(try MatrixNotification.parse(json)) } catch {
            return .failure(MatrixParseFailure(response: matrixError(400, "M_BAD_JSON", error.issues.prefix(5).map(\.description).joined(separator: "; "))))
        }
    }

    /// Answers a notify request.
    public func handle(_ request: HTTPRequest, ownListener: Bool) async -> HTTPResponse {
        if let response = matrixCheck(request, ownListener: ownListener) { return response }
        let response: HTTPResponse
        do {
            response = try await notify(request)
        } catch let e as APIError {
            response = Self.matrixError(e.status, e.status == 400 ? "M_BAD_JSON" : "M_UNKNOWN", e.message,
                                        headers: e.retryAfter.map { [("Retry-After", String($0))] } ?? [])
        } catch {
            apiLogger.error("notify failed", ["route": Self.matrixRoute, "error": String(describing: error)])
            let retry = context.configuration().server.retryAfter
            response = Self.matrixError(503, "M_UNKNOWN", "the notification could not be stored: \(error); retry later",
                                        headers: [("Retry-After", String(retry))])
        }
        return response
    }

    private func notify(_ request: HTTPRequest) async throws -> HTTPResponse {
        let notification: MatrixNotification
        switch Self.matrixParse(request.body) {
        case .success(let n): notification = n
        case .failure(let failure): return failure.response
        }
        var rejected: [String] = []
        var overCap: [String] = []
        for device in notification.devices {
            switch try await notify(notification, device, source: request.peer) {
            case .done: break
            case .rejected: rejected.append(device.pushkey)
            case .overDeviceLimit: overCap.append(device.appID)
            }
        }
        if let appID = overCap.first, let config = context.configuration().section(MatrixConfiguration.self) {
            // Not `rejected`: that would make the homeserver delete the pusher for good. An error
            // makes it retry later (the spec), and the pushes this request did queue are not sent
            // twice (the event id's idempotency key).
            let retry = context.configuration().server.retryAfter
            return Self.matrixError(503, "M_RESOURCE_LIMIT_EXCEEDED",
                                    "app_id \(JSONValue.string(String(appID.prefix(200))).jsonString) has matrix.maxDevicesPerApp "
                                    + "(\(config.maxDevicesPerApp)) devices: \(overCap.count) new pushkey\(overCap.count == 1 ? "" : "s") "
                                    + "not registered; retry later",
                                    headers: [("Retry-After", String(retry))])
        }
        return HTTPResponse.json(200) { o in
            o.array("rejected") { w in
                for (i, key) in rejected.enumerated() {
                    if i > 0 { w.raw(UInt8(ascii: ",")) }
                    w.string(key)
                }
            }
        }
    }

    /// What became of one pusher's notification.
    private enum MatrixOutcome {
        /// Queued, a duplicate, or nothing to send (not the pushkey's fault).
        case done
        /// Listed in `rejected`.
        case rejected
        /// A new pushkey of an app at `matrix.maxDevicesPerApp`.
        case overDeviceLimit
    }

    /// Counts a pushkey not sent (`herald_matrix_pushkeys_total`) and hands it to the digest.
    private func matrixNotSent(_ label: String, _ outcome: String, _ device: MatrixDevice, source: IPAddress?, reason: String) {
        matrixState.pushkey(label, outcome)
        matrixState.digest.record(.notSent, reason: outcome, source: source, now: now, logger: apiLogger) {
            ("pushkey not sent", ["app_id": String(device.appID.prefix(200)), "pushkey": Redact.token(String(device.pushkey.prefix(512))),
                                  "outcome": outcome, "reason": reason, "source": source?.description ?? "unknown"])
        }
    }

    /// Where one pusher's notifications go: the device's token (the store's key), its
    /// attributes, and the route that takes it (Android and web; an iOS token's route is looked
    /// up with the stored device's attributes).
    private struct MatrixTarget {
        var token: String
        var attributes: DeviceAttributes
        var route: (transport: String, address: DeviceAddress)?
    }

    /// The pushkey as an address of the platform's route, or why it is rejected (outcome, reason).
    private func matrixTarget(_ device: MatrixDevice, platform: Platform, route: String, mapping: MatrixConfiguration.App, app: AppConfiguration,
                              configuration: HeraldConfiguration) -> Result<MatrixTarget, MatrixRefusal> {
        if platform == .ios {
            let token: String
            do { token = try MatrixPushkey.hexToken(device.pushkey) } catch {
                return .failure(MatrixRefusal(outcome: "rejected_bad_pushkey", reason: "the pushkey is no APNs token: \(error)"))
            }
            var attributes = DeviceAttributes()
            attributes["environment"] = mapping.environment
            return .success(MatrixTarget(token: token, attributes: attributes, route: nil))
        }
        let input: DeviceAddressInput
        if platform == .web {
            // Sygnal's webpush pushkin: the pushkey is the p256dh, data.endpoint and data.auth complete it.
            guard let subscription = MatrixWebPayload.subscription(device) else {
                return .failure(MatrixRefusal(outcome: "rejected_bad_subscription",
                                              reason: "a web pusher needs data.endpoint and data.auth (strings) beside its pushkey (the p256dh)"))
            }
            input = .subscription(subscription)
        } else {
            input = .token(device.pushkey)
        }
        let name = route
        guard let spec = configuration.transports[name] else {
            return .failure(MatrixRefusal(outcome: "rejected_no_route", reason: "route \(name) is not configured (matrix.apps[\"\(device.appID.prefix(200))\"])"))
        }
        do {
            let address = try spec.configuration.address(input, attributes: DeviceAttributes())
            return .success(MatrixTarget(token: address.token, attributes: address.attributes, route: (name, address)))
        } catch {
            // A push service outside the route's allowedEndpoints: not sent and not rejected, as
            // Sygnal does ("don't reject push key"), since `rejected` makes the homeserver delete
            // the pusher and a narrow allow-list would wipe every web pusher out.
            if error.byPolicy {
                return .failure(MatrixRefusal(outcome: "refused_endpoint_not_allowed", reason: "route \(name) refuses the pusher: \(error)", rejects: false))
            }
            // Bad keys, an http endpoint: no address of the platform, ever.
            let outcome = platform == .web ? "rejected_bad_subscription" : "rejected_bad_pushkey"
            return .failure(MatrixRefusal(outcome: outcome, reason: "route \(name) refuses the pusher: \(error)"))
        }
    }

    /// The pusher's route and platform, with the rule registration follows: the mapping's
    /// `platform` (or iOS for an `environment`), else the first of the app's routes whose plugin
    /// takes the pushkey (``MatrixConfiguration/candidateRoutes(of:app:configuration:)``).
    /// Rejected only when no route of the app could ever take it; a route that refuses it by
    /// policy (an endpoint outside `allowedEndpoints`) leaves it not sent but not rejected.
    private func resolve(_ device: MatrixDevice, mapping: MatrixConfiguration.App, app: AppConfiguration,
                         configuration: HeraldConfiguration) -> Result<(Platform, MatrixTarget), MatrixRefusal> {
        let candidates = MatrixConfiguration.candidateRoutes(of: mapping, app: app, configuration: configuration)
        guard !candidates.isEmpty else {
            let what = MatrixConfiguration.platform(of: mapping, app: app, configuration: configuration).map { "no \($0) route" }
                ?? "no route that could carry a pusher (ios, android or web)"
            return .failure(MatrixRefusal(outcome: "rejected_no_route",
                                          reason: "app \(app.id) has \(what) (matrix.apps[\"\(device.appID.prefix(200))\"])"))
        }
        var refusals: [MatrixRefusal] = []
        var tried = Set<Platform>()
        for (route, platform) in candidates {
            // iOS tokens are one shape whichever APNs route takes them (chosen by environment when queued).
            if platform == .ios && !tried.insert(.ios).inserted { continue }
            switch matrixTarget(device, platform: platform, route: route, mapping: mapping, app: app, configuration: configuration) {
            case .success(let target): return .success((platform, target))
            case .failure(let refusal): refusals.append(refusal)
            }
        }
        if refusals.count == 1 { return .failure(refusals[0]) }
        if let policy = refusals.first(where: { !$0.rejects }) { return .failure(policy) }
        return .failure(MatrixRefusal(outcome: "rejected_no_route", reason: "no route of app \(app.id) takes the pushkey: "
                                      + refusals.map(\.reason).joined(separator: "; ")))
    }

    /// The payload of the pusher's platform.
    /// - Parameter readsFCM: the pusher's route reads the `fcm` block (else an Android pusher's
    ///   data goes in the neutral fields, for a China vendor's route).
    private static func matrixPayload(_ n: MatrixNotification, _ device: MatrixDevice, platform: Platform,
                                      mapping: MatrixConfiguration.App, readsFCM: Bool) -> MatrixPayload.Decision {
        switch platform {
        case .android: return MatrixAndroidPayload.map(n, device: device, defaultPayload: mapping.defaultPayload, neutral: !readsFCM)
        case .web: return MatrixWebPayload.map(n, device: device, defaultPayload: mapping.defaultPayload)
        default: return MatrixPayload.map(n, device: device, defaultPayload: mapping.defaultPayload)
        }
    }

    /// Queues one pusher's notification.
    private func notify(_ n: MatrixNotification, _ device: MatrixDevice, source: IPAddress?) async throws -> MatrixOutcome {
        let configuration = context.configuration()
        guard let matrix = configuration.section(MatrixConfiguration.self), let mapping = matrix.apps[device.appID], let app = configuration.app(mapping.app) else {
            matrixNotSent("unknown", "rejected_unknown_app", device, source: source, reason: "unknown app_id (not a key of matrix.apps)")
            return .rejected
        }
        let label = device.appID
        let platform: Platform, target: MatrixTarget
        switch resolve(device, mapping: mapping, app: app, configuration: configuration) {
        case .success(let found): (platform, target) = found
        case .failure(let refusal):
            matrixNotSent(label, refusal.outcome, device, source: source, reason: refusal.reason)
            return refusal.rejects ? .rejected : .done
        }
        let token = target.token
        var attributes = target.attributes
        let store = context.store
        // Registered at pushkey_ts (never later than now): the push service's timestamp rule then
        // compares against when the pusher was made, not when Herald first saw it.
        let registeredAt = min(device.pushkeyDate ?? Date(timeIntervalSince1970: 0), now)
        let user = Self.matrixUser(device.appID)
        let known = try await store.device(app: app.id, token: token)
        if let known, !Self.isMatrixUser(known.user) {
            // The devices API registered this token for one of the app's own users: the gateway
            // neither sends to it nor takes it over. Not rejected either: the pusher may be
            // genuine (the same app install), and rejecting would delete it for good.
            matrixNotSent(label, "foreign_device", device, source: source,
                          reason: "the token belongs to a device the devices API registered; the gateway sends only to matrix: devices")
            return .done
        }
        if let known, let dead = known.invalidatedAt {
            guard let ts = device.pushkeyTS, Double(ts) > dead.timeIntervalSince1970 else {
                matrixNotSent(label, "rejected_dead", device, source: source,
                              reason: "the push service reported the device dead (\(known.invalidationReason ?? "invalid")) at \(dead.iso8601), "
                                + "at or after the pusher's pushkey_ts (\(device.pushkeyTS.map(String.init) ?? "absent"))")
                return .rejected
            }
        }
        if let known { attributes = known.attributes }
        // An iOS token's route is looked up with the stored device's attributes (its environment), as registered.
        if known == nil || known?.invalidatedAt != nil,
           let route = platform == .ios ? Self.iosRoute(app: app, token: token, attributes: attributes, configuration: configuration) : target.route {
            let isNew = known == nil
            if isNew {
                let admitted = try await matrixState.devices.reserve(device.appID, cap: matrix.maxDevicesPerApp, now: now) {
                    try await store.listDevices(app: app.id, user: user, limit: matrix.maxDevicesPerApp + 1).count
                }
                guard admitted else {
                    matrixNotSent(label, "device_limit", device, source: source,
                                  reason: "matrix.maxDevicesPerApp (\(matrix.maxDevicesPerApp)) reached; the pushkey is not registered")
                    return .overDeviceLimit
                }
            }
            let result: RegistrationResult
            do {
                result = try await store.register(DeviceRegistration(app: app.id, token: token, user: known?.user ?? user,
                                                                     transport: known?.transport ?? route.transport,
                                                                     attributes: known?.attributes ?? route.address.attributes), at: registeredAt)
            } catch {
                if isNew { matrixState.devices.release(device.appID) }
                throw error
            }
            if isNew && result.change != .created { matrixState.devices.release(device.appID) }
            if result.change == .moved, let previous = result.previousUser, !Self.isMatrixUser(previous) {
                // The devices API registered the token between the look-up and now: leave it
                // to its user (this push is not sent).
                _ = try await store.register(DeviceRegistration(app: app.id, token: token, user: previous,
                                                                transport: result.device.transport, attributes: result.device.attributes),
                                             at: now)
                matrixNotSent(label, "foreign_device", device, source: source,
                              reason: "the token belongs to a device the devices API registered; the gateway sends only to matrix: devices")
                return .done
            }
        }

        let content: NotificationContent
        let mode: MatrixPayload.Mode
        let readsFCM = target.route.flatMap { configuration.transports[$0.transport]?.reads("fcm") } ?? true
        switch Self.matrixPayload(n, device, platform: platform, mapping: mapping, readsFCM: readsFCM) {
        case .reject(let reason):
            matrixNotSent(label, "rejected_default_payload", device, source: source, reason: reason)
            return .rejected
        case .nothing:
            matrixState.pushkey(label, "nothing_to_send")
            return .done
        case .tooLarge(let bytes):
            matrixNotSent(label, "too_large", device, source: source,
                          reason: "the payload stays over Apple's limit after shortening the alert texts (\(bytes) bytes)")
            return .done
        case .send(let c, let m, let dropped):
            content = c
            mode = m
            if !dropped.isEmpty {
                matrixState.digest.record(.trimmed, reason: "unsendable_keys", source: source, now: now, logger: apiLogger) {
                    ("default_payload keys Herald cannot send were left out",
                     ["app_id": label, "pushkey": Redact.token(device.pushkey), "keys": String(dropped.joined(separator: ",").prefix(500))])
                }
            }
        }
        let key = n.eventID.flatMap { $0.isEmpty ? nil : Self.matrixIdempotencyKey(eventID: $0, token: token) }
        let receipt: EnqueueReceipt
        do {
            receipt = try await context.accept(NotificationRequest(app: app.id, tokens: [token], content: content, idempotencyKey: key,
                                                           attributes: attributes, platform: platform == .ios ? nil : platform))
        } catch let e as APIError where e.status == 400 {
            // The pusher's route refused the message: over its size limit (FCM's 4096 bytes or Web
            // Push's 3993 of plaintext: a large event), counted `too_large`; anything else (a
            // default_payload its plugin does not take) `refused_by_route`. Not the pusher's
            // fault, and retrying cannot help. The logged reason names the route.
            matrixNotSent(label, e.field == "payload" ? "too_large" : "refused_by_route", device, source: source, reason: e.message)
            return .done
        }
        matrixState.pushkey(label, receipt.replayed ? "duplicate" : "accepted")
        if !receipt.replayed {
            matrixState.count("herald_matrix_payloads_total", "Matrix notifications queued, by the payload they send.",
                              [("app_id", label), ("mode", mode.rawValue)])
        }
        return .done
    }

    /// The first iOS route of the app (or one that carries any device, such as `log`) that takes
    /// the token with these attributes (its environment).
    static func iosRoute(app: AppConfiguration, token: String, attributes: DeviceAttributes,
                         configuration: HeraldConfiguration) -> (transport: String, address: DeviceAddress)? {
        for name in configuration.routeOrder(app) {
            guard let spec = configuration.transports[name], spec.kind != HeraldConfiguration.localKind,
                  spec.configuration.platform == .ios || spec.configuration.platform == nil,
                  let address = spec.accepts(.token(token), attributes: attributes) else { continue }
            return (name, address)
        }
        return nil
    }

    /// The user owning an `app_id`'s devices: `matrix:<app_id>`.
    static func matrixUser(_ appID: String) -> String { "matrix:\(appID)" }

    /// Whether a device's user is one the gateway made (`matrix:…`).
    static func isMatrixUser(_ user: String) -> Bool { user.hasPrefix("matrix:") }

    /// `matrix:<event_id>:<token>`, the event id hashed when longer than the queue's key limit
    /// (and the token too when still longer: a web subscription's JSON).
    static func matrixIdempotencyKey(eventID: String, token: String) -> String {
        let key = "matrix:\(eventID):\(token)"
        if key.utf8.count <= NotificationRequest.maxIdempotencyKeyBytes { return key }
        let hashed = "matrix:#\(fnv1a(eventID)):\(token)"
        if hashed.utf8.count <= NotificationRequest.maxIdempotencyKeyBytes { return hashed }
        return "matrix:#\(fnv1a(eventID)):#\(fnv1a(token))"
    }

    /// FNV-1a (64 bits) in hex.
    private static func fnv1a(_ text: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in text.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return String(h, radix: 16)
    }

    /// A Matrix error: `{"errcode", "error"}` (plus `retry_after_ms` for 429).
    static func matrixError(_ status: Int, _ code: String, _ message: String, headers: [(String, String)] = [],
                            retryAfterMs: Int? = nil) -> HTTPResponse {
        HTTPResponse.json(status, headers: headers) { o in
            o.string("errcode", code)
            o.string("error", message)
            o.int("retry_after_ms", retryAfterMs)
        }
    }
}

/// Why a pusher is listed in `rejected`: the `outcome` label of `herald_matrix_pushkeys_total` and the logged reason.
struct MatrixRefusal: Error {
    var outcome: String
    var reason: String
    /// Listed in `rejected` (the pusher can never be served); `false`: only not sent.
    var rejects: Bool = true
}

/// A notify body that is no notification: the 400 to answer.
struct MatrixParseFailure: Error {
    var response: HTTPResponse
}

/// The gateway's limits, log digest and per-app-id counters.
final class MatrixGatewayState: Sendable {
    let limiter = MatrixRateLimiter()
    let devices = MatrixDeviceLimit()
    let digest = MatrixLogDigest()
    private let registry: MetricsRegistry
    private let counters = Locked<[String: Counter]>([:])

    init(registry: MetricsRegistry) { self.registry = registry }

    /// `herald_matrix_pushkeys_total{app_id,outcome}`.
    func pushkey(_ appID: String, _ outcome: String) {
        count("herald_matrix_pushkeys_total", "Pushers of Matrix notify requests, by Matrix app id and what Herald did "
              + "(accepted, duplicate, rejected_*, nothing_to_send, too_large, refused_by_route, foreign_device, device_limit).",
              [("app_id", appID), ("outcome", outcome)])
    }

    func count(_ name: String, _ help: String, _ labels: [(String, String)]) {
        let key = ([name] + labels.map { $0.1 }).joined(separator: "\u{1}")
        if let c = counters.withLock({ $0[key] }) { c.increment(); return }
        let c = registry.counter(name, help: help, labels: labels)
        counters.withLock { $0[key] = c }
        c.increment()
    }
}

extension Daemon {
    /// The port of the Matrix gateway's own listener (`nil` without `matrix.listen`).
    public var matrixPort: Int? { port(of: MatrixGateway.name) }
}
