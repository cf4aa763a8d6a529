import FoundationEssentials
import HeraldCore
internal import COpenSSL

/// What a client token says: who may open a stream, for which app and device, and until when.
public struct ClientTokenClaims: Sendable, Equatable {
    /// Claim `sub`: the user the stream belongs to.
    public var user: String
    /// Claim `app`: the app id (a key of `apps` in the config).
    public var app: String
    /// Claim `device`: the device's APNs token, or an installation id for a device with no push
    /// route; normalised lower-case hex (``DeviceToken/normalize(_:)``).
    public var device: String
    /// Claim `iat`, whole seconds.
    public var issuedAt: Date
    /// Claim `exp`, whole seconds: the token is refused from this instant on.
    public var expiresAt: Date

    /// Creates claims; both times are truncated to whole seconds when signed.
    public init(user: String, app: String, device: String, issuedAt: Date, expiresAt: Date) {
        self.user = user
        self.app = app
        self.device = device
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// Why a client token was refused. The ``description`` names the reason for a 401 body.
///
/// - Important: no case carries the secret or the token; only the claim values a valid
///   signature vouches for (or, for ``wrongApp(issuedFor:expected:)``, the app the client's own
///   token names) appear in messages.
public enum ClientTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a JWT this server can read (parts, base64url, JSON, claim types); says what.
    case malformed(String)
    /// The header's `alg` is not `HS256` (`none` included).
    case unsupportedAlgorithm(String)
    /// The signature does not match: another secret signed it, or the token was altered.
    case badSignature
    /// `exp` has passed.
    case expired(at: Date)
    /// The token is for another app.
    case wrongApp(issuedFor: String, expected: String)
    /// A required claim is absent.
    case missingClaim(String)
    /// `iat` is later than the verifier's clock allows (``ClientToken/maxClockSkew`` ahead).
    case issuedInFuture(at: Date)
    /// `exp` − `iat` is longer than the longest lifetime minting allows (``ClientToken/maxLifetime``),
    /// or `exp` is not after `iat`: whoever signed it, Herald would not have.
    case lifetimeOutOfRange(seconds: Int64)

    public var description: String {
        switch self {
        case .malformed(let why): return "malformed client token: \(why)"
        case .unsupportedAlgorithm(let alg):
            return "client token algorithm \"\(alg)\" is not accepted; Herald signs and accepts only HS256"
        case .badSignature:
            return "bad signature: the client token was not signed with this app's clientSecret, or was altered; mint a new one"
        case .expired(let at): return "client token expired at \(at.iso8601); mint a new one"
        case .wrongApp(let issued, let expected):
            return "client token was issued for app \(issued), not \(expected)"
        case .missingClaim(let name): return "client token has no \"\(name)\" claim"
        case .issuedInFuture(let at):
            return "client token is issued at \(at.iso8601), more than \(Int(ClientToken.maxClockSkew)) s ahead of this server's clock; "
                + "check the minting clock and mint a new one"
        case .lifetimeOutOfRange(let seconds):
            return "client token lifetime (exp - iat) is \(seconds) s; it must be between 1 s and \(Int(ClientToken.maxLifetime)) s "
                + "(\(Int(ClientToken.maxLifetime / 86_400)) days); mint a new one"
        }
    }
}

/// Client tokens: HS256 JWTs (RFC 7519) that let an app's client open its live stream.
///
/// Header `{"alg":"HS256","typ":"JWT"}`, claims `{"sub","app","device","iat","exp"}` (times in
/// whole seconds), signed with HMAC-SHA256 under the app's `clientSecret`, base64url without
/// padding. ``verify(_:secret:app:now:)`` accepts only that: `alg` other than `HS256` (`none`
/// included) is refused before anything else is trusted, and the signature is compared in
/// constant time.
public enum ClientToken {
    /// The longest token ``verify(_:secret:app:now:)`` reads (bytes).
    public static let maxLength = 4096
    /// How far ahead of the verifier's clock a token's `iat` may be (seconds): clocks of the
    /// minting backend and Herald may differ a little, a token from the future is forged.
    public static let maxClockSkew: TimeInterval = 60

    private static let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    /// A signed token for `claims`.
    /// - Parameter secret: the app's `clientSecret` (at least 32 bytes; the configuration checks that).
    public static func sign(_ claims: ClientTokenClaims, secret: Secret) -> String {
        var w = JSONWriter(capacity: 192)
        w.object { o in
            o.string("sub", claims.user)
            o.string("app", claims.app)
            o.string("device", claims.device)
            o.int64("iat", seconds(claims.issuedAt))
            o.int64("exp", seconds(claims.expiresAt))
        }
        let signingInput = header + "." + Base64URL.encode(w.bytes)
        return signingInput + "." + Base64URL.encode(HMACSHA256.mac(key: Array(secret.value.utf8), message: Array(signingInput.utf8)))
    }

