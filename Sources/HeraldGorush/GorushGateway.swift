import FoundationEssentials
import HeraldCore
import HeraldServer

/// gorush's Web API on `gorush.listen`: `POST /api/push`, `GET /api/stat/app`, `GET|HEAD /healthz`.
///
/// Each element of `notifications` becomes one Herald notification for the raw tokens of its
/// platform (``NotificationRequest/platform``), through the daemon's one accept path
/// (``FrontEndContext/accept``): the 200 is sent once every one of them is committed. The whole
/// body is read and every notification rendered for the app's routes before the first is
/// stored, so a 400 stores nothing. A 503 part-way (queue full, store unavailable, shutdown)
/// says how many were stored before it.
///
/// A ``FrontEnd`` of the daemon (registered in `main`) with no path on `api.listen` (its
/// `/healthz` is gorush's, on its own listener only); the daemon knows no gorush.
public final class GorushGateway: FrontEnd {
    public static let name = "gorush"
    public static let title = "gorush API"
    public static let paths: [String] = []

    static let pushRoute = "POST /api/push"
    static let statRoute = "GET /api/stat/app"
    static let healthRoute = "GET /healthz"

    let context: FrontEndContext
    let counters = Locked(Counters())

    /// What `/api/stat/app` reports besides the delivery counts.
    struct Counters {
        /// gorush's `total_count`: targets (tokens) of the notifications committed.
        var targets = 0
        /// Notifications committed (gorush's tasks).
        var committed = 0
        /// Notifications refused after the body was read (not stored).
        var refused = 0
        /// Tokens no route takes, by gorush's platform name (`ios`, `android`): part of `push_error`.
        var refusedTokens: [String: Int] = [:]
    }

    public init(context: FrontEndContext) { self.context = context }

    private var section: GorushConfiguration? { context.configuration().section(GorushConfiguration.self) }

    public func listener(_ configuration: HeraldConfiguration) -> FrontEndListener? {
        guard let gorush = configuration.section(GorushConfiguration.self) else { return nil }
        return FrontEndListener(address: gorush.listen, setting: "gorush.listen", maxBodyBytes: gorush.maxBodyBytes)
    }

    /// Refuses a `gorush` section that would serve unauthenticated on a network address
    /// (see ``GorushConfiguration/refusal(api:)``).
    public static func startRefusal(_ configuration: HeraldConfiguration) -> String? {
        configuration.section(GorushConfiguration.self)?.refusal(api: configuration.api)
    }

