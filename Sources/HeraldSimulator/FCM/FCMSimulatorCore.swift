import FoundationEssentials
import HeraldCore
import HeraldCrypto
import Synchronization

/// The FCM simulator's request handler and its shared state (accounts, access tokens, faults,
/// counters, what it received). Called on the HTTP/2 server's connection threads.
final class FCMSimulatorCore: Sendable {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    static let cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"
    static let jwtBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    static let tokenPath = "/token"

    private struct AccessToken {
        var expiry: Date
        var account: FCMServiceAccount
    }

    let clock: any WallClock
    let logger: Logger
    let accessTokenLifetime: TimeInterval
    let expiresInAsString: Bool
    let retainsMessages: Bool
    private let accounts = Locked<[String: FCMServiceAccount]>([:])
    private let tokens = Locked<[String: AccessToken]>([:])
    let faults: Locked<FCMFaults>
    let counters = Locked(FCMSimulatorCounters())
    private let messages = Locked<[FCMReceivedMessage]>([])
    private let record: RecordFile?
    private let sequence = Atomic<UInt64>(0)

    init(configuration: FCMSimulator.Configuration) throws(FCMSimulatorError) {
        clock = configuration.clock
        logger = configuration.logger
        accessTokenLifetime = configuration.accessTokenLifetime
        expiresInAsString = configuration.expiresInAsString
        retainsMessages = configuration.retainsMessages
        faults = Locked(configuration.faults)
        if let path = configuration.recordFile {
            do { record = try RecordFile(path: path, truncate: false) } catch { throw FCMSimulatorError(error.description) }
        } else {
            record = nil
        }
        for account in configuration.accounts { register(account) }
    }

    func register(_ account: FCMServiceAccount) { accounts.withLock { $0[account.clientEmail] = account } }
    var received: [FCMReceivedMessage] { messages.withLock { $0 } }
    func clearReceived() { messages.withLock { $0.removeAll() } }
    func close() { record?.close() }

