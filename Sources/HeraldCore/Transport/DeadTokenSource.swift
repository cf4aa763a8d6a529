import FoundationEssentials
import Glibc

/// A token a peer reported dead outside a delivery's answer (APNs' feedback service).
public struct DeadToken: Sendable, Equatable {
    /// Normalised hex token.
    public var token: String
    /// When the peer says the token stopped being valid (Apple's timestamp): a device
    /// registered again after this stays.
    public var since: Date
    /// What the peer said, for logs and the device's record.
    public var reason: String

    public init(token: String, since: Date, reason: String) {
        self.token = token
        self.since = since
        self.reason = reason
    }
}

/// A transport that learns of dead tokens out of band.
///
/// The transport only reports what its peer said; the host (the daemon on a schedule,
/// `herald feedback` on demand) applies the reports to the token store through
/// ``TokenInvalidator``, so plugins never touch the store.
public protocol DeadTokenSource: Transport {
    /// How often the daemon asks; `nil` when it should not poll on its own.
    var deadTokenPollInterval: TimeInterval? { get }

    /// Reads the tokens the peer reports dead now (reading may consume them, as APNs'
    /// feedback service does: apply what comes back).
    func fetchDeadTokens() async throws -> [DeadToken]
}
