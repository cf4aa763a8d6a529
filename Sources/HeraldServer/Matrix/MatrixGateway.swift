import FoundationEssentials
import Glibc
import HeraldCore
import HeraldMatrix

/// The Matrix Push Gateway API's `POST /_matrix/push/v1/notify` (on `api.listen`, or on
/// `matrix.listen` through a listener of its own).
///
/// Each pusher's notification goes through the same accept path as `POST /v1/notifications`:
/// the answer is 200 only once it is committed, and a homeserver's retry of the same `event_id`
/// for the same pushkey is answered without sending again (the idempotency key
/// `matrix:<event_id>:<token>`). `rejected` lists the pushkeys Herald knows are dead (APNs said
/// so on an earlier send, at or after the pusher's `pushkey_ts`), of unknown `app_id`s, or that
/// are no token at all; never one that only failed for a while.
///
/// Pushkeys become devices of the user `matrix:<app_id>` in the token store (registered at
/// `pushkey_ts`), so Apple's answers invalidate them with the timestamp rule and `herald devices`
/// and `herald prune` see them.
extension API {
    /// The notify path.
    static let matrixNotifyPath = ["_matrix", "push", "v1", "notify"]
    static let matrixRoute = "POST /_matrix/push/v1/notify"

    /// Whether `request` is for the Matrix gateway (its path starts with `/_matrix/`).
    static func isMatrix(_ request: HTTPRequest) -> Bool {
        request.path == "/_matrix" || request.path.hasPrefix("/_matrix/")
    }

