import Foundation
import HeraldCore
import HeraldCrypto
import HeraldTestKit
import Testing

@Suite struct JWTTests {
    /// The claims of Google's OAuth JWT-bearer assertion, in the order given.
    private let googleClaims: JWTClaims = [
        "iss": "herald@project.iam.gserviceaccount.com",
        "scope": "https://www.googleapis.com/auth/firebase.messaging",
        "aud": "https://oauth2.googleapis.com/token",
        "iat": 1_700_000_000,
        "exp": 1_700_003_600,
    ]

    private func parts(_ token: String) throws -> (header: String, claims: String, signature: [UInt8]) {
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(pieces.count == 3)
        return (String(decoding: try #require(Base64URL.decode(pieces[0])), as: UTF8.self),
                String(decoding: try #require(Base64URL.decode(pieces[1])), as: UTF8.self),
                try #require(Base64URL.decode(pieces[2])))
    }

    @Test func rs256TokenHasTheHeaderAndClaimsInOrder() async throws {
        let key = try await RS256SigningKey(pem: try RSAKeys.shared().pkcs8)
        let token = try JWT.sign(googleClaims, key: key, keyID: "0123abcd")
        #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"))
        let (header, claims, signature) = try parts(token)
        #expect(header == #"{"alg":"RS256","typ":"JWT","kid":"0123abcd"}"#)
        #expect(claims == #"{"iss":"herald@project.iam.gserviceaccount.com","scope":"https://www.googleapis.com/auth/firebase.messaging","aud":"https://oauth2.googleapis.com/token","iat":1700000000,"exp":1700003600}"#)
        #expect(signature.count == 256)
        // Foundation agrees these are JSON objects with integer times.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(claims.utf8)) as? [String: Any])
        #expect(object["exp"] as? Int == 1_700_003_600)

        let verified = try JWT.verify(token, key: key.verifyingKey)
        #expect(verified.algorithm == "RS256")
        #expect(verified.keyID == "0123abcd")
        #expect(verified.claims["iss"] == .string("herald@project.iam.gserviceaccount.com"))
        #expect(verified.claims["exp"]?.intValue == 1_700_003_600)
        #expect(verified.header["typ"] == .string("JWT"))
    }

    @Test func es256TokenCarriesARaw64ByteSignature() async throws {
        let key = try P256PrivateKey.generate()
        let token = try JWT.sign(["aud": "https://push.example.net", "exp": 1_800_000_000, "sub": "mailto:ops@example.com"],
                                 key: key.signingKey)
        let (header, claims, signature) = try parts(token)
        #expect(header == #"{"alg":"ES256","typ":"JWT"}"#)
        #expect(claims == #"{"aud":"https://push.example.net","exp":1800000000,"sub":"mailto:ops@example.com"}"#)
        #expect(signature.count == 64)
        let verified = try JWT.verify(token, key: key.publicKey.verifyingKey)
        #expect(verified.claims["sub"] == .string("mailto:ops@example.com"))
        #expect(verified.keyID == nil)

        // The same token checked with openssl: convert r||s to DER the independent way.
        let dir = try TemporaryDirectory(prefix: "herald-jwt")
        defer { dir.remove() }
        let signingInput = token.split(separator: ".").prefix(2).joined(separator: ".")
        try dir.write("input.txt", signingInput)
        try dir.write("public.pem", key.signingKey.publicKeyPEM)
        try Data(TestDER.der(fromRaw: signature)).write(to: URL(fileURLWithPath: dir.file("sig.der")))
        let result = try await openssl(["dgst", "-sha256", "-verify", dir.file("public.pem"), "-signature", dir.file("sig.der"), dir.file("input.txt")])
        #expect(result.status == 0 && result.stdout.contains("Verified OK"))
    }

    @Test func claimsKeepOrderAndReplaceInPlace() {
        var claims: JWTClaims = ["b": 1, "a": "x"]
        claims["c"] = .bool(true)
        claims["b"] = 2
        claims["a"] = nil
        #expect(claims.members.map(\.name) == ["b", "c"])
        #expect(String(decoding: claims.json, as: UTF8.self) == #"{"b":2,"c":true}"#)
        #expect(JWTClaims.seconds(Date(timeIntervalSince1970: 12.9)) == .number(12))
        let escaped: JWTClaims = ["q\"": "line\nbreak"]
        #expect(String(decoding: escaped.json, as: UTF8.self) == #"{"q\"":"line\nbreak"}"#)
        #expect(JWTClaims().json == Array("{}".utf8))
    }

    @Test func verifyRefusesTheWrongAlgorithmNoneAndTampering() async throws {
        let rsa = try await RS256SigningKey(pem: try RSAKeys.shared().pkcs8)
        let ec = try P256PrivateKey.generate()
        let token = try JWT.sign(googleClaims, key: rsa)

        // An RS256 token offered to an ES256 key, and the reverse.
        #expect(throws: JWTError.unsupportedAlgorithm(found: "RS256", expected: .es256)) {
            try JWT.verify(token, key: ec.publicKey.verifyingKey)
        }
        let ecToken = try JWT.sign(googleClaims, key: ec.signingKey)
        #expect(throws: JWTError.unsupportedAlgorithm(found: "ES256", expected: .rs256)) {
            try JWT.verify(ecToken, key: rsa.verifyingKey)
        }

        // alg "none" with an empty signature.
        let pieces = token.split(separator: ".").map(String.init)
        let none = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + pieces[1] + "."
        #expect(throws: JWTError.unsupportedAlgorithm(found: "none", expected: .rs256)) { try JWT.verify(none, key: rsa.verifyingKey) }

        // Claims swapped under the same signature; a signature from another key.
        let forged = [pieces[0], Base64URL.encode(Array(#"{"iss":"evil"}"#.utf8)), pieces[2]].joined(separator: ".")
        #expect(throws: JWTError.badSignature) { try JWT.verify(forged, key: rsa.verifyingKey) }
        let other = try await RS256SigningKey(pem: try RSAKeys.shared().pkcs1)
        #expect(throws: JWTError.badSignature) { try JWT.verify(token, key: other.verifyingKey) }
        #expect(throws: JWTError.badSignature) {
            try JWT.verify(ecToken, key: try P256PrivateKey.generate().publicKey.verifyingKey)
        }
    }

    @Test func decodeRefusesMalformedTokens() throws {
        let header = Base64URL.encode(Array(#"{"alg":"ES256","typ":"JWT"}"#.utf8))
        let claims = Base64URL.encode(Array(#"{"aud":"x"}"#.utf8))
        func reason(_ token: String) -> String? {
            do {
                _ = try JWT.decode(token)
                return nil
            } catch {
                guard case .malformed(let why) = error else { return "\(error)" }
                return why
            }
        }
        #expect(reason("\(header).\(claims).AAAA") == nil)
        #expect(reason("") == "expected three base64url parts separated by dots, found 1")
        #expect(reason("\(header).\(claims)") == "expected three base64url parts separated by dots, found 2")
        #expect(reason("\(header).\(claims).AAAA.BBBB")?.contains("found 4") == true)
        #expect(reason("\(header)==.\(claims).AAAA") == "the header is not unpadded base64url")
        #expect(reason("\(header).\(claims).AA==") == "the signature is not unpadded base64url")
        #expect(reason("\(header).\(Base64URL.encode(Array("[1]".utf8))).AAAA") == "the claims is not a JSON object")
        #expect(reason("\(header).\(Base64URL.encode(Array(#"{"a":1,"a":2}"#.utf8))).AAAA") == "the claims is not a JSON object")
        let typ = Base64URL.encode(Array(#"{"alg":"ES256","typ":"JOSE+JSON"}"#.utf8))
        #expect(reason("\(typ).\(claims).AAAA")?.hasPrefix("the header's \"typ\" must be \"JWT\"") == true)
        let lowerTyp = Base64URL.encode(Array(#"{"alg":"ES256","typ":"jwt"}"#.utf8))
        #expect(reason("\(lowerTyp).\(claims).AAAA") == nil)
        let crit = Base64URL.encode(Array(#"{"alg":"ES256","crit":["exp"]}"#.utf8))
        #expect(reason("\(crit).\(claims).AAAA")?.contains("crit") == true)
        #expect(reason(String(repeating: "A", count: JWT.maxLength + 1)) == "longer than \(JWT.maxLength) bytes")
        let noAlg = try JWT.decode("\(Base64URL.encode(Array("{}".utf8))).\(claims).AAAA")
        #expect(throws: JWTError.malformed("the header's \"alg\" is missing or not a string")) {
            try noAlg.verify(with: try P256PrivateKey.generate().publicKey.verifyingKey)
        }
    }

    @Test func providerTokensAreBuiltByTheSameBuilder() throws {
        // APNs tokens have no typ; the builder leaves it out when asked.
        let key = try P256PrivateKey.generate().signingKey
        let token = try ProviderToken.make(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: Date(timeIntervalSince1970: 7.5), key: key)
        let (header, claims, _) = try parts(token)
        #expect(header == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(claims == #"{"iss":"DEF123GHIJ","iat":7}"#)
        #expect(try JWT.verify(token, key: key.verifyingKey).keyID == "ABC123DEFG")
    }
}