    /// Answers one request: the token endpoint, `messages:send`, or 404.
    func handle(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        let path = request.pathWithoutQuery
        if path == Self.tokenPath {
            guard request.method == "POST" else { return FCMGoogleError.methodNotAllowed(request.method).response }
            return tokenEndpoint(request)
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        // "", "v1", "projects", "{p}", "messages:send"
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "v1", parts[2] == "projects", !parts[3].isEmpty,
              parts[4] == "messages:send" else {
            return FCMGoogleError.notFound(path).response
        }
        guard request.method == "POST" else { return FCMGoogleError.methodNotAllowed(request.method).response }
        counters.withLock { $0.sends += 1 }
        var response = send(request, project: String(parts[3]))
        let latency = faults.withLock { $0.latency }
        if latency > 0 && response.action == .respond { response.delay = latency }
        return response
    }

    // MARK: Token endpoint

    private func tokenEndpoint(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        counters.withLock { $0.tokenRequests += 1 }
        let refusal = tokenRefusal(request)
        switch refusal {
        case .failure(let error):
            counters.withLock { $0.tokenRefusals[error.error, default: 0] += 1 }
            logger.info("token request refused", ["error": error.error, "description": error.description])
            return error.response
        case .success(let account):
            let token = "ya29.sim-" + FCMServiceAccount.randomHex(24)
            let expiry = clock.now.addingTimeInterval(accessTokenLifetime)
            tokens.withLock { $0[token] = AccessToken(expiry: expiry, account: account) }
            counters.withLock { $0.accessTokensIssued += 1 }
            var w = JSONWriter(capacity: 128)
            w.object { o in
                o.string("access_token", token)
                let seconds = Int(accessTokenLifetime.rounded(.down))
                if expiresInAsString { o.string("expires_in", String(seconds)) } else { o.int("expires_in", seconds) }
                o.string("token_type", "Bearer")
            }
            return .json(200, w.string, headers: [SimulatorHTTP2Header("cache-control", "no-cache, no-store, max-age=0, must-revalidate")])
        }
    }

    /// The account the assertion proves, or Google's refusal.
    private func tokenRefusal(_ request: SimulatorHTTP2Request) -> Result<FCMServiceAccount, OAuthError> {
        let fault = faults.withLock { f -> (unavailable: Bool, invalidGrant: Bool) in
            if f.tokenEndpointUnavailable > 0 {
                f.tokenEndpointUnavailable -= 1
                return (true, f.invalidGrant)
            }
            return (false, f.invalidGrant)
        }
        if fault.unavailable {
            return .failure(OAuthError(status: 503, error: "temporarily_unavailable", description: "The service is currently unavailable."))
        }
        let type = request.header("content-type") ?? ""
        guard type.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            return .failure(OAuthError(status: 400, error: "invalid_request", description: "Content-Type must be application/x-www-form-urlencoded"))
        }
        let form = FormDecoding.decode(request.bodyText)
        guard let grant = form["grant_type"] else {
            return .failure(OAuthError(status: 400, error: "invalid_request", description: "Required parameter is missing: grant_type"))
        }
        guard grant == Self.jwtBearer else {
            return .failure(OAuthError(status: 400, error: "unsupported_grant_type", description: "Invalid grant_type: \(grant)"))
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            return .failure(OAuthError(status: 400, error: "invalid_request", description: "Missing required parameter: assertion"))
        }
        if fault.invalidGrant { return .failure(.invalidGrant("Invalid JWT Signature.")) }
        let decoded: JWT.Decoded
        do { decoded = try JWT.decode(assertion) } catch {
            return .failure(.invalidGrant("Invalid JWT: \(error.description)"))
        }
        guard decoded.algorithm == "RS256" else { return .failure(.invalidGrant("Invalid JWT: the algorithm must be RS256")) }
        guard let iss = decoded.claims["iss"]?.stringValue, let account = accounts.withLock({ $0[iss] }) else {
            return .failure(.invalidGrant("Invalid grant: account not found"))
        }
        if let kid = decoded.keyID, kid != account.privateKeyID { return .failure(.invalidGrant("Invalid JWT Signature.")) }
        guard account.publicKey.verify(signature: decoded.signature, message: decoded.signingInput) else {
            return .failure(.invalidGrant("Invalid JWT Signature."))
        }
        let audience = "https://\(request.authority)\(Self.tokenPath)"
        guard decoded.claims["aud"]?.stringValue == audience else {
            return .failure(.invalidGrant("Invalid JWT: Failed audience check. The right audience is \(audience)"))
        }
        let scopes = (decoded.claims["scope"]?.stringValue ?? "").split(separator: " ").map(String.init)
        guard scopes.contains(Self.scope) || scopes.contains(Self.cloudPlatformScope) else {
            return .failure(OAuthError(status: 400, error: "invalid_scope", description: "Invalid OAuth scope or ID token audience provided."))
        }
        let now = clock.now.timeIntervalSince1970
        guard let iat = decoded.claims["iat"]?.doubleValue, let exp = decoded.claims["exp"]?.doubleValue,
              exp > iat, exp - iat <= 3600, iat <= now + 300, exp >= now else {
            return .failure(.invalidGrant("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."))
        }
        return .success(account)
    }

    // MARK: messages:send

