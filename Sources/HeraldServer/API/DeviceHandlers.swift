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
        let rawToken = root.string("token")
        // The route's plugin checks a subscription's members (and names them); the API passes it whole.
        root.allowKeys(["subscription"])
        let subscription = json["subscription"].flatMap { $0 == .null ? nil : $0 }
        let transportName = root.string("transport")
        let platform = root.string("platform").map { Platform($0) }
        let vendor = root.string("vendor")
        var attributes = DeviceAttributes()
        // Plugin attributes the API passes through (APNs's environment); the route's plugin checks them.
        if let environment = root.string("environment") { attributes["environment"] = environment }
        let liveActivity = root.child("live_activity").flatMap(LiveActivityToken.read)
        context.reportUnknownKeys()
        if !context.errors.isEmpty { throw Self.issuesError(context.errors) }
        let app = try app(appID, field: "app", in: configuration)
        if let problem = FieldLimits.userProblem(user!) { throw APIError.invalid("user", problem) }
        if let refusal = reservedUserRefusal(user!) {
            // A front end pushes only to its own namespace: the API must not be able to put a device there.
            throw APIError.invalid("user", refusal)
        }
        let input: DeviceAddressInput
        switch (rawToken, subscription) {
        case (let token?, nil): input = .token(token)
        case (nil, let s?): input = .subscription(s)
        case (nil, nil): throw APIError.invalid("token", "give the device's address: \"token\" (a string) or \"subscription\" (an object)")
        case (_?, _?): throw APIError.invalid("subscription", "give either \"token\" or \"subscription\", not both")
        }
        var route: (transport: String, address: DeviceAddress)
        do throws(AddressProblem) {
            if liveActivity != nil, transportName == nil {
                // A Live Activity token goes through the app's first apns-http2 route.
                guard let name = app.routes.first(where: { configuration.transports[$0]?.kind == LiveActivityToken.routeKind }) else {
                    throw AddressProblem(field: "live_activity", "app \(app.id) has no \(LiveActivityToken.routeKind) route: Live Activity tokens need one")
                }
                route = try configuration.registrationRoute(app: app, input: input, attributes: attributes, transport: name, platform: nil)
            } else {
                route = try configuration.registrationRoute(app: app, input: input, attributes: attributes, transport: transportName, platform: platform,
                                                            vendor: vendor)
            }
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        if let liveActivity {
            guard configuration.transports[route.transport]?.kind == LiveActivityToken.routeKind else {
                throw APIError.invalid("live_activity", "Live Activity tokens go through an \(LiveActivityToken.routeKind) route, not \(route.transport)")
            }
            route.address.attributes = liveActivity.attributes(adding: route.address.attributes)
        }
        let result = try await dependencies.store.register(
            DeviceRegistration(app: app.id, token: route.address.token, user: user!, transport: route.transport,
                               attributes: route.address.attributes, maxPerUser: app.maxRegisteredDevicesPerUser), at: now)
        // A new push-to-start token of the same install and type (an update token of the same
        // install and activity) replaces the old.
        var replaced: [String] = []
        if let liveActivity {
            for old in try await dependencies.store.listDevices(app: app.id, user: user!, limit: 10_000)
            where liveActivity.replaces(old, token: route.address.token) {
                if try await dependencies.store.unregister(app: app.id, token: old.token) { replaced.append(old.token) }
            }
            for token in replaced {
                apiLogger.info("Live Activity token replaced", ["app": app.id, "user": user!, "token": Redact.token(token)])
            }
        }
        apiLogger.info("device registered", ["app": app.id, "user": user!, "token": Redact.token(route.address.token),
                                              "transport": route.transport, "change": result.change.rawValue])
        result.reportRemoved(logger: apiLogger, metrics: serverMetrics.registry)
        return HTTPResponse.json(result.change == .created ? 201 : 200) { o in
            result.device.writeJSON(into: &o)
            o.string("change", result.change.rawValue)
            o.string("previous_user", result.previousUser)
            if liveActivity != nil { o.stringArray("replaced", replaced) }
        }
    }

    /// `DELETE /v1/devices/{token}`: `token` is the device's address as the API returns it
    /// (percent-decoded: a hex APNs token, an FCM token, a Web Push subscription's JSON…), or any
    /// spelling of it that one of the app's routes normalises to the stored address (an
    /// upper-case or spaced hex token, a subscription's JSON with its keys in another order).
    func removeDevice(_ rawToken: String, _ request: HTTPRequest) async throws -> HTTPResponse {
        let configuration = dependencies.snapshot().configuration
        let app = try app(request.query["app"], field: "app", in: configuration)
        guard !rawToken.isEmpty else { throw APIError.invalid("token", "device token is empty") }
        // The address as stored first, then what each route makes of it, without repeats.
        var candidates = [rawToken]
        for name in app.routes {
            guard let spec = configuration.transports[name],
                  let address = try? spec.configuration.address(.token(rawToken), attributes: DeviceAttributes()),
                  !candidates.contains(address.token) else { continue }
            candidates.append(address.token)
        }
        for token in candidates where try await dependencies.store.unregister(app: app.id, token: token) {
            apiLogger.info("device removed", ["app": app.id, "token": Redact.token(token)])
            return HTTPResponse(status: 204)
        }
        throw APIError.notFound("no device \(Redact.token(rawToken)) in app \(app.id)")
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
