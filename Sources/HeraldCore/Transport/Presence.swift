import FoundationEssentials

/// Which devices have a live stream open to the daemon (the local transport's "foreground").
///
/// The daemon's stream hub implements it; the fan-out asks it when it plans a notification for
/// an app whose `foreground` policy is not `push-only`.
public protocol Presence: Sendable {
    /// The connected devices of `users` for `app`, by user (users with none are left out).
    func connectedDevices(app: String, users: [String]) -> [String: Set<String>]
}

/// What a local transport can do with the daemon's live streams.
///
/// The daemon's stream hub implements it and hands it to transports in
/// ``TransportContext/streams``; a plugin never sees HTTP or the store.
public protocol LocalStreams: Sendable {
    /// Writes each delivery to its device's open stream(s) after recording it in the inbox
    /// (so a client that reconnects with `Last-Event-ID` gets it again). Returns one result per
    /// delivery, in order.
    func write(_ deliveries: [Delivery]) async -> [LocalWriteResult]
}

/// What became of one delivery handed to ``LocalStreams/write(_:)``.
public enum LocalWriteResult: Sendable, Equatable {
    /// Written to a live stream with this event id (a client that does not acknowledge).
    case written(id: Int64)
    /// Written to an acknowledging client's stream with this event id, and acknowledged by it.
    case acknowledged(id: Int64)
    /// The device has no open stream; `since` is when its last one closed (`nil`: none in this run).
    case notConnected(since: Date?)
    /// The inbox could not record it (the store is away): try again later.
    case unavailable(reason: String)
}
