import FoundationEssentials
import HeraldCore
import HeraldCrypto

extension HTTPStream: EventSink {
    public func send(_ bytes: [UInt8]) -> Bool { write(bytes) }

    /// Ends the stream with a comment saying why (a newer stream of the device replaced it).
    public func close() { finish(final: ServerSentEvents.comment("replaced by a newer stream of this device")) }

    public func waitForRoom(_ count: Int) async -> Bool {
        // The server thread drains the buffer as the client reads; a replay waits for half of it.
        while isOpen && unsentBytes + count > bufferLimit / 2 && unsentBytes > 0 {
            try? await Task.sleep(nanoseconds: 2_000_000)
        }
        return isOpen
    }
}

extension API {
    /// `GET /v1/stream?app=A[&ack=1][&since=N][&access_token=T]`: the device's live event stream
    /// (Server-Sent Events), authenticated by a client token (`Authorization: Bearer` or
    /// `access_token`). With `Last-Event-ID` (or `since`), what the inbox holds after that id is
    /// replayed first. With `ack=1` the client acknowledges what it reads
    /// (`POST /v1/stream/ack`), and its deliveries are `delivered` only once acknowledged.
    /// A device holds at most `api.streams.maxPerDevice` streams (a new one replaces its oldest),
    /// a user `api.streams.maxPerUser` (past it: 429 `too_many_user_streams`).
    func openStream(_ request: HTTPRequest) async -> HTTPResponse {
        let configuration = deps.snapshot().configuration
        guard let hub = deps.streams else {
            return APIError(status: 503, code: "streams_unavailable", message: "this server has no live streams").response
        }
        guard let appID = request.query["app"], !appID.isEmpty else {
            return APIError.invalid("app", "give the app: GET /v1/stream?app=<app id>").response
        }
        guard let app = configuration.app(appID) else {
            return APIError.notFound("app: unknown app \"\(appID)\"").response
        }
        guard app.foreground != .pushOnly, app.clientSecret != nil, configuration.localTransport(app: app) != nil else {
            return APIError.notFound("app \(appID) has no live streams: set its \"foreground\" policy, \"clientSecret\" and a route of type \"local\"").response
        }
        let claims: ClientTokenClaims
        switch authenticateClient(request, app: appID) {
        case .success(let c): claims = c
        case .failure(let e): return e.response
        }
        let device: String
        do { device = try DeviceToken.normalize(claims.device) } catch {
            return Self.clientTokenError("device claim: \(error)")
        }
        do {
            if let problem = try await deviceOwnerProblem(app: appID, device: device, user: claims.user) {
                return Self.clientTokenError(problem)
            }
        } catch {
            return APIError(status: 503, code: "store_unavailable", message: "cannot check the device: \(error)", retryAfter: 1).response
        }
        var after: Int64? = nil
        if let raw = request.headers["last-event-id"] ?? request.query["since"] {
            guard let n = Int64(String(raw.filter { $0 != " " && $0 != "\t" })), n >= 0 else {
                return APIError.invalid(request.headers["last-event-id"] != nil ? "Last-Event-ID" : "since",
                                        "must be an event id (a whole number ≥ 0), found \"\(raw)\"").response
            }
            after = n
        }
        let acking: Bool
        switch request.query["ack"] {
        case nil, "0"?: acking = false
        case "1"?: acking = true
        case let other?: return APIError.invalid("ack", "must be 1 (the client acknowledges events) or 0, found \"\(other)\"").response
        }
        let streams = configuration.api.streams
        let limits = StreamHub.Limits(perDevice: streams.maxPerDevice, perUser: streams.maxPerUser)
        let user = claims.user, replayAfter = after, ackTimeout = app.ackTimeout
        if let refusal = hub.refusal(app: appID, user: user, device: device, limits: limits) {
            return APIError(status: 429, code: "too_many_user_streams", message: refusal, retryAfter: 5).response
        }
        return HTTPResponse.eventStream(heartbeat: streams.heartbeat) { stream in
            // Present before the client hears it is connected: a notification sent as soon as it
            // says so is planned for this stream.
            guard let connection = hub.register(stream, app: appID, user: user, device: device, acking: acking,
                                                ackTimeout: ackTimeout, limits: limits) else {
                // The user reached its limit between the check above and now (streams opened side by side).
                stream.finish(final: ServerSentEvents.comment("refused: too many streams for this user (api.streams.maxPerUser)"))
                return
            }
            stream.onClose { _ in hub.detach(connection) }
            // Reconnect after 2 s; a comment so that clients see the stream is live at once.
            _ = stream.write(ServerSentEvents.retry(milliseconds: 2000) + ServerSentEvents.comment("connected"))
            hub.startCatchUp(connection, after: replayAfter)
        }
    }

    static func clientTokenError(_ message: String) -> HTTPResponse {
        APIError(status: 401, code: "invalid_client_token", message: message).response
    }
}

extension Daemon {
    /// The `api.streams` keys a reload cannot apply (the HTTP server sizes its connection table
    /// and stream buffers from them at start): each change, named, for the refusal. `heartbeat`,
    /// `maxPerDevice` and `maxPerUser` apply on reload, to the streams opened after it.
    static func streamRestartReasons(old: StreamsConfiguration, new: StreamsConfiguration) -> [String] {
        var reasons: [String] = []
        if old.maxStreams != new.maxStreams {
            reasons.append("api.streams.maxStreams changed (\(old.maxStreams) → \(new.maxStreams)): restart to apply")
        }
        if old.bufferBytes != new.bufferBytes {
            reasons.append("api.streams.bufferBytes changed (\(old.bufferBytes) → \(new.bufferBytes)): restart to apply")
        }
        return reasons
    }
}
