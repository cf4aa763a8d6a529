import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// `POST /v1/stream/subscription?app=A[&access_token=T]` with `{"subscription": {…}}`: a page
/// registers its browser's push subscription for the user of its client token, with no backend
/// round trip.
///
/// Authenticated as the stream is (client token as `Authorization: Bearer` or `access_token`;
/// the same 401s). The subscription goes to the app's first route that takes it (its `web`
/// routes first), checked by that route's plugin as `POST /v1/devices` checks it (400 naming
/// the field); answers as `POST /v1/devices` does (201 created, 200 updated).
///
/// The subscription remembers the token's `device` (the installation id the page's stream is
/// keyed by) as its `stream_device` attribute (``DeviceAttributes/streamDevice``): under
/// `local-first` an open tab gets its stream only, a closed one the Web Push.
extension API {
    func registerStreamSubscription(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let appID = request.query["app"], !appID.isEmpty else {
            return APIError.invalid("app", "give the app: POST /v1/stream/subscription?app=<app id>").response
        }
        let claims: ClientTokenClaims
        switch authenticateClient(request, app: appID) {
        case .success(let c): claims = c
        case .failure(let e): return e.response
        }
        let json = try parseBody(request)
        guard case .object(let members) = json else { throw APIError.invalid(nil, "expected a JSON object: {\"subscription\": {…}}") }
        for key in members.keys.sorted() where key != "subscription" {
            throw APIError.invalid(key, "unknown field; send {\"subscription\": <PushSubscription.toJSON()>}")
        }
        guard let subscription = members["subscription"] else {
            throw APIError.invalid("subscription", "is required: the browser's PushSubscription.toJSON()")
        }
        let configuration = deps.snapshot().configuration
        let app = try app(appID, field: "app", in: configuration)
        let platform: Platform? = app.routes.contains { configuration.transports[$0]?.configuration.platform == .web } ? .web : nil
        let route: (transport: String, address: DeviceAddress)
        do throws(AddressProblem) {
            route = try configuration.registrationRoute(app: app, input: .subscription(subscription), attributes: DeviceAttributes(),
                                                        transport: nil, platform: platform)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        var attributes = route.address.attributes
        attributes[DeviceAttributes.streamDevice] = claims.device
        let result = try await deps.store.register(
            DeviceRegistration(app: app.id, token: route.address.token, user: claims.user, transport: route.transport,
                               attributes: attributes, maxPerUser: app.maxRegisteredDevicesPerUser), at: now)
        apiLogger.info("subscription registered by a client token", ["app": app.id, "user": claims.user, "transport": route.transport,
                                                                     "change": result.change.rawValue])
        result.reportRemoved(logger: apiLogger, metrics: serverMetrics.registry)
        return HTTPResponse.json(result.change == .created ? 201 : 200) { o in
            result.device.writeJSON(into: &o)
            o.string("change", result.change.rawValue)
            o.string("previous_user", result.previousUser)
        }
    }
}
