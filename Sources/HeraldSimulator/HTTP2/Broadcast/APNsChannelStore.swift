import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A broadcast the simulator accepted on `/4/broadcasts/apps/{bundle}`.
public struct ReceivedBroadcast: Sendable {
    /// When it was accepted (the simulator's clock).
    public var time: Date
    /// The bundle id from the path.
    public var bundleID: String
    /// `apns-channel-id`.
    public var channelID: String
    /// `apns-priority` (Apple's default 10 when absent).
    public var priority: Int
    /// `apns-expiration`, if sent.
    public var expiration: Int64?
    /// The `apns-request-id` answered (the request's, else a new one).
    public var requestID: String
    /// The `apns-unique-id` answered (sandbox only).
    public var uniqueID: String?
    /// The body.
    public var payload: [UInt8]

    /// The body parsed as JSON (`nil` if it is not JSON).
    public var payloadJSON: JSONValue? { try? JSONValue.parse(payload) }
}

/// The broadcast channels one simulated APNs environment holds, per bundle id, and the broadcasts
/// sent on them. Shared by the management port and the provider port; thread-safe.
///
/// Apple: "you can maintain up to 10,000 channels for your app in the development and production
/// environment, respectively" (``limit``).
public final class APNsChannelStore: Sendable {
    /// A channel as APNs keeps it.
    public struct Channel: Sendable, Equatable {
        /// The `apns-channel-id` APNs made (base64 of 16 random bytes).
        public var id: String
        /// `message-storage-policy`: 0 stores no message, 1 the most recent one.
        public var storagePolicy: Int
    }

    /// Channels allowed per bundle (Apple: 10,000 per environment).
    public let limit: Int
    /// Whether accepted broadcasts are kept in ``broadcasts`` (off for long benchmarks; ``broadcastCount`` counts them anyway).
    public let retainsBroadcasts: Bool
    private let state = Locked<State>(State())

    private struct State {
        var channels: [String: [String: Channel]] = [:]
        var order: [String: [String]] = [:]
        var broadcasts: [ReceivedBroadcast] = []
        var broadcastCount = 0
    }

    /// An empty store allowing `limit` channels per bundle.
    public init(limit: Int = 10_000, retainsBroadcasts: Bool = true) {
        self.limit = limit
        self.retainsBroadcasts = retainsBroadcasts
    }

    /// Why a channel cannot be made.
    enum CreateError: Error { case limitReached }

    /// Makes a channel for `bundle`, or refuses past ``limit``.
    func create(bundle: String, storagePolicy: Int) -> Result<Channel, CreateError> {
        state.withLock { s in
            if s.channels[bundle, default: [:]].count >= limit { return .failure(.limitReached) }
            var id = Self.newID()
            while s.channels[bundle]?[id] != nil { id = Self.newID() }
            let channel = Channel(id: id, storagePolicy: storagePolicy)
            s.channels[bundle, default: [:]][id] = channel
            s.order[bundle, default: []].append(id)
            return .success(channel)
        }
    }

    /// The channel `id` of `bundle`, if it exists.
    public func channel(bundle: String, id: String) -> Channel? { state.withLock { $0.channels[bundle]?[id] } }

    /// Deletes the channel; `false` when there was none.
    func delete(bundle: String, id: String) -> Bool {
        state.withLock { s in
            guard s.channels[bundle]?.removeValue(forKey: id) != nil else { return false }
            s.order[bundle]?.removeAll { $0 == id }
            return true
        }
    }

    /// The channel ids of `bundle`, oldest first.
    public func channelIDs(bundle: String) -> [String] { state.withLock { $0.order[bundle] ?? [] } }

    /// Records an accepted broadcast.
    func record(_ broadcast: ReceivedBroadcast) {
        state.withLock { s in
            s.broadcastCount += 1
            if retainsBroadcasts { s.broadcasts.append(broadcast) }
        }
    }

    /// Every accepted broadcast so far, in arrival order (when ``retainsBroadcasts``).
    public var broadcasts: [ReceivedBroadcast] { state.withLock { $0.broadcasts } }

    /// How many broadcasts were accepted.
    public var broadcastCount: Int { state.withLock { $0.broadcastCount } }

    /// Whether `id` has the form of Apple's channel ids: base64 (standard alphabet, padded) of
    /// 1–64 bytes.
    static func isWellFormedID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard !bytes.isEmpty, bytes.count <= 88, bytes.count % 4 == 0 else { return false }
        var padding = 0
        for (i, c) in bytes.enumerated() {
            if c == UInt8(ascii: "=") {
                padding += 1
                guard i >= bytes.count - 2 else { return false }
                continue
            }
            guard padding == 0 else { return false }
            let ok = (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39)
                || c == UInt8(ascii: "+") || c == UInt8(ascii: "/")
            guard ok else { return false }
        }
        return true
    }

    private static func newID() -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        return Data(bytes).base64EncodedString()
    }
}
