import FoundationEssentials
import Glibc
import HeraldCrypto

/// Checks provider tokens as APNs does: a JWT whose header has `alg` ES256 and a known `kid`,
/// whose claims have `iss` equal to that key's team and an integer `iat`, signed (raw `R‖S`,
/// base64url) by that key.
struct HTTP2ES256TokenVerifier: HTTP2ProviderTokenVerifying {
    private let keys: [String: (teamID: String, key: ES256VerifyingKey)]

    init(keys: [APNsHTTP2Simulator.TokenKey]) throws(HTTP2SimulatorError) {
        var loaded: [String: (teamID: String, key: ES256VerifyingKey)] = [:]
        for k in keys {
            guard !k.keyID.isEmpty, !k.teamID.isEmpty else {
                throw HTTP2SimulatorError("a token key needs a key id and a team id (found key id \"\(k.keyID)\", team \"\(k.teamID)\")")
            }
            do {
                loaded[k.keyID] = (k.teamID, try ES256VerifyingKey(pemFile: k.publicKeyFile))
            } catch {
                throw HTTP2SimulatorError("public key for key id \(k.keyID): \(error.description)")
            }
        }
        self.keys = loaded
    }

    func verify(_ jwt: String) -> ProviderTokenClaims? {
        guard let parsed = ProviderToken.parse(jwt), parsed.algorithm == "ES256",
              let keyID = parsed.keyID, let entry = keys[keyID], parsed.issuer == entry.teamID,
              let issuedAt = parsed.issuedAt, parsed.issuedAtIsInteger,
              parsed.verify(with: entry.key) else { return nil }
        return ProviderTokenClaims(keyID: keyID, teamID: entry.teamID, issuedAt: issuedAt)
    }
}
