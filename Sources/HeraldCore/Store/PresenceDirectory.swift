import FoundationEssentials

/// Which devices have a live stream open on which node, shared by the nodes of one database.
///
/// A node records its own streams here; the fan-out reads the devices whose streams are open on
/// *other* nodes from it (``remoteDevices(app:users:)``), and the queue claims a device's local
/// deliveries only on the node its stream is open on. A single-node storage (SQLite, memory)
/// has nobody to tell: ``SingleNodePresence``.
public protocol PresenceDirectory: Sendable {
    /// Records that `device` (of `user`, for `app`) has a stream open on this node, served by the
    /// local transport `transport`. Written in the background, in call order with
    /// ``disconnected(app:device:)``; ``published()`` waits for it.
    func connected(app: String, user: String, device: String, transport: String)

    /// The device's last stream on this node closed.
    func disconnected(app: String, device: String)

    /// Returns once everything recorded so far is visible to the other nodes.
    /// - Throws: when the database does not take it (it is written once the database is back).
    func published() async throws

    /// Devices of `users` with a stream open on another live node, by user (users with none are
    /// left out).
    func remoteDevices(app: String, users: [String]) -> [String: Set<String>]
}

/// The presence directory of a storage only one node uses: every stream is this node's.
public struct SingleNodePresence: PresenceDirectory {
    public init() {}
    public func connected(app: String, user: String, device: String, transport: String) {}
    public func disconnected(app: String, device: String) {}
    public func published() async throws {}
    public func remoteDevices(app: String, users: [String]) -> [String: Set<String>] { [:] }
}

/// This node's streams and the other nodes' (from a ``PresenceDirectory``), as the fan-out sees them.
public struct ClusterPresence: Presence {
    public let local: any Presence
    public let directory: any PresenceDirectory

    public init(local: any Presence, directory: any PresenceDirectory) {
        self.local = local
        self.directory = directory
    }

    public func connectedDevices(app: String, users: [String]) -> [String: Set<String>] {
        var devices = local.connectedDevices(app: app, users: users)
        for (user, remote) in directory.remoteDevices(app: app, users: users) { devices[user, default: []].formUnion(remote) }
        return devices
    }
}
