import FoundationEssentials
import HeraldCore

/// A request to mint a client token that cannot be served; names the input at fault.
public struct ClientTokenIssueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The input at fault: `app`, `user`, `device` or `ttl` (the CLI shows `--<field>`, the API `field`).
    public var field: String
    /// What was wrong and what to do.
    public var message: String

    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }

    public var description: String { "\(field): \(message)" }
}

extension ClientToken {
    /// Lifetime of a token minted without one: an hour.
    public static let defaultLifetime: TimeInterval = 3600
    /// The longest lifetime a minted token may have: 30 days.
    public static let maxLifetime: TimeInterval = 30 * 86_400
    /// The longest user id accepted, in bytes (``FieldLimits/userIDBytes``, as everywhere).
    public static let maxUserBytes = FieldLimits.userIDBytes.upperBound

    /// Mints a token for one user's device of `app`, as `herald client-token` and
    /// `POST /v1/client-tokens` do: one set of rules for both.
    /// - Parameters:
    ///   - device: an APNs token or installation id; normalised with ``DeviceToken/normalize(_:)``.
    ///   - lifetime: seconds, 1 s to ``maxLifetime``.
    /// - Throws: ``ClientTokenIssueError`` naming the input at fault (an app without `clientSecret` included).
    public static func issue(app: AppConfiguration, user: String, device: String, lifetime: TimeInterval,
                             now: Date) throws(ClientTokenIssueError) -> (token: String, claims: ClientTokenClaims) {
        guard let secret = app.clientSecret else {
            throw ClientTokenIssueError(field: "app", message: "app \(app.id) has no clientSecret, so it cannot have client tokens; "
                                        + "add \"clientSecret\": \"${CLIENT_SECRET}\" (at least \(AppConfiguration.minimumClientSecretBytes) bytes) to its entry in the config")
        }
        if let problem = FieldLimits.userProblem(user) { throw ClientTokenIssueError(field: "user", message: problem) }
        let normalized: String
        do { normalized = try DeviceToken.normalize(device) } catch {
            throw ClientTokenIssueError(field: "device", message: "\(error) (a device id is the APNs token, or an installation id "
                                        + "such as a UUID's 32 hex digits)")
        }
        guard lifetime.isFinite, lifetime >= 1, lifetime <= maxLifetime else {
            throw ClientTokenIssueError(field: "ttl", message: "must be between 1 second and \(Int(maxLifetime / 86_400)) days, found \(lifetime) seconds")
        }
        let issuedAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = ClientTokenClaims(user: user, app: app.id, device: normalized, issuedAt: issuedAt,
                                       expiresAt: issuedAt.addingTimeInterval(lifetime.rounded(.down)))
        return (sign(claims, secret: secret), claims)
    }
}