    /// The checks decided without waiting (configuration, path, method, size); `nil` when the
    /// request is a notify to process.
    /// - Parameter ownListener: the request came through `matrix.listen` (not `api.listen`).
    func matrixCheck(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse? {
        guard let config = dependencies.snapshot().configuration.section(MatrixConfiguration.self) else {
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

    /// Answers at once what needs no store or queue (errors, the rate limit); `nil` for a
    /// notify to hand to ``matrixHandle(_:ownListener:)``.
    public func matrixImmediate(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse? {
        var response = matrixCheck(request, ownListener: ownListener)
        if response == nil, let config = dependencies.snapshot().configuration.section(MatrixConfiguration.self),
           let wait = matrixState.limiter.take(rate: config.maxRequestsPerSecond, now: now) {
            matrixState.count("herald_matrix_rate_limited_total", "Notify requests refused by matrix.maxRequestsPerSecond.", [])
            let ms = max(1, Int((wait * 1000).rounded(.up)))
            response = Self.matrixError(429, "M_LIMIT_EXCEEDED", "more than matrix.maxRequestsPerSecond notify requests; retry in \(ms) ms",
                                        headers: [("Retry-After", String(max(1, Int(wait.rounded(.up)))))], retryAfterMs: ms)
        }
        if let response { serverMetrics.request(route: Self.matrixRoute, status: response.status) }
        return response
    }

    /// Answers a notify request.
    public func matrixHandle(_ request: HTTPRequest, ownListener: Bool) async -> HTTPResponse {
        if let response = matrixCheck(request, ownListener: ownListener) {
            serverMetrics.request(route: Self.matrixRoute, status: response.status)
            return response
        }
        let response: HTTPResponse
        do {
            response = try await notify(request)
        } catch let e as APIError {
            response = Self.matrixError(e.status, e.status == 400 ? "M_BAD_JSON" : "M_UNKNOWN", e.message,
                                        headers: e.retryAfter.map { [("Retry-After", String($0))] } ?? [])
        } catch {
            apiLogger.error("notify failed", ["route": Self.matrixRoute, "error": String(describing: error)])
            let retry = dependencies.snapshot().configuration.server.retryAfter
            response = Self.matrixError(503, "M_UNKNOWN", "the notification could not be stored: \(error); retry later",
                                        headers: [("Retry-After", String(retry))])
        }
        serverMetrics.request(route: Self.matrixRoute, status: response.status)
        return response
    }

    private func notify(_ request: HTTPRequest) async throws -> HTTPResponse {
        let json: JSONValue
        do { json = try StrictJSON.parse(request.body) } catch {
            return Self.matrixError(400, "M_NOT_JSON", "the body is not JSON: \(error.description)")
        }
        let notification: MatrixNotification
        do { notification = try MatrixNotification.parse(json) } catch {
            return Self.matrixError(400, "M_BAD_JSON", error.issues.prefix(5).map(\.description).joined(separator: "; "))
        }
        var rejected: [String] = []
        for device in notification.devices {
            if let reason = try await notify(notification, device) {
                rejected.append(device.pushkey)
                apiLogger.info("pushkey rejected", ["app_id": device.appID, "pushkey": Redact.token(device.pushkey), "reason": reason])
            }
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

    /// Queues one pusher's notification; returns why its pushkey is rejected, or `nil`.
    private func notify(_ n: MatrixNotification, _ device: MatrixDevice) async throws -> String? {
        let configuration = dependencies.snapshot().configuration
        guard let mapping = configuration.section(MatrixConfiguration.self)?.apps[device.appID], let app = configuration.app(mapping.app) else {
            matrixState.pushkey("unknown", "rejected_unknown_app")
            return "unknown app_id (not a key of matrix.apps)"
        }
        let label = device.appID
        let token: String
        do { token = try MatrixPushkey.hexToken(device.pushkey) } catch {
            matrixState.pushkey(label, "rejected_bad_pushkey")
            return "the pushkey is no APNs token: \(error)"
        }
        var attributes = DeviceAttributes()
        attributes["environment"] = mapping.environment
        let store = dependencies.store
        // Registered at pushkey_ts (never later than now): Apple's timestamp rule then compares
        // against when the pusher was made, not when Herald first saw it.
        let registeredAt = min(device.pushkeyDate ?? Date(timeIntervalSince1970: 0), now)
        let known = try await store.device(app: app.id, token: token)
        if let known, let dead = known.invalidatedAt {
            guard let ts = device.pushkeyTS, Double(ts) > dead.timeIntervalSince1970 else {
                matrixState.pushkey(label, "rejected_dead")
                return "APNs reported the token dead (\(known.invalidationReason ?? "invalid")) at \(dead.iso8601), "
                    + "at or after the pusher's pushkey_ts (\(device.pushkeyTS.map(String.init) ?? "absent"))"
            }
        }
        if let known { attributes = known.attributes }
        if known == nil || known?.invalidatedAt != nil,
           let route = configuration.firstRoute(app: app, input: .token(token), attributes: attributes) {
            _ = try await store.register(DeviceRegistration(app: app.id, token: token, user: known?.user ?? "matrix:\(device.appID)",
                                                            transport: known?.transport ?? route.transport,
                                                            attributes: known?.attributes ?? route.address.attributes), at: registeredAt)
        }

        let content: NotificationContent
        let mode: MatrixPayload.Mode
        switch MatrixPayload.map(n, device: device, defaultPayload: mapping.defaultPayload) {
        case .reject(let reason):
            matrixState.pushkey(label, "rejected_default_payload")
            return reason
        case .nothing:
            matrixState.pushkey(label, "nothing_to_send")
            return nil
        case .tooLarge(let bytes):
            matrixState.pushkey(label, "too_large")
            apiLogger.warning("notification not sent: its payload stays over Apple's limit after shortening the alert texts",
                              ["app_id": label, "event_id": n.eventID ?? "", "bytes": String(bytes)])
            return nil
        case .send(let c, let m, let dropped):
            content = c
            mode = m
            if !dropped.isEmpty {
                apiLogger.warning("default_payload keys Herald cannot send were left out",
                                  ["app_id": label, "pushkey": Redact.token(device.pushkey), "keys": dropped.joined(separator: ",")])
            }
        }
        let key = n.eventID.flatMap { $0.isEmpty ? nil : Self.matrixIdempotencyKey(eventID: $0, token: token) }
        let receipt: EnqueueReceipt
        do {
            receipt = try await accept(NotificationRequest(app: app.id, tokens: [token], content: content, idempotencyKey: key,
                                                           attributes: attributes))
        } catch let e as APIError where e.status == 400 {
            // Herald's own mapping produced something the queue refuses: a defect, not the pusher's fault.
            matrixState.pushkey(label, "refused")
            apiLogger.error("notification refused", ["app_id": label, "error": e.message])
            return nil
        }
        matrixState.pushkey(label, receipt.replayed ? "duplicate" : "accepted")
        if !receipt.replayed {
            matrixState.count("herald_matrix_payloads_total", "Matrix notifications queued, by the payload they send.",
                              [("app_id", label), ("mode", mode.rawValue)])
        }
        return nil
    }

    /// `matrix:<event_id>:<token>`, hashed when longer than the queue's key limit.
    static func matrixIdempotencyKey(eventID: String, token: String) -> String {
        let key = "matrix:\(eventID):\(token)"
        if key.utf8.count <= NotificationRequest.maxIdempotencyKeyBytes { return key }
        var h: UInt64 = 0xcbf2_9ce4_8422_2325   // FNV-1a over the event id
        for b in eventID.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return "matrix:#\(String(h, radix: 16)):\(token)"
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

/// The gateway's rate limiter and per-app-id counters.
final class MatrixGatewayState: Sendable {
    let limiter = TokenBucket()
    private let registry: MetricsRegistry
    private let counters = Locked<[String: Counter]>([:])

    init(registry: MetricsRegistry) { self.registry = registry }

    /// `herald_matrix_pushkeys_total{app_id,outcome}`.
    func pushkey(_ appID: String, _ outcome: String) {
        count("herald_matrix_pushkeys_total", "Pushers of Matrix notify requests, by Matrix app id and what Herald did "
              + "(accepted, duplicate, rejected_*, nothing_to_send, too_large, refused).", [("app_id", appID), ("outcome", outcome)])
    }

    func count(_ name: String, _ help: String, _ labels: [(String, String)]) {
        let key = ([name] + labels.map { $0.1 }).joined(separator: "\u{1}")
        if let c = counters.withLock({ $0[key] }) { c.increment(); return }
        let c = registry.counter(name, help: help, labels: labels)
        counters.withLock { $0[key] = c }
        c.increment()
    }
}

/// A token bucket holding one second of requests.
final class TokenBucket: Sendable {
    private let state = Locked<(tokens: Double, at: Date?)>((0, nil))

    /// Takes a token; `nil` when one was there, else the seconds until one will be.
    func take(rate: Int, now: Date) -> TimeInterval? {
        state.withLock { s in
            let capacity = Double(rate)
            let elapsed = s.at.map { max(0, now.timeIntervalSince($0)) } ?? .infinity
            s.tokens = min(capacity, s.tokens + elapsed * capacity)
            s.at = now
            if s.tokens >= 1 { s.tokens -= 1; return nil }
            return (1 - s.tokens) / capacity
        }
    }
}
