import FoundationEssentials
import HeraldCore

/// A VAPID setting or endpoint that cannot be used; the ``description`` says what and how to fix it.
public enum VAPIDError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `subject` (`sub`) is not a `mailto:` address or an `https:` URL a push service accepts; says why.
    case invalidSubject(String)
    /// The token lifetime is outside what push services accept; says why.
    case invalidLifetime(String)
    /// The push endpoint is not an absolute `https:` (or `http:`) URL with a host; says why.
    case invalidEndpoint(String)
    /// Signing the JWT failed (an OpenSSL failure); carries its message.
    case signingFailed(String)

    public var description: String {
        switch self {
        case .invalidSubject(let why): return "VAPID subject: \(why)"
        case .invalidLifetime(let why): return "VAPID token lifetime: \(why)"
        case .invalidEndpoint(let why): return "push endpoint: \(why)"
        case .signingFailed(let message): return "VAPID signing failed: \(message)"
        }
    }
}

/// VAPID (RFC 8292): the `Authorization: vapid t=<JWT>, k=<public key>` header that identifies
/// an application server to a push service.
///
/// The JWT is ES256 with claims `aud` (the endpoint's origin), `exp` (``lifetime`` from now,
/// whole seconds) and `sub` (the ``subject``). One token is cached per origin and renewed
/// ``renewalMargin`` before it expires, reading time from the injected clock, so tests renew it
/// without sleeping. Safe to share between threads.
public final class VAPIDSigner: Sendable {
    /// The default token lifetime: 12 hours.
    public static let defaultLifetime: TimeInterval = 12 * 3600
    /// The longest lifetime push services accept: 24 hours (RFC 8292 §2).
    public static let maxLifetime: TimeInterval = 24 * 3600
    /// The shortest lifetime accepted here: 10 minutes.
    public static let minimumLifetime: TimeInterval = 10 * 60
    /// How many origins keep a cached token (push services are few; this bounds a hostile list).
    public static let maxCachedOrigins = 1024

    /// One signed token for one origin.
    public struct Token: Sendable, Equatable {
        /// The JWT (`t`).
        public var jwt: String
        /// Claim `aud`: the origin it is for.
        public var audience: String
        /// When it was made (the clock's reading).
        public var issuedAt: Date
        /// Claim `exp`.
        public var expiresAt: Date
        /// The whole header value: `vapid t=<jwt>, k=<public key>`.
        public var authorization: String
    }

    /// Claim `sub`.
    public let subject: String
    /// How long each token is valid.
    public let lifetime: TimeInterval
    /// The public key, the `k` of the header and the `applicationServerKey` browsers subscribe with.
    public let publicKey: P256PublicKey
    /// ``publicKey`` as unpadded base64url.
    public var publicKeyBase64URL: String { publicKey.base64URL }
    /// How long before `exp` a cached token is replaced: a tenth of the lifetime, at most an hour.
    public var renewalMargin: TimeInterval { min(3600, lifetime / 10) }

    private let signingKey: ES256SigningKey
    private let clock: any WallClock
    private let cache = Locked<[String: Token]>([:])

    /// A signer for `privateKey`.
    /// - Parameters:
    ///   - subject: `mailto:` address or `https:` URL; checked with ``validateSubject(_:)``.
    ///   - lifetime: ``minimumLifetime`` to ``maxLifetime``.
    ///   - clock: where `exp` and renewal read the time.
    public init(privateKey: P256PrivateKey, subject: String, lifetime: TimeInterval = VAPIDSigner.defaultLifetime,
                clock: any WallClock = SystemClock()) throws(VAPIDError) {
        try VAPIDSigner.validateSubject(subject)
        guard lifetime.isFinite, lifetime >= Self.minimumLifetime, lifetime <= Self.maxLifetime else {
            throw .invalidLifetime("must be between \(Int(Self.minimumLifetime)) and \(Int(Self.maxLifetime)) seconds (24 hours), found \(lifetime)")
        }
        self.subject = subject
        self.lifetime = lifetime.rounded(.down)
        self.publicKey = privateKey.publicKey
        self.signingKey = privateKey.signingKey
        self.clock = clock
    }

    /// The `Authorization` header value for a request to `endpoint`.
    public func authorization(for endpoint: String) throws(VAPIDError) -> String {
        try token(for: endpoint).authorization
    }

    /// The token for `endpoint`'s origin: the cached one, or a new one when none is cached, it is
    /// within ``renewalMargin`` of `exp`, or the clock went back past its issue time.
    public func token(for endpoint: String) throws(VAPIDError) -> Token {
        let audience = try Self.audience(of: endpoint)
        let now = clock.now
        return try cache.withLock { (tokens: inout [String: Token]) throws(VAPIDError) -> Token in
            if let token = tokens[audience], !isDue(token, now: now) { return token }
            let token = try make(audience: audience, now: now)
            if tokens[audience] == nil, tokens.count >= Self.maxCachedOrigins {
                tokens = tokens.filter { !isDue($0.value, now: now) }
                if tokens.count >= Self.maxCachedOrigins, let soonest = tokens.min(by: { $0.value.expiresAt < $1.value.expiresAt }) {
                    tokens[soonest.key] = nil
                }
            }
            tokens[audience] = token
            return token
        }
    }

    /// How many origins have a cached token.
    public var cachedOrigins: Int { cache.withLock { $0.count } }

