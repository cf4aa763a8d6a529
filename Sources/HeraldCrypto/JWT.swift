import FoundationEssentials
import HeraldCore

/// The JWS algorithms Herald signs and verifies (RFC 7518 §3.1 names).
public enum JWTAlgorithm: String, Sendable, Hashable, CaseIterable {
    /// ECDSA P-256 with SHA-256; the signature is the raw 64-byte `R || S` (APNs, VAPID).
    case es256 = "ES256"
    /// RSASSA-PKCS1-v1_5 with SHA-256 (Google's OAuth JWT-bearer flow for FCM).
    case rs256 = "RS256"
}

/// A key that signs JWTs: ``ES256SigningKey`` and ``RS256SigningKey``.
public protocol JWTSigningKey: Sendable {
    /// The header `alg` this key signs with.
    var jwtAlgorithm: JWTAlgorithm { get }
    /// The JWS signature of `message` (the signing input), in the algorithm's JWS form.
    func sign(_ message: some Collection<UInt8>) throws(CryptoError) -> [UInt8]
}

/// A key that checks JWT signatures: ``ES256VerifyingKey`` and ``RS256VerifyingKey``.
public protocol JWTVerifyingKey: Sendable {
    /// The header `alg` this key accepts; a token naming another is refused before its signature is checked.
    var jwtAlgorithm: JWTAlgorithm { get }
    /// Whether `signature` is a valid signature of `message`; anything malformed is `false`.
    func verify(signature: some Collection<UInt8>, message: some Collection<UInt8>) -> Bool
}

extension ES256SigningKey: JWTSigningKey {
    /// ``JWTAlgorithm/es256``.
    public var jwtAlgorithm: JWTAlgorithm { .es256 }
}

extension ES256VerifyingKey: JWTVerifyingKey {
    /// ``JWTAlgorithm/es256``.
    public var jwtAlgorithm: JWTAlgorithm { .es256 }
}

extension RS256SigningKey: JWTSigningKey {
    /// ``JWTAlgorithm/rs256``.
    public var jwtAlgorithm: JWTAlgorithm { .rs256 }
}

extension RS256VerifyingKey: JWTVerifyingKey {
    /// ``JWTAlgorithm/rs256``.
    public var jwtAlgorithm: JWTAlgorithm { .rs256 }
}

/// A JSON object whose members keep the order they were given in, for JWT claims.
///
/// Written as a dictionary literal, `["iss": "a@b", "iat": 1700000000]`, members appear in the
/// token in that order. Setting a member that exists replaces it in place. Values nested inside
/// are ``JSONValue``s (their own object keys are written sorted).
public struct JWTClaims: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// One member.
    public struct Member: Sendable, Equatable {
        /// The member's name.
        public var name: String
        /// The member's value.
        public var value: JSONValue
    }

    /// The members, in order.
    public private(set) var members: [Member]

    /// Members in the literal's order; a repeated name keeps its first position and last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        members = []
        for (name, value) in elements { self[name] = value }
    }

    /// No members.
    public init() { members = [] }

    /// The value of member `name`; setting nil removes it.
    public subscript(name: String) -> JSONValue? {
        get { members.first { $0.name == name }?.value }
        set {
            if let index = members.firstIndex(where: { $0.name == name }) {
                if let newValue { members[index].value = newValue } else { members.remove(at: index) }
            } else if let newValue {
                members.append(Member(name: name, value: newValue))
            }
        }
    }

    /// The object as compact JSON, members in order.
    public var json: [UInt8] {
        var w = JSONWriter(capacity: 64 + members.count * 32)
        w.raw(UInt8(ascii: "{"))
        for (i, member) in members.enumerated() {
            if i > 0 { w.raw(UInt8(ascii: ",")) }
            w.string(member.name)
            w.raw(UInt8(ascii: ":"))
            w.write(member.value)
        }
        w.raw(UInt8(ascii: "}"))
        return w.bytes
    }

    /// Whole seconds since 1970 (truncated), as JWT `iat` and `exp` are written.
    public static func seconds(_ date: Date) -> JSONValue {
        .number(date.timeIntervalSince1970.rounded(.down))
    }
}

/// Why a JWT was refused. The ``description`` names the reason and never includes the token.
public enum JWTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a compact JWS this code reads (parts, base64url, JSON, header fields); says what.
    case malformed(String)
    /// The header's `alg` is not the one the key verifies (`none` included); carries the `alg` found.
    case unsupportedAlgorithm(found: String, expected: JWTAlgorithm)
    /// The signature does not match: another key signed it, or the token was altered.
    case badSignature

    public var description: String {
        switch self {
        case .malformed(let why): return "malformed JWT: \(why)"
        case .unsupportedAlgorithm(let found, let expected):
            return "JWT algorithm \"\(found)\" is not accepted here; expected \(expected.rawValue)"
        case .badSignature: return "bad JWT signature: the token was signed with another key, or altered"
        }
    }
}

