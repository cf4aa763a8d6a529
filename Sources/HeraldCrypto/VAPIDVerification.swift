import FoundationEssentials
import HeraldCore

/// Why a push service (the Web Push simulator) refuses a VAPID `Authorization` header.
/// The ``description`` names the reason; it never contains the token.
public enum VAPIDVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The header is not `vapid t=…, k=…`; says what.
    case malformedHeader(String)
    /// `k` is not the base64url of a 65-byte uncompressed P-256 point.
    case invalidPublicKey
    /// The JWT is malformed, not ES256, or its signature does not match `k`.
    case token(JWTError)
    /// A required claim (`aud`, `exp`) is absent.
    case missingClaim(String)
    /// A claim has the wrong type or form; says which and why.
    case invalidClaim(String)
    /// `exp` has passed.
    case expired(at: Date)
    /// `exp` is further in the future than push services allow (24 hours).
    case expiresTooLate(at: Date, limit: Date)
    /// `aud` is not the origin of the endpoint the request went to.
    case wrongAudience(found: String, expected: String)

    public var description: String {
        switch self {
        case .malformedHeader(let why): return "malformed VAPID Authorization header: \(why)"
        case .invalidPublicKey: return "the VAPID k parameter is not a base64url 65-byte uncompressed P-256 public key"
        case .token(let error): return "VAPID token: \(error)"
        case .missingClaim(let name): return "the VAPID token has no \"\(name)\" claim"
        case .invalidClaim(let why): return "VAPID token claim \(why)"
        case .expired(let at): return "the VAPID token expired at \(at.iso8601)"
        case .expiresTooLate(let at, let limit):
            return "the VAPID token's exp \(at.iso8601) is more than 24 hours ahead (limit \(limit.iso8601))"
        case .wrongAudience(let found, let expected):
            return "the VAPID token's aud is \"\(found)\", not this push service's origin \"\(expected)\""
        }
    }
}

/// What a verified VAPID header says: the signer's key and the token's claims.
public struct VAPIDCredentials: Sendable, Equatable {
    /// `k`: the application server's public key (the signature was checked with it).
    public var publicKey: P256PublicKey
    /// The JWT (`t`).
    public var jwt: String
    /// Claim `aud`.
    public var audience: String
    /// Claim `exp`.
    public var expiresAt: Date
    /// Claim `sub`, when present (Apple's service requires it; RFC 8292 says SHOULD).
    public var subject: String?

    /// Checks the claims the way a push service does.
    /// - Parameters:
    ///   - expectedAudience: this service's origin (``VAPIDSigner/audience(of:)`` of the endpoint).
    ///   - now: the current time; `exp` must be after it and at most 24 hours ahead.
    public func check(expectedAudience: String, now: Date) throws(VAPIDVerificationError) {
        guard audience == expectedAudience else { throw .wrongAudience(found: audience, expected: expectedAudience) }
        guard now < expiresAt else { throw .expired(at: expiresAt) }
        let limit = now.addingTimeInterval(VAPIDSigner.maxLifetime)
        guard expiresAt <= limit else { throw .expiresTooLate(at: expiresAt, limit: limit) }
    }
}

extension VAPIDSigner {
    /// Parses an `Authorization: vapid t=<JWT>, k=<key>` value and checks the JWT's ES256
    /// signature with `k` (RFC 8292 §3).
    ///
    /// The scheme and parameter names are case-insensitive, values may be quoted, the order of
    /// `t` and `k` is free. Claims are returned for ``VAPIDCredentials/check(expectedAudience:now:)``.
    public static func verify(authorization: String) throws(VAPIDVerificationError) -> VAPIDCredentials {
        let parameters = try parseAuthorization(authorization)
        guard let t = parameters["t"] else { throw .malformedHeader("no t= parameter (the JWT)") }
        guard let k = parameters["k"] else { throw .malformedHeader("no k= parameter (the public key)") }
        let key: P256PublicKey
        do { key = try P256PublicKey(base64URL: k) } catch { throw .invalidPublicKey }
        let decoded: JWT.Decoded
        do { decoded = try JWT.verify(t, key: key.verifyingKey) } catch { throw .token(error) }
        let claims = decoded.claims
        guard let aud = claims["aud"], aud != .null else { throw .missingClaim("aud") }
        guard let audience = aud.stringValue, !audience.isEmpty else { throw .invalidClaim("\"aud\" must be a non-empty string (an origin)") }
        guard let exp = claims["exp"], exp != .null else { throw .missingClaim("exp") }
        guard let seconds = exp.intValue else { throw .invalidClaim("\"exp\" must be a whole number of seconds since 1970") }
        var subject: String?
        if let sub = claims["sub"], sub != .null {
            guard let text = sub.stringValue else { throw .invalidClaim("\"sub\" must be a string") }
            subject = text
        }
        return VAPIDCredentials(publicKey: key, jwt: t, audience: audience,
                                expiresAt: Date(timeIntervalSince1970: TimeInterval(seconds)), subject: subject)
    }

    /// `vapid a=1, b="2"` → ["a": "1", "b": "2"] (names lower-cased).
    private static func parseAuthorization(_ value: String) throws(VAPIDVerificationError) -> [String: String] {
        let text = value.trimmingWhitespace
        let schemeEnd = text.firstIndex { $0 == " " || $0 == "\t" } ?? text.endIndex
        let scheme = text[..<schemeEnd].lowercased()
        guard scheme == "vapid" else {
            if scheme == "webpush" {
                throw .malformedHeader("the WebPush scheme of the VAPID drafts (with Crypto-Key) is not supported; send vapid t=…, k=…")
            }
            throw .malformedHeader("the scheme is \"\(text[..<schemeEnd])\", not vapid")
        }
        var parameters: [String: String] = [:]
        var rest = text[schemeEnd...]
        while true {
            rest = rest.drop { $0 == " " || $0 == "\t" }
            if rest.isEmpty { break }
            guard let equals = rest.firstIndex(of: "=") else { throw .malformedHeader("parameter without =") }
            let name = rest[..<equals].trimmingCharacters(" \t").lowercased()
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw .malformedHeader("bad parameter name")
            }
            rest = rest[rest.index(after: equals)...].drop { $0 == " " || $0 == "\t" }
            var parameterValue: String
            if rest.first == "\"" {
                rest = rest.dropFirst()
                guard let close = rest.firstIndex(of: "\"") else { throw .malformedHeader("parameter \(name) has no closing quote") }
                parameterValue = String(rest[..<close])
                rest = rest[rest.index(after: close)...]
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                parameterValue = String(rest[..<end].trimmingCharacters(" \t"))
                rest = rest[end...]
            }
            guard parameters[name] == nil else { throw .malformedHeader("parameter \(name) appears twice") }
            guard !parameterValue.isEmpty else { throw .malformedHeader("parameter \(name) is empty") }
            parameters[name] = parameterValue
            rest = rest.drop { $0 == " " || $0 == "\t" }
            if rest.isEmpty { break }
            guard rest.first == "," else { throw .malformedHeader("parameters must be separated by commas") }
            rest = rest.dropFirst()
        }
        return parameters
    }
}

extension Substring {
    /// The text without leading and trailing characters of `set`.
    fileprivate func trimmingCharacters(_ set: String) -> Substring {
        var s = self
        while let first = s.first, set.contains(first) { s = s.dropFirst() }
        while let last = s.last, set.contains(last) { s = s.dropLast() }
        return s
    }
}
