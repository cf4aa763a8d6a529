import FoundationEssentials
import Glibc

/// Where devices live: registrations, lookups for fan-out, and invalidation.
///
/// The SQLite store (`HeraldSQLite`) implements it today; a PostgreSQL store can follow without
/// touching the dispatcher. Implementations must be safe to call from many tasks at once.
public protocol TokenStore: Sendable {
    /// Registers a device, or updates it when the token is already known for the app.
    ///
    /// A known token registered under another user moves to that user (a phone changed
    /// hands). Registering clears an earlier invalidation and sets `updatedAt` to `now`.
    /// With ``DeviceRegistration/maxPerUser``, the user's least recently registered other devices
    /// beyond it are removed in the same transaction (invalidated ones count), so registering
    /// never fails for the bound and the user's devices never exceed it.
    func register(_ registration: DeviceRegistration, at now: Date) async throws -> RegistrationResult

    /// Removes a device; `false` when it was not there.
    func unregister(app: String, token: String) async throws -> Bool

    /// The device with this token, invalidated or not.
    func device(app: String, token: String) async throws -> Device?

    /// Devices of many users at once (one query per batch, for fan-out), most recently
    /// registered first within each user.
    func devices(app: String, users: [String], includeInvalidated: Bool) async throws -> [Device]

    /// The devices among `tokens` (normalised hex) that the store knows for `app`, invalidated
    /// or not, in no particular order: one look-up for a chunk of a bulk send.
    func devices(app: String, tokens: [String]) async throws -> [Device]

    /// Devices filtered by app and/or user, for listings.
    func listDevices(app: String?, user: String?, limit: Int?) async throws -> [Device]

    /// Marks a token dead as of `time`, following Apple's timestamp rule: a device registered
    /// again after `time` is kept.
    func invalidate(app: String, token: String, at time: Date, reason: String) async throws -> InvalidationResult

    /// Deletes devices invalidated before `cutoff`; returns how many.
    func prune(invalidatedBefore cutoff: Date) async throws -> Int
}

extension TokenStore {
    /// One ``device(app:token:)`` per token; drivers override it with one query.
    public func devices(app: String, tokens: [String]) async throws -> [Device] {
        var found: [Device] = []
        for token in tokens {
            if let d = try await device(app: app, token: token) { found.append(d) }
        }
        return found
    }
}

/// What ``TokenStore/register(_:at:)`` did.
public struct RegistrationResult: Sendable, Equatable {
    public enum Change: String, Sendable {
        /// A new device.
        case created
        /// A known device, same user (re-registered, transport/environment refreshed).
        case updated
        /// A known token now owned by another user.
        case moved
    }
    public var change: Change
    public var device: Device
    /// The previous owner, for `moved`.
    public var previousUser: String?
    /// The tokens of the user's devices removed to keep ``DeviceRegistration/maxPerUser``
    /// (least recently registered first).
    public var removed: [String]

    public init(change: Change, device: Device, previousUser: String? = nil, removed: [String] = []) {
        self.change = change
        self.device = device
        self.previousUser = previousUser
        self.removed = removed
    }

    /// Logs each device removed for the bound (token shortened) and counts them in
    /// `herald_devices_removed_total{app, reason="maxRegisteredDevicesPerUser"}`.
    public func reportRemoved(logger: Logger, metrics: MetricsRegistry) {
        guard !removed.isEmpty else { return }
        metrics.counter("herald_devices_removed_total", help: "Devices removed by Herald itself, by app and reason.",
                        labels: [("app", device.app), ("reason", "maxRegisteredDevicesPerUser")]).increment(by: Int64(removed.count))
        for token in removed {
            logger.notice("device removed: its user registered more than maxRegisteredDevicesPerUser; the least recently registered went",
                          ["app": device.app, "user": device.user, "token": Redact.token(token), "kept_for": Redact.token(device.token)])
        }
    }
}

/// What ``TokenStore/invalidate(app:token:at:reason:)`` did.
public enum InvalidationResult: String, Sendable, Equatable {
    /// The device is now marked invalid.
    case invalidated
    /// Already invalid; nothing changed.
    case alreadyInvalid
    /// Registered again after Apple's timestamp: kept (the timestamp rule).
    case keptReRegistered
    /// No such device.
    case unknown
}

/// A store operation failed; the message says what and what to do.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