/// Compact JWS tokens (RFC 7515 §7.1, RFC 7519): `base64url(header).base64url(claims).base64url(signature)`.
///
/// The header is `{"alg":…,"typ":"JWT"}` plus `kid` when given; the claims are the caller's
/// ``JWTClaims`` in their order. ES256 signatures are the raw 64-byte `R || S` (RFC 7518 §3.4),
/// not DER. Used for Google's OAuth assertion (RS256), VAPID (ES256) and APNs provider tokens.
public enum JWT {
    /// The longest token ``decode(_:)`` reads (bytes).
    public static let maxLength = 8192

    /// A signed token.
    /// - Parameters:
    ///   - claims: the claims, written in their order.
    ///   - key: the signing key; its ``JWTSigningKey/jwtAlgorithm`` is the header's `alg`.
    ///   - keyID: header `kid`, when the verifier needs one (a service account's `private_key_id`).
    ///   - type: header `typ`; nil leaves it out (APNs provider tokens have none).
    public static func sign(_ claims: JWTClaims, key: some JWTSigningKey, keyID: String? = nil,
                            type: String? = "JWT") throws(CryptoError) -> String {
        var header = JSONWriter(capacity: 64)
        header.object { o in
            o.string("alg", key.jwtAlgorithm.rawValue)
            o.string("typ", type)
            o.string("kid", keyID)
        }
        let signingInput = Base64URL.encode(header.bytes) + "." + Base64URL.encode(claims.json)
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// A token split and decoded, its signature not yet checked (``verify(with:)`` checks it).
    public struct Decoded: Sendable {
        /// The header object (`alg`, `typ`, `kid`…).
        public var header: [String: JSONValue]
        /// The claims object.
        public var claims: [String: JSONValue]
        /// Header `alg`, when it is a string.
        public var algorithm: String? { header["alg"]?.stringValue }
        /// Header `kid`, when it is a string.
        public var keyID: String? { header["kid"]?.stringValue }
        /// The bytes the signature covers: `base64url(header) "." base64url(claims)`.
        public var signingInput: [UInt8]
        /// The decoded signature.
        public var signature: [UInt8]

        /// Checks `alg` against `key`, then the signature.
        /// - Throws: ``JWTError/unsupportedAlgorithm(found:expected:)`` or ``JWTError/badSignature``.
        public func verify(with key: some JWTVerifyingKey) throws(JWTError) {
            guard let algorithm else { throw .malformed("the header's \"alg\" is missing or not a string") }
            guard algorithm == key.jwtAlgorithm.rawValue else {
                throw .unsupportedAlgorithm(found: algorithm, expected: key.jwtAlgorithm)
            }
            guard key.verify(signature: signature, message: signingInput) else { throw .badSignature }
        }
    }

    /// Splits and decodes a compact token without checking its signature.
    ///
    /// Strict: exactly three parts of unpadded base64url, header and claims JSON objects (no
    /// duplicate keys), `typ` absent or "JWT" (any case), no `crit`.
    public static func decode(_ token: String) throws(JWTError) -> Decoded {
        guard token.utf8.count <= maxLength else { throw .malformed("longer than \(maxLength) bytes") }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw .malformed("expected three base64url parts separated by dots, found \(parts.count)")
        }
        let header = try object(parts[0], name: "header")
        let claims = try object(parts[1], name: "claims")
        if let typ = header["typ"] {
            guard let text = typ.stringValue, text.uppercased() == "JWT" else {
                throw .malformed("the header's \"typ\" must be \"JWT\", found \(typ.jsonString)")
            }
        }
        if header["crit"] != nil {
            throw .malformed("the header lists critical extensions (\"crit\"), which are not supported")
        }
        guard let signature = unpadded(parts[2]) else { throw .malformed("the signature is not unpadded base64url") }
        return Decoded(header: header, claims: claims,
                       signingInput: Array(token.utf8[parts[0].startIndex..<parts[1].endIndex]), signature: signature)
    }

    /// Decodes `token` and checks its `alg` and signature against `key`.
    /// - Returns: the decoded header and claims; the caller checks the claims (`exp`, `aud`…).
    public static func verify(_ token: String, key: some JWTVerifyingKey) throws(JWTError) -> Decoded {
        let decoded = try decode(token)
        try decoded.verify(with: key)
        return decoded
    }

    private static func unpadded(_ part: Substring.UTF8View.SubSequence) -> [UInt8]? {
        guard !part.contains(UInt8(ascii: "=")) else { return nil }
        return Base64URL.decode(Substring(part))
    }

    private static func object(_ part: Substring.UTF8View.SubSequence, name: String) throws(JWTError) -> [String: JSONValue] {
        guard let bytes = unpadded(part) else { throw .malformed("the \(name) is not unpadded base64url") }
        guard let value = try? JSONValue.parse(bytes), case .object(let object) = value else {
            throw .malformed("the \(name) is not a JSON object")
        }
        return object
    }
}
