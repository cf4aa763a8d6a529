import FoundationEssentials
import HeraldCore

/// `GET /v1/{type}/{app}/public-key`: the public value a route of plugin `type` publishes for
/// the app's clients (``TransportConfiguration/publicClientKey``), such as the `applicationServerKey`
/// a page passes to `PushManager.subscribe` (`GET /v1/webpush/{app}/public-key`).
///
/// No authentication: the value is public and pages fetch it before they have anything else.
/// Answers `{"app", "route", "public_key"}` from the app's first route of that type that has
/// one; 404 naming what is missing otherwise.
extension API {
    func publicClientKey(kind: String, appID: String) -> HTTPResponse {
        let configuration = deps.snapshot().configuration
        guard let app = configuration.app(appID) else {
            return APIError.notFound("unknown app \"\(appID)\"").response
        }
        let routes = app.routes.filter { configuration.transports[$0]?.kind == kind }
        guard let route = routes.first(where: { configuration.transports[$0]?.configuration.publicClientKey != nil }),
              let key = configuration.transports[route]?.configuration.publicClientKey else {
            let why = routes.isEmpty ? "has no route of type \"\(kind)\"" : "has no public key on its \(kind) routes"
            return APIError.notFound("app \(app.id) \(why)").response
        }
        return HTTPResponse.json(200) { o in
            o.string("app", app.id)
            o.string("route", route)
            o.string("public_key", key)
        }
    }
}
