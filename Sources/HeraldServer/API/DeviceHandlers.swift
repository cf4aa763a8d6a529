import FoundationEssentials
import Glibc
import HeraldCore

/// `POST /v1/devices`, `DELETE /v1/devices/{token}`, `GET /v1/users/{user}/devices`.
extension API {
    func registerDevice(_ request: HTTPRequest) async throws -> HTTPResponse {
        let json = try parseBody(request)
        let snapshot = dependencies.snapshot()
        let configuration = snapshot.configuration
        let context = JSONReadContext(unknownKeys: .reject)
        let root = JSONNode(root: json, context: context)
        guard case .object = json else { throw APIError.invalid(nil, "expected a JSON object, found \(json.typeDescription)") }
        let appID = root.string("app", required: true)
        let user = root.string("user", required: true)
        let rawToken = root.string("token", required: true)
        let transportName = root.string("transport")
        let environment = root.oneOf("environment", APNsEnvironment.self)
        context.reportUnknownKeys()
        if !context.errors.isEmpty { throw Self.issuesError(context.errors) }
        let app = try app(appID, field: "app", in: configuration)
        let token: String
        do { token = try DeviceToken.normalize(rawToken!) } catch { throw APIError.invalid("token", error.description) }
        if let problem = FieldLimits.userProblem(user!) { throw APIError.invalid("user", problem) }

        var env = environment
        let transport: String
        if let t = transportName {
            guard app.routes.contains(t), let spec = configuration.transports[t] else {
                throw APIError.invalid("transport", "\"\(t)\" is not a route of app \(app.id); routes: \(app.routes.joined(separator: ", "))")
            }
            if let e = env, !spec.canCarry(e) {
                throw APIError.invalid("environment", "transport \(t) serves \(spec.configuration.environment!.rawValue) devices, not \(e.rawValue)")
            }
            env = env ?? spec.configuration.environment
            transport = t
        } else {
            let e = env ?? configuration.defaultEnvironment(app)
            guard let t = configuration.defaultTransport(app: app, environment: e) else {
                throw APIError.invalid("environment", "app \(app.id) has no route that can carry \(e.rawValue) devices; routes: \(app.routes.joined(separator: ", "))")
            }
            env = e
            transport = t
        }
        let result = try await dependencies.store.register(
            DeviceRegistration(app: app.id, token: token, user: user!, transport: transport, environment: env ?? .production), at: now)
        apiLogger.info("device registered", ["app": app.id, "user": user!, "token": Redact.token(token),
                                              "change": result.change.rawValue])
        return HTTPResponse.json(result.change == .created ? 201 : 200) { o in
            result.device.writeJSON(into: &o)
            o.string("change", result.change.rawValue)
            o.string("previous_user", result.previousUser)
        }
    }

    func removeDevice(_ rawToken: String, _ request: HTTPRequest) async throws -> HTTPResponse {
        let app = try app(request.query["app"], field: "app", in: dependencies.snapshot().configuration)
        let token: String
        do { token = try DeviceToken.normalize(rawToken) } catch { throw APIError.invalid("token", error.description) }
        guard try await dependencies.store.unregister(app: app.id, token: token) else {
            throw APIError.notFound("no device \(Redact.token(token)) in app \(app.id)")
        }
        apiLogger.info("device removed", ["app": app.id, "token": Redact.token(token)])
        return HTTPResponse(status: 204)
    }

    func userDevices(_ user: String, _ request: HTTPRequest) async throws -> HTTPResponse {
        if let problem = FieldLimits.userProblem(user) { throw APIError.invalid("user", problem) }
        var appID: String? = nil
        if let a = request.query["app"] { appID = try app(a, field: "app", in: dependencies.snapshot().configuration).id }
        let devices = try await dependencies.store.listDevices(app: appID, user: user, limit: 10_000)
        return HTTPResponse.json(200) { o in
            o.array("devices") { w in
                for (i, d) in devices.enumerated() {
                    if i > 0 { w.raw(UInt8(ascii: ",")) }
                    w.object { d.writeJSON(into: &$0) }
                }
            }
        }
    }
}