    /// Checks a token and returns its claims.
    ///
    /// Order: structure and `alg`, then the signature (a token whose signature fails but whose
    /// `app` claim names another app is reported as ``ClientTokenError/wrongApp(issuedFor:expected:)``,
    /// the more useful reason), then the claims, `app`, `iat` (at most ``maxClockSkew`` ahead of
    /// `now`), `exp`, and the lifetime `exp` − `iat` (1 s to ``maxLifetime``, as minting allows,
    /// whoever signed it).
    /// - Parameters:
    ///   - secret: the `clientSecret` of `app`.
    ///   - app: the app the stream is for; the token's `app` claim must equal it.
    ///   - now: the current time (injected; `exp` must be after it).
    public static func verify(_ token: String, secret: Secret, app: String, now: Date) throws(ClientTokenError) -> ClientTokenClaims {
        guard token.utf8.count <= maxLength else { throw .malformed("longer than \(maxLength) bytes") }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected three base64url parts separated by dots, found \(parts.count)") }
        let headerObject = try jsonObject(parts[0], part: "header")
        guard let alg = headerObject["alg"] else { throw .malformed("the header has no \"alg\"") }
        guard case .string(let algorithm) = alg else { throw .unsupportedAlgorithm(alg.jsonString) }
        guard algorithm == "HS256" else { throw .unsupportedAlgorithm(algorithm) }
        if let typ = headerObject["typ"], typ != .string("JWT") { throw .malformed("the header's \"typ\" must be \"JWT\"") }
        if headerObject["crit"] != nil { throw .malformed("the header lists critical extensions (\"crit\"), which Herald does not support") }
        let payload = try jsonObject(parts[1], part: "payload")

        guard let signature = Base64URL.decode(Substring(parts[2])), signature.count == 32,
              Base64URL.encode(signature).utf8.elementsEqual(parts[2]) else {
            throw .malformed("the signature is not 32 bytes of unpadded base64url")
        }
        let signingInput = Array(token.utf8[parts[0].startIndex..<parts[1].endIndex])
        let expected = HMACSHA256.mac(key: Array(secret.value.utf8), message: signingInput)
        guard HMACSHA256.constantTimeEquals(expected, signature) else {
            if case .string(let other) = payload["app"], other != app { throw .wrongApp(issuedFor: other, expected: app) }
            throw .badSignature
        }

        let user = try stringClaim(payload, "sub")
        let claimedApp = try stringClaim(payload, "app")
        let rawDevice = try stringClaim(payload, "device")
        let issuedAt = try secondsClaim(payload, "iat")
        let expiresAt = try secondsClaim(payload, "exp")
        guard claimedApp == app else { throw .wrongApp(issuedFor: claimedApp, expected: app) }
        guard issuedAt.timeIntervalSince(now) <= maxClockSkew else { throw .issuedInFuture(at: issuedAt) }
        guard now < expiresAt else { throw .expired(at: expiresAt) }
        let lifetime = expiresAt.timeIntervalSince(issuedAt)
        guard lifetime >= 1, lifetime <= maxLifetime else { throw .lifetimeOutOfRange(seconds: Int64(lifetime)) }
        if let problem = FieldLimits.userProblem(user) { throw .malformed("claim \"sub\": \(problem)") }
        let device: String
        do { device = try DeviceToken.normalize(rawDevice) } catch { throw .malformed("claim \"device\": \(error)") }
        return ClientTokenClaims(user: user, app: claimedApp, device: device, issuedAt: issuedAt, expiresAt: expiresAt)
    }

    // MARK: Parts

    /// 9999-12-31T23:59:59Z: the latest time a claim may name (keeps the arithmetic exact).
    private static let latestSeconds = 253_402_300_799

    private static func seconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }

    private static func jsonObject(_ part: Substring.UTF8View.SubSequence, part name: String) throws(ClientTokenError) -> [String: JSONValue] {
        guard let bytes = Base64URL.decode(Substring(part)), !part.contains(UInt8(ascii: "=")) else {
            throw .malformed("the \(name) is not unpadded base64url")
        }
        guard let value = try? JSONValue.parse(bytes), case .object(let object) = value else {
            throw .malformed("the \(name) is not a JSON object")
        }
        return object
    }

    private static func stringClaim(_ payload: [String: JSONValue], _ name: String) throws(ClientTokenError) -> String {
        guard let value = payload[name], value != .null else { throw .missingClaim(name) }
        guard case .string(let s) = value, !s.isEmpty else { throw .malformed("claim \"\(name)\" must be a non-empty string") }
        return s
    }

    private static func secondsClaim(_ payload: [String: JSONValue], _ name: String) throws(ClientTokenError) -> Date {
        guard let value = payload[name], value != .null else { throw .missingClaim(name) }
        guard let n = value.intValue, n >= 0, n <= latestSeconds else {
            throw .malformed("claim \"\(name)\" must be a whole number of seconds since 1970, before the year 10000")
        }
        return Date(timeIntervalSince1970: TimeInterval(n))
    }
}

/// HMAC-SHA256 (RFC 2104) through OpenSSL.
public enum HMACSHA256 {
    /// The 32-byte MAC of `message` under `key`.
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        ensureOpenSSL()
        let keyBytes = key.isEmpty ? [0] : key  // a NULL key pointer means "reuse the last key" to OpenSSL
        return [UInt8](unsafeUninitializedCapacity: 32) { output, count in
            var length: UInt32 = 0
            let result = keyBytes.withUnsafeBytes { k in
                message.withUnsafeBufferPointer { m in
                    HMAC(sha256Digest, k.baseAddress, Int32(key.count), m.baseAddress, m.count, output.baseAddress, &length)
                }
            }
            precondition(result != nil && length == 32, "HMAC-SHA256 is unavailable in this OpenSSL")
            count = 32
        }
    }

    /// Whether `a` and `b` are equal, in time that depends only on their lengths (`CRYPTO_memcmp`).
    public static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
    }
}