    private func isDue(_ token: Token, now: Date) -> Bool {
        now >= token.expiresAt.addingTimeInterval(-renewalMargin) || now < token.issuedAt
    }

    private func make(audience: String, now: Date) throws(VAPIDError) -> Token {
        let expiresAt = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + lifetime).rounded(.down))
        let claims: JWTClaims = ["aud": .string(audience), "exp": JWTClaims.seconds(expiresAt), "sub": .string(subject)]
        let jwt: String
        do {
            jwt = try JWT.sign(claims, key: signingKey)
        } catch {
            throw .signingFailed(error.message)
        }
        return Token(jwt: jwt, audience: audience, issuedAt: now, expiresAt: expiresAt,
                     authorization: "vapid t=\(jwt), k=\(publicKey.base64URL)")
    }

    // MARK: Checks

    /// Checks a VAPID subject as push services do: `mailto:` with a plausible address (no
    /// spaces, a dotted domain, not `localhost`), or an `https:` URL with a host other than
    /// `localhost`. `herald check` calls this for the configuration.
    /// - Throws: ``VAPIDError/invalidSubject(_:)`` saying what is wrong.
    public static func validateSubject(_ subject: String) throws(VAPIDError) {
        let example = "use mailto:you@example.com or an https: URL of your site"
        guard !subject.isEmpty else { throw .invalidSubject("is empty; \(example)") }
        guard !subject.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .invalidSubject("\"\(subject)\" contains spaces or control characters; \(example)")
        }
        let lower = subject.lowercased()
        if lower.hasPrefix("mailto:") {
            let address = subject.dropFirst("mailto:".count)
            let parts = address.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw .invalidSubject("\"\(subject)\" is not mailto: followed by one address such as you@example.com")
            }
            guard !parts[0].contains(where: { "<>()[],;:\\\"?".contains($0) }) else {
                throw .invalidSubject("\"\(subject)\" has characters an address cannot hold before the @")
            }
            let domain = String(parts[1])
            if let why = hostProblem(domain, requireDot: true) {
                throw .invalidSubject("\"\(subject)\": the domain \(why); \(example)")
            }
        } else if lower.hasPrefix("https:") {
            guard lower.hasPrefix("https://") else {
                throw .invalidSubject("\"\(subject)\" is not an https:// URL; \(example)")
            }
            let rest = subject.dropFirst("https://".count)
            let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
            guard !authority.contains("@") else {
                throw .invalidSubject("\"\(subject)\" has user information before the host; \(example)")
            }
            let host = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            if let why = hostProblem(host, requireDot: false) {
                throw .invalidSubject("\"\(subject)\": the host \(why); \(example)")
            }
        } else {
            throw .invalidSubject("\"\(subject)\" must start with mailto: or https: (push services refuse anything else); \(example)")
        }
    }

    /// Why `host` is not a usable public host name, or nil when it is.
    private static func hostProblem(_ host: String, requireDot: Bool) -> String? {
        let lower = host.lowercased()
        guard !lower.isEmpty else { return "is empty" }
        if lower == "localhost" || lower.hasSuffix(".localhost") || lower == "localhost." {
            return "is localhost, which push services refuse"
        }
        let allowed = lower.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "." || $0.value > 0x7F
        }
        guard allowed else { return "\"\(host)\" has characters a host name cannot hold" }
        let labels = lower.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.contains(where: \.isEmpty) else { return "\"\(host)\" has an empty label" }
        if requireDot, labels.count < 2 { return "\"\(host)\" has no dot (expected a domain such as example.com)" }
        return nil
    }

    /// The origin of a push endpoint, the JWT's `aud`: `scheme://host[:port]`, lower-case, the
    /// port left out when it is the scheme's default (RFC 6454).
    /// - Throws: ``VAPIDError/invalidEndpoint(_:)`` unless `endpoint` is an absolute `https:` or
    ///   `http:` URL with a host and no user information.
    public static func audience(of endpoint: String) throws(VAPIDError) -> String {
        guard let separator = endpoint.firstRange(of: "://") else {
            throw .invalidEndpoint("\"\(endpoint)\" is not an absolute URL (scheme://host/path)")
        }
        let scheme = endpoint[..<separator.lowerBound].lowercased()
        let defaultPort: Int
        switch scheme {
        case "https": defaultPort = 443
        case "http": defaultPort = 80
        default: throw .invalidEndpoint("\"\(endpoint)\" is not an https: URL (push endpoints are https)")
        }
        let rest = endpoint[separator.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.contains("@") else { throw .invalidEndpoint("\"\(endpoint)\" has user information before the host") }
        guard !authority.contains(where: { $0.isWhitespace }) else { throw .invalidEndpoint("\"\(endpoint)\" has spaces in its host") }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else {
                throw .invalidEndpoint("\"\(endpoint)\" has an IPv6 address without its closing ]")
            }
            host = authority[...close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .invalidEndpoint("\"\(endpoint)\" has text after its IPv6 address") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw .invalidEndpoint("\"\(endpoint)\" has no host") }
        var origin = scheme + "://" + host.lowercased()
        if let portText, !portText.isEmpty {
            guard portText.allSatisfy(\.isASCII), portText.allSatisfy(\.isNumber), let port = Int(portText), (1...65535).contains(port) else {
                throw .invalidEndpoint("\"\(endpoint)\" has port \"\(portText)\", not a number from 1 to 65535")
            }
            if port != defaultPort { origin += ":\(port)" }
        }
        return origin
    }
}
