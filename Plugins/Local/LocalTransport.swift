import FoundationEssentials
import HeraldCore

/// The `local` transport: foreground delivery through the daemon's live streams.
///
/// An app that is open holds a stream to Herald (`GET /v1/stream`); a delivery routed here is
/// written down that stream. It is `delivered` once the client acknowledged it, when the client
/// opened its stream with `ack=1`, and once written otherwise. An acknowledging client that lets
/// the app's `ackTimeout` pass is reported `notConnected` (with no date: no presence grace), so
/// the delivery goes to its fallback route at once. A device with no open stream is
/// reported `notConnected`, and the delivery engine decides what follows (wait out the app's
/// `presenceGrace`, fall back to the push route, or wait in the inbox until the device returns
/// or the inbox TTL ends). The transport knows neither HTTP nor the store: it talks to the
/// daemon's stream hub through ``LocalStreams``.
///
/// ```json
/// "live": {"type": "local"}
/// ```
public final class LocalTransport: TransportPlugin, InboxNumberingTransport {
    /// The `local` transport has no keys besides `type`.
    public struct Configuration: TransportConfiguration {
        public var summary: String { "live streams of the daemon (GET /v1/stream)" }
        public init() {}

        /// The neutral content as JSON with the notification id; refused when it has nothing of
        /// its own to show (only other platforms' override blocks), so that such a notification
        /// goes to a connected device's push route instead of an empty stream event.
        public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
            guard content.hasVisibleText || content.badge != nil || content.sound != nil || content.imageURL != nil
                || !content.data.isEmpty || content.contentAvailable else {
                throw ContentProblem(field: "body", "nothing for the app's stream to show: the notification has only other platforms' "
                                     + "override blocks (give title, body, badge, sound, image, data or content_available)")
            }
            var w = JSONWriter(capacity: 256)
            w.object { o in
                o.string("id", context.notificationID)
                o.string("app", context.app)
                content.writeDisplayJSON(into: &o)
            }
            return RenderedPayload(body: w.bytes, expiration: content.expiration)
        }
    }

    public static let kind = HeraldConfiguration.localKind

    public static func configuration(from node: ConfigNode) -> Configuration? { Configuration() }

    public let name: String
    private let streams: (any LocalStreams)?

    public init(name: String, configuration: Configuration, context: TransportContext) throws {
        self.name = name
        self.streams = context.streams
    }

    /// The stream hub numbers this transport's batches as they are claimed (one commit per batch).
    public var inboxNumbering: (any InboxNumbering)? { streams as? any InboxNumbering }

    /// Large: a broadcast's cost is the commits per batch (claim, inbox, outcome), not the writes.
    public var preferredBatchSize: Int { 2000 }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        guard let streams else {
            // `herald send` has no streams: only the daemon serves them.
            return batch.map { _ in .setupFailure(reason: "local delivery needs the daemon (herald serve): streams live there") }
        }
        let results = await streams.write(batch)
        guard results.count == batch.count else {
            return batch.map { _ in .retry(after: nil, reason: "the stream hub returned a wrong number of results") }
        }
        return results.map { result in
            switch result {
            case .written(let id): return .delivered(receipt: nil, evidence: "written to the device's stream as event \(id)")
            case .acknowledged(let id): return .delivered(receipt: nil, evidence: "acknowledged by the device as event \(id)")
            case .notConnected(let since): return .notConnected(since: since)
            case .unavailable(let reason): return .retry(after: 1, reason: reason)
            }
        }
    }

    public func checkReport() async -> [CheckFinding] {
        [CheckFinding(.ok, "local: notifications for connected devices go down their streams (GET /v1/stream)")]
    }
}
