import FoundationEssentials
import Glibc
import HeraldCore

/// `POST /v1/channels`, `GET /v1/channels?app=`, `DELETE /v1/channels/{id}`: broadcast channels
/// (iOS 18), created through the app's first route whose transport manages channels
/// (``BroadcastChannels``: `apns-http2`) and kept on record in the store.
extension API {
    func createChannel(_ request: HTTPRequest) async throws -> HTTPResponse {
        let json = try parseBody(request)
        guard case .object = json else { throw APIError.invalid(nil, "expected a JSON object, found \(json.typeDescription)") }
        let context = JSONReadContext(unknownKeys: .reject)
        let root = JSONNode(root: json, context: context)
        let appID = root.string("app", required: true)
        let policy = root.oneOf("storage_policy", ChannelStoragePolicy.self) ?? ChannelStoragePolicy.none
        context.reportUnknownKeys()
        if !context.errors.isEmpty { throw Self.issuesError(context.errors) }
        let app = try app(appID, field: "app", in: dependencies.snapshot().configuration)
        let store = try channelStore()
        let (route, channels) = try channelRoute(app)
        return try await channelCreations.run([app.id]) {
            // The limit is Herald's count of the app's channels on this route: checked before Apple is asked.
            let held = try await store.channelCount(app: app.id, route: route)
            if held >= channels.maxChannelsPerApp {
                throw APIError(status: 409, code: "channel_limit",
                               message: "app \(app.id) holds \(held) channels on route \(route), the limit of \(channels.maxChannelsPerApp) "
                                   + "channels per app and environment; delete one first (DELETE /v1/channels/{id})", field: "app")
            }
            let id: String
            switch await channels.createChannel(topic: app.topic, storagePolicy: policy) {
            case .success(let created): id = created
            case .failure(let e): throw Self.channelAnswer(e, route: route)
            }
            let channel = StoredChannel(app: app.id, id: id, route: route, storagePolicy: policy, createdAt: now)
            try await store.insertChannel(channel)
            apiLogger.info("channel created", ["app": app.id, "route": route, "channel": id])
            return HTTPResponse.json(201) { o in Self.write(channel, into: &o) }
        }
    }

    /// Herald's channels of the app beside the platform's (`all-channels`), each route's list
    /// with the ids it holds that Herald has no record of, so the two can be reconciled.
    func listChannels(_ request: HTTPRequest) async throws -> HTTPResponse {
        let app = try app(request.query["app"], field: "app", in: dependencies.snapshot().configuration)
        let store = try channelStore()
        let ours = try await store.channels(app: app.id)
        var platform: [(route: String, result: Result<[String], ChannelError>)] = []
        for route in channelRoutes(app) {
            platform.append((route.name, await route.channels.listChannels(topic: app.topic)))
        }
        let known = Set(ours.map(\.id))
        var held: [String: Set<String>] = [:]
        for p in platform { if case .success(let ids) = p.result { held[p.route] = Set(ids) } }
        return HTTPResponse.json(200) { o in
            o.string("app", app.id)
            o.array("channels") { a in
                for (i, c) in ours.enumerated() {
                    if i > 0 { a.raw(UInt8(ascii: ",")) }
                    a.object { w in
                        Self.write(c, into: &w)
                        // Whether the platform still holds it (absent when its list could not be read).
                        if let ids = held[c.route] { w.bool("on_platform", ids.contains(c.id)) }
                    }
                }
            }
            o.array("platform") { a in
                for (i, p) in platform.enumerated() {
                    if i > 0 { a.raw(UInt8(ascii: ",")) }
                    a.object { w in
                        w.string("route", p.route)
                        switch p.result {
                        case .success(let ids):
                            w.stringArray("channels", ids)
                            w.stringArray("not_in_herald", ids.filter { !known.contains($0) })
                        case .failure(let e):
                            w.string("error", e.description)
                        }
                    }
                }
            }
        }
    }

