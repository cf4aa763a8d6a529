import FoundationEssentials
import Glibc
import HeraldCore
import HeraldGorush

/// gorush's Web API on `gorush.listen`: `POST /api/push`, `GET /api/stat/app`, `GET|HEAD /healthz`.
///
/// Each element of `notifications` becomes one Herald notification for the raw tokens of its
/// platform (``NotificationRequest/platform``), through the API's one accept path: the 200 is
/// sent once every one of them is committed. The whole body is read and every notification
/// rendered for the app's routes before the first is stored, so a 400 stores nothing. A 503
/// part-way (queue full, store unavailable, shutdown) says how many were stored before it.
final class GorushEndpoint: Sendable {
    private let api: API
    private let counters = Locked(Counters())

    /// What `/api/stat/app` reports besides the delivery counts.
    struct Counters {
        /// gorush's `total_count`: targets (tokens) of the notifications committed.
        var targets = 0
        /// Notifications committed (gorush's tasks).
        var committed = 0
        /// Notifications refused after the body was read (not stored).
        var refused = 0
    }

    static let pushRoute = "POST /api/push"
    static let statRoute = "GET /api/stat/app"
    static let healthRoute = "GET /healthz"

    init(api: API) { self.api = api }

    private var section: GorushConfiguration? { api.dependencies.snapshot().configuration.section(GorushConfiguration.self) }

    /// The route label of a request's path and the method it takes (`nil`: no such path).
    private static func route(_ request: HTTPRequest) -> (label: String, method: String)? {
        let path = request.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.path
        switch path {
        case "/api/push": return (pushRoute, "POST")
        case "/api/stat/app": return (statRoute, "GET")
        case "/healthz": return (healthRoute, "GET")
        default: return nil
        }
    }

    /// Answers what needs no store or queue (routing, authentication, size, `/healthz`,
    /// `/api/stat/app`); `nil` for a push to hand to ``handle(_:)``.
    func immediate(_ request: HTTPRequest) -> HTTPResponse? {
        guard let section else { return answer(request, "other", GorushError(status: 404, "the gorush API is off")) }
        guard let route = Self.route(request) else {
            return answer(request, "other", GorushError(status: 404, "no such endpoint: \(request.path); this listener serves POST /api/push, "
                                                        + "GET /api/stat/app and GET /healthz"))
        }
        let (label, allowed) = route
        let method = request.method == "HEAD" ? "GET" : request.method
        guard method == allowed else {
            return answer(request, "other", GorushError(status: 405, "\(request.method) is not allowed here; use \(allowed)"),
                          headers: [("Allow", allowed == "GET" ? "GET, HEAD" : allowed)])
        }
        // gorush's heartbeat: 200 with an empty body.
        if label == Self.healthRoute { return record(label, HTTPResponse(status: 200)) }
        if section.auth == .apiKey, case .failure(let e) = api.dependencies.snapshot().auth.authorize(request.headers["authorization"], scope: .send) {
            let headers = e.headers.map { ($0.key, $0.value) }
            return answer(request, label, GorushError(status: e.status, e.message), headers: headers)
        }
        if label == Self.statRoute { return record(label, HTTPResponse.json(200, statJSON(section))) }
        if request.bodyTooLarge || request.body.count > section.maxBodyBytes {
            return answer(request, label, GorushError(status: 413, "the request body is larger than gorush.maxBodyBytes (\(section.maxBodyBytes) bytes)"))
        }
        return nil
    }

