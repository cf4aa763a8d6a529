import FoundationEssentials

extension TokenStore {
    /// The one rule on who may hold a client token for a device, for every minting path
    /// (`POST /v1/client-tokens`, `herald client-token`) and for streams (`GET /v1/stream`): a
    /// device the store knows belongs to its registered user only; a device it does not know
    /// (such as a browser's installation id) to whoever holds a token for it.
    /// - Parameter device: normalised (``DeviceToken/normalize(_:)``).
    /// - Returns: what is wrong (names no secret; the token shortened), or `nil` when `user` may have the device.
    /// - Throws: what the store throws (``StoreUnavailableError`` when it cannot be asked).
    public func clientTokenOwnerProblem(app: String, device: String, user: String) async throws -> String? {
        guard let known = try await self.device(app: app, token: device), known.user != user else { return nil }
        return "device \(Redact.token(device)) belongs to another user"
    }
}
