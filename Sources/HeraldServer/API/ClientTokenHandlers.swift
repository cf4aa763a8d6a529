import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// `POST /v1/client-tokens`: mints a client token for one user's device (scope `devices`).
extension API {
    /// Mints a client token. A device the store knows must belong to the token's user (the
    /// stream's rule, ``deviceOwnerProblem(app:device:user:)``): 403 `device_of_another_user`
    /// rather than a token that every stream would refuse.
    func mintClientToken(_ request: HTTPRequest) async throws -> HTTPResponse {
        let json = try parseBody(request)
        guard case .object = json else { throw APIError.invalid(nil, "expected a JSON object, found \(json.typeDescription)") }
        let configuration = dependencies.snapshot().configuration
        let context = JSONReadContext(unknownKeys: .reject)
        let root = JSONNode(root: json, context: context)
        let appID = root.string("app", required: true)
        let user = root.string("user", required: true)
        let device = root.string("device", required: true)
        let ttl = root.int("ttl", in: 1...Int(ClientToken.maxLifetime))
        context.reportUnknownKeys()
        if !context.errors.isEmpty { throw Self.issuesError(context.errors) }
        let app = try app(appID, field: "app", in: configuration)
        let minted: (token: String, claims: ClientTokenClaims)
        do {
            minted = try ClientToken.issue(app: app, user: user!, device: device!,
                                           lifetime: TimeInterval(ttl ?? Int(ClientToken.defaultLifetime)), now: now)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        if let problem = try await deviceOwnerProblem(app: app.id, device: minted.claims.device, user: minted.claims.user) {
            throw APIError(status: 403, code: "device_of_another_user", message: "device: \(problem); a client token is minted "
                           + "for the user the device is registered to (POST /v1/devices moves it)")
        }
        apiLogger.info("client token minted", ["app": app.id, "user": user!, "device": Redact.token(minted.claims.device),
                                               "expires_at": minted.claims.expiresAt.iso8601])
        return HTTPResponse.json(201, headers: [("Cache-Control", "no-store")]) { o in
            o.string("token", minted.token)
            o.string("expires_at", minted.claims.expiresAt.iso8601)
        }
    }

    /// Who may hold a client token for a device, for minting and for streams: the one rule,
    /// ``TokenStore/clientTokenOwnerProblem(app:device:user:)``, asked of the daemon's store.
    /// - Returns: what is wrong (names no secret), or `nil` when `user` may have the device.
    /// - Throws: ``StoreUnavailableError`` (answered 503) when the store cannot be asked.
    func deviceOwnerProblem(app: String, device: String, user: String) async throws -> String? {
        try await dependencies.store.clientTokenOwnerProblem(app: app, device: device, user: user)
    }

    /// The claims of the client token on `request` for `app` (see ``ClientTokenAuthenticator``),
    /// with the configuration and clock the API runs on now.
    func authenticateClient(_ request: HTTPRequest, app: String) -> Result<ClientTokenClaims, APIError> {
        ClientTokenAuthenticator(configuration: dependencies.snapshot().configuration, clock: dependencies.clock)
            .authenticate(request: request, app: app)
    }
}

/// Checks the client token a stream request carries: `Authorization: Bearer <token>`, else the
/// `access_token` query argument (a browser's `EventSource` cannot set headers).
///
/// Failures are 401 `invalid_client_token` naming the reason (missing, malformed, bad signature,
/// expired, another app); an unknown app or one without `clientSecret` is 400 naming `app`.
/// - Important: this checks the token only. Whether the device belongs to the token's user is
///   the caller's check (it needs the token store).
public struct ClientTokenAuthenticator: Sendable {
    let configuration: HeraldConfiguration
    let clock: any WallClock

    public init(configuration: HeraldConfiguration, clock: any WallClock) {
        self.configuration = configuration
        self.clock = clock
    }

    /// The verified claims, or the error to answer with.
    public func authenticate(request: HTTPRequest, app appID: String) -> Result<ClientTokenClaims, APIError> {
        let app: AppConfiguration
        do { app = try API.app(appID, field: "app", in: configuration) } catch { return .failure(error) }
        guard let secret = app.clientSecret else {
            return .failure(.invalid("app", "app \(app.id) has no clientSecret in the config, so it accepts no client tokens"))
        }
        guard let token = Self.presentedToken(request) else {
            return .failure(Self.refusal("send a client token as \"Authorization: Bearer <token>\" or ?access_token=<token>"))
        }
        do {
            return .success(try ClientToken.verify(token, secret: secret, app: app.id, now: clock.now))
        } catch {
            return .failure(Self.refusal(error.description))
        }
    }

    /// The token from the `Authorization` header (preferred) or the `access_token` query argument.
    static func presentedToken(_ request: HTTPRequest) -> String? {
        if let header = request.headers["authorization"], header.count > 7, header.prefix(7).lowercased() == "bearer " {
            let token = header.dropFirst(7).trimmingWhitespace()
            if !token.isEmpty { return String(token) }
        }
        if let query = request.query["access_token"], !query.isEmpty { return query }
        return nil
    }

    static func refusal(_ message: String) -> APIError {
        APIError(status: 401, code: "invalid_client_token", message: message,
                 headers: ["WWW-Authenticate": "Bearer realm=\"herald\", error=\"invalid_token\""])
    }
}