    /// Deletes a channel on the platform and Herald's record of it (`?app=` picks the app;
    /// without it, the app whose record holds the id). A channel the platform no longer holds
    /// loses its record all the same; one Herald has no record of is deleted on the platform
    /// through the app's first channel route (reconciling `not_in_herald`).
    func deleteChannel(_ id: String, _ request: HTTPRequest) async throws -> HTTPResponse {
        let configuration = dependencies.snapshot().configuration
        let store = try channelStore()
        var found: (app: AppConfiguration, channel: StoredChannel?)? = nil
        if let appID = request.query["app"] {
            let app = try app(appID, field: "app", in: configuration)
            found = (app, try await store.channels(app: app.id).first { $0.id == id })
        } else {
            for appID in configuration.apps.keys.sorted() {
                guard let app = configuration.app(appID),
                      let channel = try await store.channels(app: appID).first(where: { $0.id == id }) else { continue }
                found = (app, channel)
                break
            }
        }
        guard let (app, stored) = found else {
            throw APIError.notFound("no channel \(id) on record; give ?app= to delete one Herald did not create")
        }
        let route: String, channels: any BroadcastChannels
        if let stored, let transport = dependencies.transport(stored.route) as? any BroadcastChannels {
            (route, channels) = (stored.route, transport)
        } else {
            (route, channels) = try channelRoute(app)
        }
        switch await channels.deleteChannel(topic: app.topic, id: id) {
        case .success: break
        case .failure(.notFound(let why)) where stored != nil:
            apiLogger.info("channel already gone on the platform", ["app": app.id, "route": route, "channel": id, "reason": why])
        case .failure(let e):
            throw Self.channelAnswer(e, route: route)
        }
        if stored != nil { _ = try await store.removeChannel(app: app.id, id: id) }
        apiLogger.info("channel deleted", ["app": app.id, "route": route, "channel": id])
        return HTTPResponse(status: 204, headers: [], body: [])
    }

    // MARK: Helpers

    private func channelStore() throws(APIError) -> any ChannelStore {
        guard let store = dependencies.channels else {
            throw APIError(status: 501, code: "not_implemented", message: "this storage driver keeps no broadcast channels")
        }
        return store
    }

    /// The app's routes whose running transport manages channels, in route order.
    private func channelRoutes(_ app: AppConfiguration) -> [(name: String, channels: any BroadcastChannels)] {
        app.routes.compactMap { name in (dependencies.transport(name) as? any BroadcastChannels).map { (name, $0) } }
    }

    /// The app's first channel route, or a 400 naming `app`.
    private func channelRoute(_ app: AppConfiguration) throws(APIError) -> (String, any BroadcastChannels) {
        guard let first = channelRoutes(app).first else {
            throw APIError.invalid("app", "app \(app.id) has no route that manages broadcast channels (an apns-http2 route)")
        }
        return (first.name, first.channels)
    }

    /// The platform's refusal as an answer: 404, 409 for its own channel limit, 503 to try again, else 502.
    static func channelAnswer(_ e: ChannelError, route: String) -> APIError {
        switch e {
        case .notFound(let why): return APIError.notFound("route \(route): \(why)")
        case .limitReached(let why): return APIError(status: 409, code: "channel_limit", message: "route \(route): \(why)")
        case .temporary(let why): return APIError(status: 503, code: "platform_unavailable", message: "route \(route): \(why)", retryAfter: 1)
        case .refused(let why), .unknown(let why): return APIError(status: 502, code: "platform_refused", message: "route \(route): \(why)")
        }
    }

    static func write(_ c: StoredChannel, into o: inout ObjectWriter) {
        o.string("id", c.id)
        o.string("app", c.app)
        o.string("route", c.route)
        o.string("storage_policy", c.storagePolicy.rawValue)
        o.string("created_at", c.createdAt.iso8601)
    }
}
