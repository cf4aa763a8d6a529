/// Checks provider tokens against the configured ES256 public keys (HeraldCrypto).
struct HTTP2ES256TokenVerifier: HTTP2ProviderTokenVerifying {
    init(keys: [APNsHTTP2Simulator.TokenKey]) throws(HTTP2SimulatorError) {
        throw HTTP2SimulatorError("token authentication is not available in this build yet (waiting for HeraldCrypto)")
    }
    func verify(_ jwt: String) -> ProviderTokenClaims? { nil }
}