    /// gorush settings a reload cannot apply.
    public static func restartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String] {
        let a = old.section(GorushConfiguration.self), b = new.section(GorushConfiguration.self)
        if a?.listen != b?.listen {
            return ["gorush.listen changed (\(a?.listen.description ?? "none") → \(b?.listen.description ?? "none")): restart to apply"]
        }
        if a != nil, a?.maxBodyBytes != b?.maxBodyBytes { return ["gorush.maxBodyBytes changed: restart to apply"] }
        return []
    }

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

    public func routeLabel(_ request: HTTPRequest) -> String {
        guard section != nil, let route = Self.route(request), route.method == (request.method == "HEAD" ? "GET" : request.method) else {
            return "other"
        }
        return route.label
    }

    /// Answers what needs no store or queue (routing, authentication, size, `/healthz`,
    /// `/api/stat/app`); `nil` for a push to hand to ``handle(_:ownListener:)``.
    public func immediate(_ request: HTTPRequest, ownListener: Bool) -> HTTPResponse? {
        guard let section else { return answer(GorushError(status: 404, "the gorush API is off")) }
        guard let route = Self.route(request) else {
            return answer(GorushError(status: 404, "no such endpoint: \(request.path); this listener serves POST /api/push, "
                                      + "GET /api/stat/app and GET /healthz"))
        }
        let (label, allowed) = route
        let method = request.method == "HEAD" ? "GET" : request.method
        guard method == allowed else {
            return answer(GorushError(status: 405, "\(request.method) is not allowed here; use \(allowed)"),
                          headers: [("Allow", allowed == "GET" ? "GET, HEAD" : allowed)])
        }
        // gorush's heartbeat: 200 with an empty body.
        if label == Self.healthRoute { return HTTPResponse(status: 200) }
        if section.auth == .apiKey, case .failure(let e) = context.authorize(request.headers["authorization"], .send) {
            return answer(GorushError(status: e.status, e.message), headers: e.headers.map { ($0.key, $0.value) })
        }
        if label == Self.statRoute { return HTTPResponse.json(200, statJSON(section)) }
        if request.bodyTooLarge || request.body.count > section.maxBodyBytes {
            return answer(GorushError(status: 413, "the request body is larger than gorush.maxBodyBytes (\(section.maxBodyBytes) bytes)"))
        }
        return nil
    }

    /// Answers any request on the listener (a push, once ``immediate(_:ownListener:)`` left it).
    public func handle(_ request: HTTPRequest, ownListener: Bool) async -> HTTPResponse {
        if let response = immediate(request, ownListener: ownListener) { return response }
        do {
            let (counts, failed) = try await push(request)
            return HTTPResponse.json(200, GorushPush.successJSON(counts: counts, failed: failed))
        } catch {
            return answer(error)
        }
    }

    /// Reads, checks and commits a push: the targets counted, and the tokens no route takes.
    ///
    /// A token its notification's route does not take is left out, reported in `logs` as gorush
    /// reports a push that failed, and counted in `/api/stat/app`'s `push_error`; a notification
    /// left with no token is not stored. When no token of the whole request can be sent, the
    /// answer is a 400 naming the first (`notifications[0].tokens[1]: …`) and nothing is stored.
    private func push(_ request: HTTPRequest) async throws(GorushError) -> (counts: Int, failed: [GorushPush.FailedToken]) {
        let configuration = context.configuration()
        guard let section = configuration.section(GorushConfiguration.self), let app = configuration.app(section.app) else {
            throw GorushError(status: 404, "the gorush API is off")
        }
        let target = GorushPush.Target(app: app.id, topic: app.topic, maxNotifications: section.maxNotifications, now: context.clock.now)
        let push = try GorushPush.parse(request.body, for: target)
        // Every notification checked, for the route its platform's tokens take (the rule
        // registration follows), before the first is stored.
        var sendable: [(item: GorushPush.Item, request: NotificationRequest)] = []
        var failed: [GorushPush.FailedToken] = []
        for item in push.items {
            let at = "notifications[\(item.index)]"
            let route: String
            do {
                let platform = item.request.platform ?? .ios
                route = try FanOut.firstRoute(of: platform, app: app, configuration: configuration)
                _ = try FanOut.render(FanOut.withDefaults(item.request.content, app: app), route: route, app: app, configuration: configuration,
                                      notificationID: UUIDSource.timeOrdered().lowercasedString)
            } catch {
                throw refusal(at, error)
            }
            var kept = item.request
            kept.tokens = []
            for (j, token) in item.request.tokens.enumerated() {
                if let why = configuration.refusal(route: route, input: .token(token), attributes: item.request.attributes) {
                    failed.append(GorushPush.FailedToken(notifID: item.notifID, platform: item.platformName, token: token,
                                                         message: item.request.content.body ?? "",
                                                         error: "\(item.tokenField(j)): no route of app \(app.id) takes it: route \(why)"))
                } else {
                    kept.tokens.append(token)
                }
            }
            if !kept.tokens.isEmpty { sendable.append((item, kept)) }
        }
        if sendable.isEmpty, let first = failed.first {
            counters.withLock { $0.refused += push.items.count }
            let more = failed.count > 1 ? " (and \(failed.count - 1) more token\(failed.count == 2 ? "" : "s") no route takes)" : ""
            throw GorushError(status: 400, first.error + more)
        }
        if !failed.isEmpty {
            counters.withLock { c in
                for f in failed { c.refusedTokens[f.platform, default: 0] += 1 }
                c.refused += push.items.count - sendable.count
            }
        }
        for (stored, (item, request)) in sendable.enumerated() {
            do {
                _ = try await context.accept(request)
                counters.withLock {
                    $0.committed += 1
                    $0.targets += request.tokens.count
                }
            } catch {
                counters.withLock { $0.refused += sendable.count - stored }
                throw Self.notStored(error, index: item.index, stored: stored, retryAfter: configuration.server.retryAfter)
            }
        }
        return (push.counts, failed)
    }

    /// The answer to a notification the accept path refused after `stored` others of the push were committed.
    private static func notStored(_ error: any Error, index: Int, stored: Int, retryAfter retry: Int) -> GorushError {
        let storedNote = stored > 0 ? " (notifications[0…\(stored - 1)] were stored and are sent; send only the others again)" : ""
        switch error {
        case let e as APIError:
            let message = e.field.map { "notifications[\(index)].\($0): \(e.message)" } ?? "notifications[\(index)]: \(e.message)"
            return GorushError(status: e.status, message + storedNote, retryAfter: e.retryAfter)
        case let e as StoreUnavailableError:
            return GorushError(status: 503, "notifications[\(index)]: the store is unavailable (\(e.message)); nothing of it was stored, "
                               + "retry after \(retry) s" + storedNote, retryAfter: retry)
        default:
            return GorushError(status: 500, "notifications[\(index)]: could not be completed: \(error)")
        }
    }

    private func refusal(_ at: String, _ error: DispatchError) -> GorushError {
        switch error {
        case .invalidRequest(let field, let message): return GorushError(status: 400, "\(at).\(field): \(message)")
        default: return GorushError(status: 400, "\(at): \(error.description)")
        }
    }

    private func answer(_ error: any Error, headers: [(String, String)] = []) -> HTTPResponse {
        let e = error as? GorushError ?? GorushError(status: 500, "\(error)")
        var extra = headers
        if let retry = e.retryAfter { extra.append(("Retry-After", String(retry))) }
        return HTTPResponse.json(e.status, e.json, headers: extra)
    }
}
