import HeraldAPNs
import HeraldCore

/// The daemon's seam to the channel client: `POST /v1/channels` and its kin reach APNs through
/// ``BroadcastChannels``, with the transport's own authentication and management host.
extension APNsHTTP2Transport: BroadcastChannels {
    /// Apple's limit: 10,000 channels per app and environment (an `apns-http2` route is one environment).
    public var maxChannelsPerApp: Int { 10_000 }

    public func createChannel(topic: String, storagePolicy: ChannelStoragePolicy) async -> Result<String, ChannelError> {
        let policy: APNsChannelStoragePolicy = storagePolicy == .mostRecent ? .mostRecentMessageStored : .noMessageStored
        return await channels.create(bundleID: topic, storagePolicy: policy).map(\.id).mapError(Self.channelError)
    }

    public func deleteChannel(topic: String, id: String) async -> Result<Void, ChannelError> {
        await channels.delete(bundleID: topic, channelID: id).mapError(Self.channelError)
    }

    public func listChannels(topic: String) async -> Result<[String], ChannelError> {
        await channels.list(bundleID: topic).mapError(Self.channelError)
    }

    /// Apple's answer in the seam's vocabulary: a channel APNs does not hold is `notFound`, its
    /// limit `limitReached`, no answer, 429 and 5xx `temporary`, the rest `refused`.
    static func channelError(_ e: APNsChannelError) -> ChannelError {
        switch e {
        case .refused(let status, let reason, _):
            switch reason {
            case .channelNotRegistered?, .badChannelId?: return .notFound(e.description)
            case .cannotCreateChannelConfig?: return .limitReached(e.description)
            default:
                if status == 404 { return .notFound(e.description) }
                return e.isTemporary ? .temporary(e.description) : .refused(e.description)
            }
        case .noAnswer: return .temporary(e.description)
        case .setup: return .refused(e.description)
        case .malformedAnswer: return .unknown(e.description)
        }
    }
}
