import FoundationEssentials
import Glibc
import HeraldCore

/// APNs provider authentication tokens: JWTs signed with ES256.
///
/// Header `{"alg":"ES256","kid":KEYID}`, claims `{"iss":TEAMID,"iat":SECONDS}` with `iat` a JSON
/// integer. APNs refuses tokens older than an hour and throttles tokens refreshed more often than
/// every 20 minutes, so callers cache one token and renew it in between.
public enum ProviderToken {
    /// Makes a signed token.
    /// - Parameters:
    ///   - keyID: the 10-character key id of the `.p8` key (`kid`).
    ///   - teamID: the 10-character Apple Developer team id (`iss`).
    ///   - issuedAt: the issue time (`iat`), truncated to whole seconds.
    public static func make(keyID: String, teamID: String, issuedAt: Date, key: ES256SigningKey) throws(CryptoError) -> String {
        let claims: JWTClaims = ["iss": .string(teamID), "iat": JWTClaims.seconds(issuedAt)]
        return try JWT.sign(claims, key: key, keyID: keyID, type: nil)
    }

    /// The parts of a JWT, decoded but not verified.
    public struct Parsed: Sendable {
        /// Header `kid`.
        public var keyID: String?
        /// Header `alg` (APNs accepts only "ES256").
        public var algorithm: String?
        /// Claim `iss` (the team id).
        public var issuer: String?
        /// Claim `iat`.
        public var issuedAt: Date?
        /// Whether `iat` was written as a JSON integer, as APNs expects.
        public var issuedAtIsInteger: Bool
        /// The bytes the signature covers: `base64url(header) "." base64url(claims)`.
        public var signingInput: [UInt8]
        /// The decoded signature (64 bytes raw `R || S` for a well-formed ES256 token).
        public var signature: [UInt8]

        /// Whether the signature is a valid ES256 signature by `key`.
        public func verify(with key: ES256VerifyingKey) -> Bool {
            key.verify(signature: signature, message: signingInput)
        }
    }

    /// Splits and decodes a JWT without checking its signature.
    ///
    /// Use ``Parsed/verify(with:)`` to check it. Parsing costs a few microseconds: a server that
    /// sees the same token on many requests should cache the outcome by token string.
    /// - Returns: nil unless the text is three base64url parts whose first two are JSON objects.
    public static func parse(_ jwt: String) -> Parsed? {
        let parts = jwt.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = Base64URL.decode(Substring(parts[0])),
              let claimsBytes = Base64URL.decode(Substring(parts[1])),
              let signature = Base64URL.decode(Substring(parts[2])),
              let header = jsonObject(headerBytes),
              let claims = jsonObject(claimsBytes) else { return nil }
        let issuedAt = claims["iat"]?.doubleValue
        let signingInput = Array(jwt.utf8[parts[0].startIndex..<parts[1].endIndex])
        return Parsed(keyID: header["kid"]?.stringValue, algorithm: header["alg"]?.stringValue,
                      issuer: claims["iss"]?.stringValue,
                      issuedAt: issuedAt.map(Date.init(timeIntervalSince1970:)),
                      issuedAtIsInteger: claims["iat"]?.intValue != nil,
                      signingInput: signingInput, signature: signature)
    }

    private static func jsonObject(_ bytes: [UInt8]) -> [String: JSONValue]? {
        (try? JSONValue.parse(bytes))?.objectValue
    }
}