    private func send(_ request: SimulatorHTTP2Request, project: String) -> SimulatorHTTP2Response {
        let forced401 = faults.withLock { f -> Bool in
            guard f.unauthenticatedSends > 0 else { return false }
            f.unauthenticatedSends -= 1
            return true
        }
        if forced401 { return refuse(.unauthenticated) }
        guard let account = authorise(request) else { return refuse(.unauthenticated) }
        guard account.projectID == project else { return refuse(.permissionDenied(project: project)) }
        let checked: FCMMessageRules.Checked
        do {
            checked = try FCMMessageRules.check(try JSONValue.parse(request.body))
        } catch let error as FCMGoogleError {
            return refuse(error)
        } catch {
            return refuse(.badRequest("Invalid JSON payload received. \(error)", field: nil))
        }
        if case .token(let token) = checked.target {
            let tokenFault = faults.withLock { f -> FCMGoogleError?? in
                if f.unansweredTokens.contains(token) { return .some(nil) }
                if f.unregisteredTokens.contains(token) { return .unregistered }
                if f.invalidTokens.contains(token) { return .invalidToken }
                if f.senderMismatchTokens.contains(token) { return .senderIDMismatch }
                if f.thirdPartyAuthErrorTokens.contains(token) { return .thirdPartyAuth }
                return nil
            }
            switch tokenFault {
            case .some(.none):
                counters.withLock { $0.unanswered += 1 }
                return SimulatorHTTP2Response(status: 200, action: .noAnswer)
            case .some(.some(let error)): return refuse(error)
            case .none: break
            }
        }
        let counted = faults.withLock { f -> FCMGoogleError? in
            if f.quotaExceeded > 0 { f.quotaExceeded -= 1; return .quotaExceeded(retryAfter: f.quotaRetryAfter) }
            if f.internalErrors > 0 { f.internalErrors -= 1; return .internalError(retryAfter: f.serverErrorRetryAfter) }
            if f.unavailable > 0 { f.unavailable -= 1; return .unavailable(retryAfter: f.serverErrorRetryAfter) }
            return nil
        }
        if let counted { return refuse(counted) }

        let name = checked.validateOnly
            ? "projects/\(project)/messages/fake_message_id"
            : "projects/\(project)/messages/0:\(Int64(clock.now.timeIntervalSince1970 * 1_000_000))%\(String(sequence.add(1, ordering: .relaxed).newValue, radix: 16))"
        let target: FCMReceivedMessage.Target
        switch checked.target {
        case .token(let t): target = .token(t)
        case .topic(let t): target = .topic(t)
        case .condition(let c): target = .condition(c)
        }
        let message = FCMReceivedMessage(time: clock.now, connectionID: request.connectionID, streamID: Int(request.streamID),
                                         projectID: project, clientEmail: account.clientEmail, target: target,
                                         validateOnly: checked.validateOnly, name: name, message: checked.message, bytes: checked.bytes)
        counters.withLock { c in
            c.accepted += 1
            if checked.validateOnly { c.validateOnly += 1 }
        }
        if retainsMessages { messages.withLock { $0.append(message) } }
        record?.write(message.recordLine)
        var w = JSONWriter(capacity: 96)
        w.object { $0.string("name", name) }
        return .json(200, w.string)
    }

    private func refuse(_ error: FCMGoogleError) -> SimulatorHTTP2Response {
        counters.withLock { $0.errors[error.fcmErrorCode ?? error.status, default: 0] += 1 }
        return error.response
    }

    /// The account of a live access token in `authorization: Bearer …`.
    private func authorise(_ request: SimulatorHTTP2Request) -> FCMServiceAccount? {
        guard let header = request.header("authorization"), header.count > 7,
              header.prefix(7).lowercased() == "bearer " else { return nil }
        let token = String(header.dropFirst(7))
        let now = clock.now
        return tokens.withLock { t in
            guard let entry = t[token] else { return nil }
            if entry.expiry <= now {
                t[token] = nil
                return nil
            }
            return entry.account
        }
    }
}

/// `application/x-www-form-urlencoded` (the WHATWG rules: `+` is a space, `%XX` a byte).
enum FormDecoding {
    static func decode(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = unescape(kv[0])
            if out[key] == nil { out[key] = kv.count > 1 ? unescape(kv[1]) : "" }
        }
        return out
    }

    static func unescape(_ s: Substring) -> String {
        var bytes: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "+") {
                bytes.append(0x20)
            } else if b == UInt8(ascii: "%"), it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(v)
                it = it.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