    /// Answers any request on the listener.
    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        if let response = immediate(request) { return response }
        do {
            return record(Self.pushRoute, HTTPResponse.json(200, GorushPush.successJSON(counts: try await push(request))))
        } catch {
            return answer(request, Self.pushRoute, error)
        }
    }

    /// Reads, checks and commits a push; the targets counted.
    private func push(_ request: HTTPRequest) async throws(GorushError) -> Int {
        let configuration = api.dependencies.snapshot().configuration
        guard let section = configuration.section(GorushConfiguration.self), let app = configuration.app(section.app) else {
            throw GorushError(status: 404, "the gorush API is off")
        }
        let target = GorushPush.Target(app: app.id, topic: app.topic, maxNotifications: section.maxNotifications, now: api.now)
        let push = try GorushPush.parse(request.body, for: target)
        // Every notification checked for every route of the app before the first is stored.
        for item in push.items {
            let at = "notifications[\(item.index)]"
            do {
                let platform = item.request.platform ?? .ios
                _ = try FanOut.firstRoute(of: platform, app: app, configuration: configuration)
                _ = try FanOut.render(FanOut.withDefaults(item.request.content, app: app), app: app, configuration: configuration,
                                      notificationID: UUIDSource.random().lowercasedString)
            } catch {
                throw refusal(at, error)
            }
        }
        for (stored, item) in push.items.enumerated() {
            do {
                _ = try await api.accept(item.request)
                counters.withLock {
                    $0.committed += 1
                    $0.targets += item.targets
                }
            } catch let e as APIError {
                counters.withLock { $0.refused += push.items.count - stored }
                var message = e.field.map { "notifications[\(item.index)].\($0): \(e.message)" } ?? "notifications[\(item.index)]: \(e.message)"
                if stored > 0 { message += " (notifications[0…\(stored - 1)] were stored and are sent; send only the others again)" }
                throw GorushError(status: e.status, message, retryAfter: e.retryAfter)
            } catch let e as StoreUnavailableError {
                counters.withLock { $0.refused += push.items.count - stored }
                let retry = configuration.server.retryAfter
                var message = "notifications[\(item.index)]: the store is unavailable (\(e.message)); nothing of it was stored, retry after \(retry) s"
                if stored > 0 { message += " (notifications[0…\(stored - 1)] were stored and are sent; send only the others again)" }
                throw GorushError(status: 503, message, retryAfter: retry)
            } catch {
                counters.withLock { $0.refused += push.items.count - stored }
                throw GorushError(status: 500, "notifications[\(item.index)]: could not be completed: \(error)")
            }
        }
        return push.counts
    }

    private func refusal(_ at: String, _ error: DispatchError) -> GorushError {
        switch error {
        case .invalidRequest(let field, let message): return GorushError(status: 400, "\(at).\(field): \(message)")
        default: return GorushError(status: 400, "\(at): \(error.description)")
        }
    }

    /// gorush's `/api/stat/app`: `total_count` and the tasks are the gorush API's since start;
    /// each platform's `push_success` / `push_error` are the final outcomes of its route
    /// (delivered; invalid token, rejected, expired or failed), whoever sent through it.
    private func statJSON(_ section: GorushConfiguration) -> [UInt8] {
        let configuration = api.dependencies.snapshot().configuration
        let c = counters.withLock { $0 }
        let registry = api.serverMetrics.registry
        func outcomes(_ platform: Platform) -> (success: Int, error: Int) {
            guard let app = configuration.app(section.app),
                  let route = try? FanOut.firstRoute(of: platform, app: app, configuration: configuration) else { return (0, 0) }
            func count(_ state: DeliveryState) -> Int {
                Int(registry.total("herald_deliveries_total", matching: [("transport", route), ("outcome", state.rawValue)]))
            }
            return (count(.delivered), count(.invalidToken) + count(.rejected) + count(.expired) + count(.failed))
        }
        let ios = outcomes(.ios), android = outcomes(.android)
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("version", "herald")
            o.int("busy_workers", 0)
            o.int("success_tasks", c.committed)
            o.int("failure_tasks", c.refused)
            o.int("submitted_tasks", c.committed + c.refused)
            o.int("total_count", c.targets)
            for (name, counts) in [("ios", ios), ("android", android), ("huawei", (success: 0, error: 0))] {
                o.object(name) { p in
                    p.int("push_success", counts.success)
                    p.int("push_error", counts.error)
                }
            }
        }
        return w.bytes
    }

    private func record(_ label: String, _ response: HTTPResponse) -> HTTPResponse {
        api.serverMetrics.request(route: label, status: response.status)
        return response
    }

    private func answer(_ request: HTTPRequest, _ label: String, _ error: any Error, headers: [(String, String)] = []) -> HTTPResponse {
        let e = error as? GorushError ?? GorushError(status: 500, "\(error)")
        var extra = headers
        if let retry = e.retryAfter { extra.append(("Retry-After", String(retry))) }
        return record(label, HTTPResponse.json(e.status, e.json, headers: extra))
    }
}

extension Daemon {
    /// Starts gorush's listener when the configuration has a `gorush` section.
    /// - Throws: ``HTTPServerError`` naming `gorush.listen` when it cannot listen.
    func startGorushListener(_ config: HeraldConfiguration, api: API) throws(HTTPServerError) {
        guard let gorush = config.section(GorushConfiguration.self) else { return }
        var serverOptions = HTTPServer.Options(config.server, maxBodyBytes: gorush.maxBodyBytes, maxStreams: 0)
        let endpoint = GorushEndpoint(api: api)
        serverOptions.answeredByServer = { api.recordServerAnswer(method: $0, path: $1, status: $2) }
        let server = HTTPServer(options: serverOptions, logger: logger, metrics: metrics,
                                immediate: { endpoint.immediate($0) }, handler: { await endpoint.handle($0) })
        let port = try server.start(gorush.listen, setting: "gorush.listen")
        running.withLock { $0?.gorushServer = server }
        let address = ListenAddress(host: gorush.listen.host, port: port)
        logger.notice("gorush API listening", ["address": address.description, "app": gorush.app, "auth": gorush.auth.rawValue])
        if options.announce {
            FileDescriptorOutput.standardOutput("herald: gorush API listening on \(address)\n")
        }
    }

    /// The port of gorush's listener (`nil` without a `gorush` section).
    public var gorushPort: Int? { running.withLock { $0?.gorushServer?.port } }

    /// Why the daemon must not serve `config`'s `gorush` section (see ``GorushConfiguration/refusal(api:)``).
    static func gorushRefusal(_ config: HeraldConfiguration) -> String? {
        config.section(GorushConfiguration.self)?.refusal(api: config.api)
    }

    /// gorush settings a reload cannot apply.
    static func gorushRestartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String] {
        let a = old.section(GorushConfiguration.self), b = new.section(GorushConfiguration.self)
        var reasons: [String] = []
        if a?.listen != b?.listen {
            reasons.append("gorush.listen changed (\(a?.listen.description ?? "none") → \(b?.listen.description ?? "none")): restart to apply")
        } else if a != nil, a?.maxBodyBytes != b?.maxBodyBytes {
            reasons.append("gorush.maxBodyBytes changed: restart to apply")
        }
        if let refusal = gorushRefusal(new) { reasons.append(refusal) }
        return reasons
    }
}
