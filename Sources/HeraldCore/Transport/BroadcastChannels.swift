import FoundationEssentials
import Glibc

/// What a channel keeps for a device that is offline when a broadcast goes out.
public enum ChannelStoragePolicy: String, Sendable, CaseIterable {
    /// Nothing is kept (right for frequent updates such as a score).
    case none
    /// The most recent message is kept and delivered when the device is back.
    case mostRecent = "most_recent"
}

/// Why a channel request to a platform failed, for the API to answer with.
public enum ChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The platform holds no such channel (deleted there, or never created).
    case notFound(String)
    /// Trying again later may work (no answer, throttled, the platform's own failure).
    case temporary(String)
    /// The platform holds as many channels for the app as it allows.
    case limitReached(String)
    /// The platform refused the request for good (credentials, a capability not enabled, a bad request).
    case refused(String)
    /// Anything else the transport could not classify.
    case unknown(String)

    public var description: String {
        switch self {
        case .notFound(let s), .temporary(let s), .limitReached(let s), .refused(let s), .unknown(let s): s
        }
    }
}

/// The seam to a transport that manages broadcast channels (APNs' iOS 18 channels): one
/// message to every device subscribed to a channel. A transport implements it when its platform
/// has channels; the daemon reaches it through this protocol only, never through the plugin.
public protocol BroadcastChannels: Sendable {
    /// The most channels the platform allows per app on this route (APNs: 10,000 per environment).
    var maxChannelsPerApp: Int { get }

    /// Creates a channel for the app whose topic (bundle id) is `topic`; returns its id.
    func createChannel(topic: String, storagePolicy: ChannelStoragePolicy) async -> Result<String, ChannelError>

    /// Deletes a channel.
    func deleteChannel(topic: String, id: String) async -> Result<Void, ChannelError>

    /// The ids of every channel the platform holds for the app (to reconcile with Herald's own).
    func listChannels(topic: String) async -> Result<[String], ChannelError>
}

/// A channel Herald created and keeps on record.
public struct StoredChannel: Sendable, Equatable {
    public var app: String
    /// The platform's channel id.
    public var id: String
    /// The route (transport) it was created through: its platform and environment.
    public var route: String
    public var storagePolicy: ChannelStoragePolicy
    public var createdAt: Date

    public init(app: String, id: String, route: String, storagePolicy: ChannelStoragePolicy, createdAt: Date) {
        self.app = app
        self.id = id
        self.route = route
        self.storagePolicy = storagePolicy
        self.createdAt = createdAt
    }
}

/// Herald's record of the broadcast channels it created (table `channels` in each driver).
public protocol ChannelStore: Sendable {
    /// Records a channel (a repeat of the same app and id replaces it).
    func insertChannel(_ channel: StoredChannel) async throws

    /// The app's channels, oldest first.
    func channels(app: String) async throws -> [StoredChannel]

    /// How many channels the app holds on `route`.
    func channelCount(app: String, route: String) async throws -> Int

    /// Removes a channel's record; whether there was one.
    func removeChannel(app: String, id: String) async throws -> Bool
}
